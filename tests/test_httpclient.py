"""httpclient.py against the standard library's HTTP server in this process: connections
kept alive and not reused once the server closed them, gzip decoded in bounded pieces,
and failures that name the URL and never a header sent."""

import gzip
import http.server
import socket
import threading

import pytest

from kube_scale_exporter import httpclient, limits

TOKEN = "secret-token-never-shown"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless the reply says otherwise

    def do_GET(self):
        self.server.connections.add(self.client_address)
        if self.path.startswith("/members"):
            return self.gzip_members()
        body = b'{"kind": "Status"}' * 1000
        if self.path.startswith("/gzip"):
            body = gzip.compress(body)
        declared = len(body) * (2 if self.path.startswith("/short") else 1)
        self.send_response(200)
        self.send_header("Content-Length", str(declared))
        if self.path.startswith("/gzip"):
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        self.wfile.write(body)
        # /close: the server drops the connection without saying so in the reply, as
        # an idle timeout does between two requests.
        self.close_connection = self.path.startswith(("/close", "/short"))

    def gzip_members(self):
        """Watch events as kube-apiserver 1.37 sends them: chunked, each burst a gzip member
        of its own; /members-packed: two members in one chunk."""
        members = [gzip.compress(EVENT % i) for i in range(5)]
        if self.path.startswith("/members-packed"):
            members = [members[0] + members[1], *members[2:]]
        self.send_response(200)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for member in members:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(member), member))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args):
        pass


EVENT = b'{"type":"ADDED","object":{"metadata":{"name":"p%d"}}}\n'


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.connections = set()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def url(server, path):
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def get(client, where):
    with client.request("GET", where, timeout=5, headers={"Authorization": TOKEN}) as reply:
        return reply.status, limits.read_body(reply, 1 << 20, "test")


@pytest.mark.unit
def test_a_connection_is_kept_alive_between_requests(server):
    client = httpclient.Client()
    for _ in range(3):
        status, body = get(client, url(server, "/a"))
        assert status == 200 and body.startswith(b'{"kind": "Status"}')
    assert len(server.connections) == 1


@pytest.mark.unit
def test_a_connection_the_server_closed_is_not_reused(server):
    client = httpclient.Client()
    for _ in range(3):
        assert get(client, url(server, "/close"))[0] == 200
    assert len(server.connections) == 3


@pytest.mark.unit
def test_gzip_is_decoded_in_pieces_of_at_most_the_size_asked(server):
    client = httpclient.Client()
    with client.request("GET", url(server, "/gzip"), timeout=5) as reply:
        pieces = []
        while piece := reply.read1(1000):
            pieces.append(piece)
    assert max(len(p) for p in pieces) <= 1000
    assert b"".join(pieces) == b'{"kind": "Status"}' * 1000
    assert get(client, url(server, "/a"))[0] == 200
    assert len(server.connections) == 1  # read to its end: kept alive


@pytest.mark.unit
@pytest.mark.parametrize("path", ["/members", "/members-packed"])
def test_a_gzip_body_of_several_members_is_read_whole(server, path):
    client = httpclient.Client()
    with client.request("GET", url(server, path), timeout=5) as reply:
        lines = list(limits.iter_lines(reply, 1 << 10, "watch event"))
    assert lines == [(EVENT % i).rstrip(b"\n") for i in range(5)]
    assert get(client, url(server, "/a"))[0] == 200
    assert len(server.connections) == 1  # read to its end: kept alive


@pytest.mark.unit
def test_a_reply_shorter_than_its_length_is_an_error_naming_the_url(server):
    client = httpclient.Client()
    with pytest.raises(
        httpclient.TransportError, match=r"/short: ConnectionError: the connection closed"
    ) as e:
        get(client, url(server, "/short?q=1"))
    assert TOKEN not in str(e.value) and "q=1" not in str(e.value)


@pytest.mark.unit
def test_a_refused_connection_names_the_url():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(
        httpclient.TransportError, match=rf"http://127.0.0.1:{port}/x: ConnectionError: .*refused"
    ):
        get(httpclient.Client(), f"http://127.0.0.1:{port}/x")
