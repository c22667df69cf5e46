"""HTTP/1.1 framing and parsing: web/request.py beside h11, on a real Prometheus request.

    python -m bench.web_parse [--requests 20000] [--connections 5000] [--rounds 5]

Prometheus (the newest release the tests run) scrapes a listener that records its request,
with a bearer token as it sends under --web.kube-rbac. Then each side runs in a fresh
interpreter:

- import: RSS after importing the server (web/server.py), and with h11 as well;
- CPU per request: `--requests` requests on one keep-alive connection, each framed,
  parsed into a Request and answered with a 200 head and body; ours is
  web/request.py's request_length() and parse() and web/answer.py's Response.encode(),
  h11's the same through an h11.Connection (H11Framing below: what web/request.py would
  keep around h11, with the same refusals); the median of `--rounds`;
- memory per idle connection: `--connections` connections' state after one answered
  request, from tracemalloc (ours: web/connections.py's Conn and its buffer; with h11:
  the same Conn plus its h11.Connection);
- the refusals tests/web/test_http_edges.py checks, and a few more: each side's answer.

Writes bench/results/web_parse.md.
"""

from __future__ import annotations

import argparse
import platform
import socket
import statistics
import tempfile
import threading
from pathlib import Path

from bench import peers

RESULTS = peers.ROOT / "bench" / "results" / "web_parse.md"
H11 = ("h11", "0.16.0")
# A service-account token is a JWT of about this many characters.
TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjE" + "x" * 900
BODY = b"# HELP kubescale_build_info\n" * 150  # ~4 KiB, a gzipped node scrape's size

EDGES = {
    "a GET with a 31-byte body, then a GET": b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
    b"Content-Length: 31\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    "Transfer-Encoding: chunked": b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
    b"\r\n\r\n0\r\n\r\n",
    "Content-Length: 10000000": b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n",
    "Content-Length 5 and 6": b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
    b"Content-Length: 6\r\n\r\n",
    "Content-Length: -1": b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    "a 20 KiB head": b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 20480 + b"\r\n\r\n",
    "HTTP/2.0 request line": b"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
    "a space before a header's colon": b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
    "HTTP/1.0, no keep-alive": b"GET / HTTP/1.0\r\n\r\n",
}


def prometheus_version() -> str:
    """The version of the Prometheus prometheus_request() runs."""
    from testbed import prometheus  # noqa: PLC0415  (the bench's side only)

    return prometheus.version(prometheus.NEWEST)


def prometheus_request(workdir: Path) -> bytes:
    """The bytes of one scrape request by a real Prometheus."""
    from testbed.prometheus import PrometheusServer  # noqa: PLC0415  (the bench's side only)

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(60)
    got: list[bytes] = []

    def record():
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            got.append(data)

    thread = threading.Thread(target=record)
    thread.start()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "node",
                "authorization": {"credentials": TOKEN},
                "static_configs": [{"targets": [f"127.0.0.1:{listener.getsockname()[1]}"]}],
            }
        ],
    }
    try:
        with PrometheusServer(workdir, config):
            thread.join(60)
    finally:
        listener.close()
    if not got:
        raise RuntimeError("Prometheus sent no request within 60 s")
    return got[0]


# --- run in a fresh interpreter per side ----------------------------------------------------


