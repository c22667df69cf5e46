"""Protocol edges against the real exporter process: resets mid-request, Accept-Encoding
q-values, request bodies, IPv6 client SANs."""

import socket
import struct
from functools import partial

import pytest

from testbed.metrics import wait_until
from testbed.ports import unread_by_server

from .test_webconfig import session, tls_block

pytestmark = pytest.mark.integration


def raw(port, data, read_for=1.0):
    """Send bytes on a new connection; everything the server sends until it closes or
    stays silent for `read_for` seconds."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_for) as s:
        s.sendall(data)
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except TimeoutError:
            pass
        return got


def read_by_server(port, sock):
    """The server has read every byte `sock` sent it."""
    return unread_by_server(port, sock.getsockname()[1]) == 0


def test_resets_mid_request_log_one_logfmt_line_not_tracebacks(start_exporter):
    exp = start_exporter(scheme="http")
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", exp.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: ")
        assert wait_until(partial(read_by_server, exp.port, s))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # RST
    assert session().get(exp.url + "/healthz", timeout=10).ok
    log = exp.proc.log_tail(1000)
    assert "Traceback" not in log
    lines = [line for line in log.splitlines() if "mid-request" in line]
    assert 1 <= len(lines) <= 2, log
    assert all(line.startswith("ts=") and " level=" in line for line in log.splitlines()), log
    assert len(log) < 2000


@pytest.mark.parametrize(
    "accept_encoding,gzipped",
    [
        ("gzip", True),
        ("gzip;q=0", False),
        ("gzip; q=0.0, identity", False),
        ("*;q=0.5", True),
        ("deflate, gzip;q=0.1", True),
        ("identity", False),
        ("GZIP", True),
        ("*, gzip;q=0", False),
    ],
)
def test_gzip_only_when_accepted_and_vary_says_so(accept_encoding, gzipped, start_exporter):
    exp = start_exporter(scheme="http")
    r = session().get(
        exp.url + "/metrics", headers={"Accept-Encoding": accept_encoding}, timeout=10
    )
    assert r.status_code == 200
    assert (r.headers.get("Content-Encoding") == "gzip") == gzipped
    assert r.headers["Vary"] == "Accept-Encoding"
    assert "kubescale_build_info" in r.text  # requests decoded it if gzipped


def test_a_get_with_a_body_gets_one_answer_and_the_connection_goes_on(start_exporter):
    exp = start_exporter(scheme="http")
    smuggled = b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
        len(smuggled),
        smuggled,
    )
    got = raw(exp.port, request + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert got.count(b"HTTP/1.1 ") == 2, got  # one per real request, none for the body
    assert b"404" not in got and got.count(b"\r\n\r\nok\n") == 2


@pytest.mark.parametrize(
    "headers,status",
    [
        (b"Transfer-Encoding: chunked\r\n", b"501"),
        (b"Content-Length: 10000000\r\n", b"413"),
        (b"Content-Length: 5\r\nContent-Length: 6\r\n", b"400"),
        (b"Content-Length: -1\r\n", b"400"),
    ],
)
def test_bodies_not_taken_are_refused_and_the_connection_closed(headers, status, start_exporter):
    exp = start_exporter(scheme="http")
    got = raw(
        exp.port,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
        + headers
        + b"\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        read_for=5,
    )
    assert got.startswith(b"HTTP/1.1 " + status), got
    assert got.count(b"HTTP/1.1 ") == 1 and b"Connection: close" in got


def test_client_allowed_sans_match_ipv6_addresses_as_written_by_users(pki, start_exporter):
    cert = pki.leaf("v6-client", "ca", "subjectAltName=IP:2001:db8:0:0:0:0:0:1")
    other = pki.leaf("v6-other", "ca", "subjectAltName=IP:2001:db8::2")
    exp = start_exporter(
        tls_block(
            pki,
            client_auth_type="RequireAndVerifyClientCert",
            client_ca_file=pki.ca,
            client_allowed_sans='["2001:DB8::1", prometheus.test]',
        )
    )
    s = session()
    assert s.get(exp.url + "/metrics", verify=pki.ca, cert=cert, timeout=10).ok
    assert s.get(exp.url + "/metrics", verify=pki.ca, cert=pki.client, timeout=10).ok
    assert s.get(exp.url + "/metrics", verify=pki.ca, cert=other, timeout=10).status_code == 403
