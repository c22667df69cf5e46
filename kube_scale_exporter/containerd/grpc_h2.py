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
STATUS_NAMES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)
# The default cap on one call's response bytes (all its messages); callers pass their
# own, sized to what containerd sends (containerd/client.py). A body kept whole is held
# until the call ends, so the cap is what it can cost; a streamed one costs its reader.
MAX_RESPONSE = 16 << 20


class GrpcError(Exception):
    """The call failed: `code` is a gRPC status name, or UNAVAILABLE/DEADLINE_EXCEEDED for
    transport failures, as grpc-go would report them."""

    def __init__(self, code: str, details: str):
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details


class _Call:
    """A response's messages, each in a buffer of exactly its announced size (no regrowth
    copies), or each fed as it arrives to a reader from `stream()` and not kept at all.
    A length past the cap is refused when announced, not after receiving."""

    def __init__(self, max_bytes: int, stream=None):
        self.messages: list[bytearray] = []
        self.headers: dict[bytes, bytes] = {}
        self.done = False
        self.max_bytes = max_bytes
        self.announced = 0  # bytes of every message begun, prefixes included
        self._stream = stream
        self._prefix = bytearray()  # the current message's 5-byte prefix, as it arrives
        self._left = 0  # bytes of the current message still to come
        self._message: memoryview | None = None  # its unfilled part, when kept whole
        self._reader = None  # what reads it, when streamed

    def add(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if not self._left:
                take = 5 - len(self._prefix)
                self._prefix += view[:take]
                view = view[take:]
                if len(self._prefix) == 5:
                    self._begin()
                continue
            take = min(self._left, len(view))
            if self._reader is not None:
                self._reader.feed(view[:take])
            else:
                self._message[:take] = view[:take]
                self._message = self._message[take:]
            self._left -= take
            view = view[take:]
            if not self._left:
                self._end()

    def _begin(self) -> None:
        if self._prefix[0]:
            raise GrpcError("INTERNAL", "compressed gRPC message (none was asked for)")
        size = int.from_bytes(self._prefix[1:5], "big")
        self._prefix.clear()
        self.announced += 5 + size
        if self.announced > self.max_bytes:
            raise GrpcError(
                "RESOURCE_EXHAUSTED", f"response over the {self.max_bytes >> 10} KiB cap"
            )
        if self._stream is not None:
            self._reader = self._stream()
        else:
            self.messages.append(bytearray(size))
            self._message = memoryview(self.messages[-1])
        self._left = size
        if not size:
            self._end()

    def _end(self) -> None:
        if self._reader is not None:
            self._reader.end()
        self._reader = self._message = None

    def discard(self) -> None:
        self.messages.clear()
        self._reader = self._message = None

    def result(self) -> list[memoryview]:
        if self._prefix or self._left:
            raise GrpcError("INTERNAL", "truncated gRPC message")
        # Views: decoding slices them without copying.
        return [memoryview(m) for m in self.messages]


def call(
    path: str,
    method: str,
    request: bytes,
    timeout: float,
    metadata: tuple[tuple[str, str], ...] = (),
    max_bytes: int = MAX_RESPONSE,
    stream=None,
) -> list[memoryview]:
    """Every response message of one unary or server-streaming call, within `timeout` in
    all and `max_bytes` in all. With `stream`, a function making a reader per message
    (wire.RepeatedReader: feed(piece), end()), messages are read as they arrive and
    none is returned."""
    deadline = time.monotonic() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    result = _Call(max_bytes, stream)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as exc:
            raise GrpcError("UNAVAILABLE", f"connect {path}: {exc.strerror or exc}") from None
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        conn.initiate_connection()
        stream = conn.get_next_available_stream_id()
        conn.send_headers(
            stream,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", method),
                (":authority", "localhost"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("grpc-timeout", f"{max(1, int(timeout * 1000))}m"),
                *metadata,
            ],
        )
        conn.send_data(stream, b"\x00" + len(request).to_bytes(4, "big") + request, end_stream=True)
        try:
            sock.sendall(conn.data_to_send())
            while not result.done:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
                data = sock.recv(1 << 16)
                if not data:
                    raise GrpcError(
                        "UNAVAILABLE",
                        "connection closed before the call ended (not a gRPC server?)",
                    )
                for event in conn.receive_data(data):
                    _handle(conn, event, stream, result)
                sock.sendall(conn.data_to_send())
        except TimeoutError:
            raise GrpcError("DEADLINE_EXCEEDED", f"no answer within {timeout:g}s") from None
        except h2.exceptions.ProtocolError as exc:
            raise GrpcError("UNAVAILABLE", f"not an HTTP/2 gRPC server: {exc}") from None
        except OSError as exc:
            raise GrpcError("UNAVAILABLE", f"{exc.strerror or exc} (not a gRPC server?)") from None
    except BaseException:
        # The traceback holds this frame in a reference cycle until a full collection;
        # it must not hold the body too (up to the cap, on every failing call).
        result.discard()
        raise
    finally:
        sock.close()
    status = result.headers.get(b"grpc-status")
    if status is None:
        http = result.headers.get(b":status", b"?").decode("utf-8", "replace")
        raise GrpcError("UNKNOWN", f"no grpc-status in the response (HTTP status {http})")
    if not status.isdigit():
        raise GrpcError("UNKNOWN", f"grpc-status {status[:20]!r} is not a status code")
    code = int(status)
    if code:
        name = STATUS_NAMES[code] if code < len(STATUS_NAMES) else f"CODE_{code}"
        message = result.headers.get(b"grpc-message", b"").decode("utf-8", "replace")
        raise GrpcError(name, unquote(message))
    return result.result()


def _handle(conn, event, stream, result: _Call) -> None:
    if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
        # A trailers-only response carries grpc-status in its only HEADERS frame.
        result.headers.update(event.headers)
    elif isinstance(event, h2.events.DataReceived):
        result.add(event.data)
        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
    elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
        result.done = True
    elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream:
        raise GrpcError("UNAVAILABLE", f"stream reset by the server (code {event.error_code})")
    elif isinstance(event, h2.events.ConnectionTerminated):
        raise GrpcError("UNAVAILABLE", f"connection closed by the server ({event.error_code!r})")