class H11Framing:
    """web/request.py's request_length() and parse() done by h11, one per connection: fed
    the bytes as they come, a whole Request (its body read and dropped) or None; the same
    refusals as ours (Transfer-Encoding, bodies over MAX_BODY, too many headers)."""

    def __init__(self, h11, request):
        self.h11, self.rq = h11, request
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=request.MAX_HEAD)
        self.request = None

    def feed(self, data: bytes):
        h11, rq = self.h11, self.rq
        if data:  # h11 takes b"" for the end of the stream
            self.conn.receive_data(data)
        try:
            while True:
                event = self.conn.next_event()
                if event is h11.NEED_DATA or event is h11.PAUSED:
                    return None
                if isinstance(event, h11.Request):
                    self.request = self._request(event)
                elif isinstance(event, h11.EndOfMessage):
                    done, self.request = self.request, None
                    return done
        except h11.RemoteProtocolError as exc:
            raise rq.BadRequest(exc.error_status_hint, str(exc)) from None

    def _request(self, event):
        rq = self.rq
        if len(event.headers) > rq.MAX_HEADERS:
            raise rq.BadRequest(431, "too many headers")
        headers: dict[str, str] = {}
        for name, value in event.headers:
            name, value = name.decode("latin-1"), value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        if "transfer-encoding" in headers:
            raise rq.BadRequest(501, "request bodies (Transfer-Encoding) are not supported")
        if int(headers.get("content-length", "0")) > rq.MAX_BODY:
            raise rq.BadRequest(413, "request body too large")
        version = "HTTP/" + event.http_version.decode()
        connection = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        keep = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
        method, target = event.method.decode(), event.target.decode("latin-1")
        return rq.Request(method, target, version, headers, keep)

    def answer(self, response, head_only: bool, keep_alive: bool) -> bytes:
        """The answer's bytes, as Response.encode() writes them, through h11."""
        h11 = self.h11
        from email.utils import formatdate  # noqa: PLC0415
        from http import HTTPStatus  # noqa: PLC0415

        headers = [
            ("Server", "kube-scale-exporter"),
            ("Date", formatdate(usegmt=True)),
            ("Content-Type", response.content_type),
            ("Content-Length", str(len(response.body))),
            *response.headers,
            *([] if keep_alive else [("Connection", "close")]),
        ]
        reason = HTTPStatus(response.status).phrase.encode()
        out = self.conn.send(
            h11.Response(status_code=response.status, headers=headers, reason=reason)
        )
        if not head_only:
            out += self.conn.send(h11.Data(data=response.body))
        out += self.conn.send(h11.EndOfMessage())
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
        return out


