"""What containerd's socket sends back for one call (HTTP/2 frames carrying gRPC
messages and trailers), through containerd/grpc_h2.py's call().

A server thread on a unix socket answers each connection with the input's bytes, then
closes its side; call() runs as the collector runs it, once keeping the messages whole
and once streaming them into a wire.RepeatedReader. Documented errors: GrpcError, and
WireError from the streamed reader. Invariants: the messages kept are within max_bytes,
and streaming yields the field-1 items of exactly those messages.
"""

from __future__ import annotations

import os
import socket
import threading

from fuzz import InvariantBroken, scratch
from kube_scale_exporter.containerd import grpc_h2, wire

TARGETS = ("kube_scale_exporter.containerd.grpc_h2",)
INSTRUMENT = ("h2", "hpack", "hyperframe")
METHOD = "/containerd.services.content.v1.Content/ListStatuses"
MAX_BYTES = 256 << 10
TIMEOUT = 2.0


class _Server:
    """Answers each connection with `reply`, then reads what the client sends until it
    hangs up (closing first would refuse the client's last writes)."""

    def __init__(self):
        self.path = f"{scratch('grpc')}.sock"
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.reply = b""
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.path)
        self._sock.listen(4)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            conn, _ = self._sock.accept()
            with conn:
                try:
                    conn.sendall(self.reply)
                    conn.shutdown(socket.SHUT_WR)
                    while conn.recv(65536):
                        pass
                except OSError:
                    pass


_server: _Server | None = None


def prepare() -> None:
    global _server
    if _server is None:
        _server = _Server()


def check(data: bytes) -> None:
    _server.reply = data
    try:
        kept = grpc_h2.call(_server.path, METHOD, b"", TIMEOUT, max_bytes=MAX_BYTES)
    except grpc_h2.GrpcError:
        kept = None
    if kept is not None and sum(5 + len(m) for m in kept) > MAX_BYTES:
        raise InvariantBroken(f"{sum(map(len, kept))} bytes kept, over {MAX_BYTES}")
    items: list[bytes] = []
    try:
        grpc_h2.call(
            _server.path,
            METHOD,
            b"",
            TIMEOUT,
            max_bytes=MAX_BYTES,
            stream=lambda: wire.RepeatedReader(1, items.append, MAX_BYTES),
        )
    except (grpc_h2.GrpcError, wire.WireError):
        return
    if kept is not None:
        expected = [bytes(v) for m in kept for v in _length_values(m)]
        if items != expected:
            raise InvariantBroken(f"streamed {len(items)} items, kept whole {len(expected)}")


def _length_values(message):
    try:
        return [v for n, v in wire.iter_fields(message) if n == 1 and not isinstance(v, int)]
    except wire.WireError:
        raise InvariantBroken(
            "streamed without error, a message kept whole does not decode"
        ) from None
