"""gRPC calls over HTTP/2 on a unix socket, with the pure-Python `h2` protocol library.

gRPC is HTTP/2 with a few conventions: POST to /package.Service/Method, content-type
application/grpc, each message framed as one flag byte (compression; we never compress)
plus a four-byte big-endian length, and the outcome in the grpc-status and grpc-message
trailers. One connection per call: on a local socket it costs well under a millisecond,
and there is no reconnect state to get wrong when containerd restarts.
"""
from __future__ import annotations

import socket
import time
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.events

# google.golang.org/grpc/codes, by number.
STATUS_NAMES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")
MAX_RESPONSE = 64 << 20


class GrpcError(Exception):
    """The call failed: `code` is a gRPC status name, or UNAVAILABLE/DEADLINE_EXCEEDED for
    transport failures, as grpc-go would report them."""

    def __init__(self, code: str, details: str):
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details


def _messages(body: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(body):
        if pos + 5 > len(body):
            raise GrpcError("INTERNAL", "truncated gRPC message prefix")
        if body[pos]:
            raise GrpcError("INTERNAL", "compressed gRPC message (none was asked for)")
        size = int.from_bytes(body[pos + 1:pos + 5], "big")
        if pos + 5 + size > len(body):
            raise GrpcError("INTERNAL", "truncated gRPC message")
        out.append(body[pos + 5:pos + 5 + size])
        pos += 5 + size
    return out


class _Call:
    def __init__(self):
        self.body = bytearray()
        self.headers: dict[bytes, bytes] = {}
        self.done = False


def call(path: str, method: str, request: bytes, timeout: float,
         metadata: tuple[tuple[str, str], ...] = ()) -> list[bytes]:
    """Every response message of one unary or server-streaming call."""
    deadline = time.monotonic() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as exc:
            raise GrpcError("UNAVAILABLE", f"connect {path}: {exc.strerror or exc}") from None
        conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding=None))
        conn.initiate_connection()
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, [
            (":method", "POST"), (":scheme", "http"), (":path", method),
            (":authority", "localhost"), ("content-type", "application/grpc"),
            ("te", "trailers"), ("grpc-timeout", f"{max(1, int(timeout * 1000))}m"),
            *metadata,
        ])
        conn.send_data(stream, b"\x00" + len(request).to_bytes(4, "big") + request,
                       end_stream=True)
        result = _Call()
        try:
            sock.sendall(conn.data_to_send())
            while not result.done:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
                data = sock.recv(1 << 16)
                if not data:
                    raise GrpcError("UNAVAILABLE", "connection closed before the call ended "
                                                   "(not a gRPC server?)")
                for event in conn.receive_data(data):
                    _handle(conn, event, stream, result)
                sock.sendall(conn.data_to_send())
        except TimeoutError:
            raise GrpcError("DEADLINE_EXCEEDED", f"no answer within {timeout:g}s") from None
        except h2.exceptions.ProtocolError as exc:
            raise GrpcError("UNAVAILABLE", f"not an HTTP/2 gRPC server: {exc}") from None
        except OSError as exc:
            raise GrpcError("UNAVAILABLE", f"{exc.strerror or exc} (not a gRPC server?)") from None
    finally:
        sock.close()
    status = result.headers.get(b"grpc-status")
    if status is None:
        http = result.headers.get(b":status", b"?").decode()
        raise GrpcError("UNKNOWN", f"no grpc-status in the response (HTTP status {http})")
    code = int(status)
    if code:
        name = STATUS_NAMES[code] if code < len(STATUS_NAMES) else f"CODE_{code}"
        raise GrpcError(name, unquote(result.headers.get(b"grpc-message", b"").decode()))
    return _messages(bytes(result.body))


def _handle(conn, event, stream, result: _Call) -> None:
    if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
        # A trailers-only response carries grpc-status in its only HEADERS frame.
        result.headers.update(event.headers)
    elif isinstance(event, h2.events.DataReceived):
        result.body += event.data
        if len(result.body) > MAX_RESPONSE:
            raise GrpcError("RESOURCE_EXHAUSTED", f"response over {MAX_RESPONSE} bytes")
        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
    elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
        result.done = True
    elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream:
        raise GrpcError("UNAVAILABLE", f"stream reset by the server (code {event.error_code})")
    elif isinstance(event, h2.events.ConnectionTerminated):
        raise GrpcError("UNAVAILABLE", f"connection closed by the server ({event.error_code!r})")
