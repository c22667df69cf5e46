"""A gRPC server on a unix socket that answers each method as a test says: sanely, with a
response of any size, one that never ends, or one that drips.

    server = HostileGrpc(path).start()
    server.answer(LIST_STATUSES, messages=[b""])                   # an empty, sane reply
    server.answer(LIST_STATUSES, chunks=lambda: repeat(item, 63 << 20), length=63 << 20)
    server.stop()

`chunks` is a function returning the pieces of the response body (gRPC framing
included when `length` is None; with `length` the pieces are one message's payload and
its prefix announces `length`). Flow control is honoured, so the client's window
updates pace the send like containerd's would.
"""

from __future__ import annotations

import os
import socket
import threading

import h2.config
import h2.connection
import h2.events


def frame(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


class HostileGrpc:
    def __init__(self, path: str):
        self.path = path
        self.answers: dict[str, tuple] = {}
        self.calls: list[str] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._stop = threading.Event()

    def start(self) -> HostileGrpc:
        if os.path.exists(self.path):
            os.unlink(self.path)
        self._sock.bind(self.path)
        self._sock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._sock.close()

    def answer(self, method: str, messages=(), chunks=None, length=None) -> None:
        self.answers[method] = (list(messages), chunks, length)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        conn.initiate_connection()
        path = stream = None
        try:
            sock.sendall(conn.data_to_send())
            while stream is None or path is None:
                data = sock.recv(65536)
                if not data:
                    return
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        path = dict(event.headers)[":path"]
                    elif isinstance(event, h2.events.StreamEnded):
                        stream = event.stream_id
                sock.sendall(conn.data_to_send())
            self.calls.append(path)
            messages, chunks, length = self.answers.get(path, ([b""], None, None))
            conn.send_headers(stream, [(":status", "200"), ("content-type", "application/grpc")])
            pieces = [frame(m) for m in messages]
            if chunks is not None:
                pieces = chunks()
                if length is not None:
                    pieces = _prefixed(length, pieces)
            for piece in pieces:
                self._send(conn, sock, stream, piece)
            conn.send_headers(stream, [("grpc-status", "0")], end_stream=True)
            sock.sendall(conn.data_to_send())
            # Stay until the client hangs up, as a real server does: closing first would
            # break the client's last writes (window updates, settings acks).
            sock.settimeout(5)
            while sock.recv(65536):
                pass
        except (OSError, h2.exceptions.ProtocolError):
            pass  # the client gave up: what a hostile answer is for
        finally:
            sock.close()

    def _send(self, conn, sock, stream, data: bytes) -> None:
        while data:
            window = min(conn.local_flow_control_window(stream), conn.max_outbound_frame_size)
            if window <= 0:
                sock.sendall(conn.data_to_send())
                received = sock.recv(65536)
                if not received or self._stop.is_set():
                    raise OSError("client gone")
                conn.receive_data(received)
                continue
            conn.send_data(stream, data[:window])
            data = data[window:]
            sock.sendall(conn.data_to_send())


def _prefixed(length: int, pieces):
    yield b"\x00" + length.to_bytes(4, "big")
    yield from pieces


def repeat(piece: bytes, total: int, size: int = 1 << 16):
    block = (piece * (size // len(piece) + 1))[: size - size % len(piece)]
    sent = 0
    while sent + len(block) <= total:
        yield block
        sent += len(block)
    rest = (total - sent) // len(piece)
    yield piece * rest


def endless(piece: bytes, size: int = 1 << 16):
    block = piece * (size // len(piece))
    while True:
        yield block