SIDE = r"""
import json, sys, time, tracemalloc
cfg = json.loads(sys.argv[1])
RSS
rss_bare = rss_mib()
import kube_scale_exporter.web.server
from kube_scale_exporter.web import request as rq
from kube_scale_exporter.web.answer import Response
from kube_scale_exporter.web.connections import Conn
rss_server = rss_mib()
data = cfg["request"].encode("latin-1")
response = Response(200, cfg["body"].encode("latin-1"), headers=[("Vary", "Accept-Encoding")])
if cfg["side"] == "h11":
    import h11
    rss_lib = rss_mib()
    from bench.web_parse import H11Framing
    class Conn(Conn):  # the server would keep the h11.Connection on its Conn
        __slots__ = ("framing",)
    def connection():
        conn = Conn(None, "10.0.0.1")
        conn.framing = H11Framing(h11, rq)
        return conn
    def serve(conn, data):
        out = []
        rest = data
        while True:
            request = conn.framing.feed(rest)
            rest = b""
            if request is None:
                return out
            out.append(conn.framing.answer(response, request.method == "HEAD", request.keep_alive))
            if not request.keep_alive:
                return out
else:
    rss_lib = rss_server
    def connection():
        return Conn(None, "10.0.0.1")
    def serve(conn, data):
        out = []
        conn.buf += data
        while True:
            length = rq.request_length(conn.buf)
            if length is None:
                return out
            request = rq.parse(bytes(conn.buf[:length]))
            del conn.buf[:length]
            out.append(response.encode(request.method == "HEAD", request.keep_alive))
            if not request.keep_alive:
                return out
def per_request():
    conn = connection()
    started = time.process_time()
    for _ in range(cfg["requests"]):
        out = serve(conn, data)
    return (time.process_time() - started) / cfg["requests"], out
rounds = [per_request() for _ in range(cfg["rounds"])]
answer = rounds[-1][1][0]
tracemalloc.start()
before = tracemalloc.get_traced_memory()[0]
held = []
for _ in range(cfg["connections"]):
    conn = connection()
    serve(conn, data)
    held.append(conn)
per_conn = (tracemalloc.get_traced_memory()[0] - before) / cfg["connections"]
tracemalloc.stop()
edges = {}
for name, raw in cfg["edges"].items():
    try:
        got = serve(connection(), raw.encode("latin-1"))
        edges[name] = " + ".join(a.split(b" ")[1].decode() for a in got) or "waits for more"
        if got and b"Connection: close" in got[-1]:
            edges[name] += ", close"
    except rq.BadRequest as exc:
        edges[name] = f"{exc.status}, close"
print(json.dumps({
    "rss_bare": rss_bare, "rss_server": rss_server, "rss_lib": rss_lib,
    "us_per_request": [r[0] * 1e6 for r in rounds], "bytes_per_conn": per_conn,
    "answer_head": answer[: answer.index(b"\r\n\r\n")].decode("latin-1"), "edges": edges,
}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--connections", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    opts = ap.parse_args()
    h11_dir = peers.install(*H11)
    with tempfile.TemporaryDirectory(prefix="bench-parse-") as tmp:
        request = prometheus_request(Path(tmp))
    cfg = {
        "request": request.decode("latin-1"),
        "body": BODY.decode("latin-1"),
        "requests": opts.requests,
        "connections": opts.connections,
        "rounds": opts.rounds,
        "edges": {k: v.decode("latin-1") for k, v in EDGES.items()},
    }
    code = SIDE.replace("RSS\n", peers.RSS_MIB)
    ours = peers.run(code, dict(cfg, side="ours"))
    theirs = peers.run(code, dict(cfg, side="h11"), h11_dir)
    print(ours, theirs, sep="\n")
    write(opts, request, ours, theirs, peers.versions(h11_dir)["h11"])


def write(opts, request: bytes, ours: dict, theirs: dict, h11_version: str) -> None:
    from kube_scale_exporter.web import request as rq  # noqa: PLC0415
    from kube_scale_exporter.web.answer import Response  # noqa: PLC0415

    med_ours = statistics.median(ours["us_per_request"])
    med_h11 = statistics.median(theirs["us_per_request"])
    kib_ours = ours["bytes_per_conn"] / 1024
    kib_h11 = theirs["bytes_per_conn"] / 1024
    head = request[: request.index(b"\r\n\r\n")].decode("latin-1").replace(TOKEN, "<token>")
    ours_lines = sum(peers.code_lines(f) for f in (rq.request_length, rq._content_length, rq.parse))
    ours_lines += peers.code_lines(Response.encode)
    rows = [
        ("RSS after importing the server, MiB", ours["rss_server"], theirs["rss_lib"], ".1f"),
        ("CPU per request (framed, parsed, answered), us", med_ours, med_h11, ".1f"),
        ("memory per idle connection, KiB", kib_ours, kib_h11, ".2f"),
        (
            "lines of code of framing, parsing and the answer's head",
            ours_lines,
            peers.code_lines(H11Framing),
            "d",
        ),
    ]
    lines = [
        "# HTTP/1.1 framing and parsing: web/request.py beside h11",
        "",
        f"`python -m bench.web_parse` on {platform.node()} (Python {platform.python_version()}); "
        f"ours: {peers.ours()}; peer: h11 {h11_version} (pure Python), through `H11Framing` in bench/web_parse.py "
        "(what web/request.py would keep around it). Machine: 2 cores, shared.",
        "",
        f"The request, as Prometheus {prometheus_version()} sent it ({len(request)} bytes, a "
        f"{len(TOKEN)}-character bearer token as under --web.kube-rbac):",
        "",
        "```",
        head,
        "```",
        "",
        "| measure | ours | h11 | h11 - ours | h11 / ours |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, a, b, fmt in rows:
        lines.append(f"| {name} | {a:{fmt}} | {b:{fmt}} | {b - a:+{fmt}} | {b / a:.1f}x |")
    lines += [
        "",
        f"CPU: {opts.requests} requests on one keep-alive connection, median of {opts.rounds} "
        "rounds (each side in a fresh interpreter). Memory: "
        f"{opts.connections} connections' state after one answered request, from "
        "tracemalloc: the Conn the server keeps of each and, on the h11 side, its "
        "h11.Connection (ours needs no parser state between requests: the buffer is all). "
        f"At the default --web.max-connections (512) the difference is "
        f"{(kib_h11 - kib_ours) * 512 / 1024:.1f} MiB per pod; the import adds "
        f"{theirs['rss_lib'] - theirs['rss_server']:.1f} MiB to each node pod. Lines: "
        "web/request.py's request_length, _content_length and parse with Response.encode, "
        "against H11Framing.",
        "",
        "Each side's answer to the same bytes (status codes in order; `close`: the connection "
        "is closed after it):",
        "",
        "| request | ours | h11 |",
        "|---|---|---|",
    ]
    for name in EDGES:
        lines.append(f"| {name} | {ours['edges'][name]} | {theirs['edges'][name]} |")
    peers.report(RESULTS, lines)


if __name__ == "__main__":
    main()
