"""An HTTP(S) proxy in front of a real server that injects the faults the server won't make.

The real kube-apiserver (or etcd's gateway) answers behind it; a test switches faults on
and off per request path:

    proxy = FaultProxy(upstream="https://127.0.0.1:6443", upstream_verify=ca_file,
                       certfile=cert, keyfile=key).start()
    proxy.inject(r"/api/v1/pods", status=429, headers={"Retry-After": "2"}, times=3)
    proxy.inject(r"watch=true", hang=True)        # accept, then never answer
    proxy.clear()
    proxy.cut_streams(r"watch=1")                 # end the answers streaming now (EOF)
    proxy.inject(r"/metrics", status=200, chunks=lambda: endless(b"x"))  # a hostile reply
    proxy.inject(r"/v3/", status=200, chunks=lambda: drip(b"{}"), length=2)

`chunks` makes the answer a stream: a function returning the iterable of its pieces,
sent as they come (chunked, or after `length` as Content-Length, true or not), so a test
can send replies of any size or pace without holding them in memory.

Every request is counted in `proxy.requests` as (method, path, status or "hang"), so tests
can assert how often and how fast a client retried.
"""

from __future__ import annotations

import re
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests
import urllib3


HOP_HEADERS = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "host",
    "content-encoding",
}


@dataclass
class Fault:
    pattern: re.Pattern
    status: int | None = None
    headers: dict = field(default_factory=dict)
    body: bytes = b""
    hang: bool = False
    times: int | None = None  # None: until cleared
    chunks: object = None  # a function returning an iterable of bytes: a streamed answer
    length: int | None = None  # with chunks: the Content-Length to declare


def endless(piece: bytes, size: int = 1 << 16):
    """The same bytes for ever, `size` at a time (a reply with no end)."""
    block = (piece * (size // len(piece) + 1))[:size]
    while True:
        yield block


def repeat(piece: bytes, total: int, size: int = 1 << 16):
    """`total` bytes made of `piece`, `size` at a time."""
    block = (piece * (size // len(piece) + 1))[:size]
    for _ in range(total // size):
        yield block
    yield block[: total % size]


def drip(data: bytes, every: float = 1.0):
    """One byte of `data` per `every` seconds, then more spaces for ever."""
    for i in range(len(data)):
        yield data[i : i + 1]
        time.sleep(every)
    while True:
        yield b" "
        time.sleep(every)


class FaultProxy:
    def __init__(
        self,
        upstream: str,
        upstream_verify=True,
        certfile=None,
        keyfile=None,
        upstream_headers=None,
    ):
        self.upstream = upstream.rstrip("/")
        self.upstream_verify = upstream_verify
        self.upstream_headers = upstream_headers or {}
        self.scheme = "https" if certfile else "http"
        self.requests: list[tuple[str, str, object, float]] = []
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._streams: dict[int, tuple[str, object]] = {}  # id -> (path, client socket)
        handler = type("Bound", (_Handler,), {"proxy": self})
        # Port 0: the kernel's choice, bound at once (a port found free can be taken).
        self.server = _Server(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.url = f"{self.scheme}://127.0.0.1:{self.port}"
        self.server.daemon_threads = True
        if certfile:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(certfile, keyfile)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.session = requests.Session()
        self.session.trust_env = False

    def start(self) -> FaultProxy:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def inject(
        self,
        pattern: str,
        status=None,
        headers=None,
        body=b"",
        hang=False,
        times=None,
        chunks=None,
        length=None,
    ):
        with self._lock:
            self._faults.append(
                Fault(re.compile(pattern), status, headers or {}, body, hang, times, chunks, length)
            )

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()
        self._release.set()
        self._release = threading.Event()

    def cut_streams(self, pattern: str = "") -> int:
        """End the proxied answers still streaming whose path matches, as a server or a
        load balancer closing the connection does; returns how many were cut. A cut answer
        is no longer open, though its thread only ends at the upstream's next bytes."""
        rx = re.compile(pattern)
        with self._lock:
            keys = [key for key, (path, _) in self._streams.items() if rx.search(path)]
            chosen = [self._streams.pop(key)[1] for key in keys]
        for sock in chosen:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(chosen)

    def open_streams(self, pattern: str = "") -> int:
        """How many proxied answers whose path matches are streaming now (what
        cut_streams would cut): a watch counts once its upstream has answered."""
        rx = re.compile(pattern)
        with self._lock:
            return sum(1 for path, _ in self._streams.values() if rx.search(path))

    def count(self, pattern: str = "", outcome=None) -> int:
        rx = re.compile(pattern)
        with self._lock:
            return sum(
                1
                for _, path, got, _ in self.requests
                if rx.search(path) and (outcome is None or got == outcome)
            )

    def _take_fault(self, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.pattern.search(path):
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    def _record(self, method, path, outcome):
        with self._lock:
            self.requests.append((method, path, outcome, time.monotonic()))


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A client hanging up on a hostile reply is what the tests want, not news.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    proxy: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _handle(self):
        proxy = self.proxy
        # Read the body even when a fault answers: left unread it would be parsed as the
        # next request on this keep-alive connection.
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        fault = proxy._take_fault(self.path)
        if fault and fault.hang:
            proxy._record(self.command, self.path, "hang")
            proxy._release.wait(600)
            self.close_connection = True
            return
        if fault and fault.chunks is not None:
            proxy._record(self.command, self.path, fault.status or 200)
            self._stream(fault)
            return
        if fault and fault.status:
            proxy._record(self.command, self.path, fault.status)
            self.send_response(fault.status)
            for k, v in fault.headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(fault.body)))
            self.end_headers()
            self.wfile.write(fault.body)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
        headers.update(proxy.upstream_headers)
        try:
            upstream = proxy.session.request(
                self.command,
                proxy.upstream + self.path,
                headers=headers,
                data=body,
                stream=True,
                verify=proxy.upstream_verify,
                timeout=(5, 600),
            )
        except requests.RequestException:
            proxy._record(self.command, self.path, 502)
            self.send_error(502)
            return
        proxy._record(self.command, self.path, upstream.status_code)
        # Registered before the client sees the headers: a test that cuts streams as soon
        # as its client reports a watch open must find this one.
        with proxy._lock:
            proxy._streams[id(self)] = (self.path, self.connection)
        try:
            self.send_response(upstream.status_code)
            for k, v in upstream.headers.items():
                if k.lower() not in HOP_HEADERS:
                    self.send_header(k, v)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in upstream.raw.stream(65536, decode_content=True):
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (OSError, urllib3.exceptions.HTTPError):
            # The client went away, or the upstream did (stopped, cut): end this answer.
            self.close_connection = True
        finally:
            with proxy._lock:
                proxy._streams.pop(id(self), None)
            upstream.close()

    def _stream(self, fault: Fault):
        self.send_response(fault.status or 200)
        for k, v in fault.headers.items():
            self.send_header(k, v)
        if fault.length is None:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(fault.length))
        self.end_headers()
        release = self.proxy._release  # clear() sets it and makes a new one
        try:
            for piece in fault.chunks():
                if piece and fault.length is None:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                elif piece:
                    self.wfile.write(piece)
                self.wfile.flush()
                if release.is_set():
                    break
            if fault.length is None:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client gave up: what a hostile reply is for
            pass
        self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle
