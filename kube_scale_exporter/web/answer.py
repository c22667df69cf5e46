"""Answering one complete request, on a worker thread of the server: the Response and its
bytes on the wire."""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus

from kube_scale_exporter.web.connections import Conn
from kube_scale_exporter.web.ratelog import RateLimitedLog
from kube_scale_exporter.web.request import BadRequest, Request, parse

log = logging.getLogger("kube_scale_exporter.http")


@dataclass
class Response:
    """One answer; `close` ends the connection once it is written."""

    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    close: bool = False

    def encode(self, head_only: bool, keep_alive: bool) -> bytes:
        """Status line, headers and body as one write (two writes meet Nagle's delay)."""
        reason = (
            HTTPStatus(self.status).phrase if self.status in HTTPStatus._value2member_map_ else ""
        )
        lines = [
            f"HTTP/1.1 {self.status} {reason}",
            "Server: kube-scale-exporter",
            f"Date: {formatdate(usegmt=True)}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {len(self.body)}",
        ]
        lines += [f"{k}: {v}" for k, v in self.headers]
        if not keep_alive:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + self.body


def answer(
    conn: Conn,
    length: int,
    handler: Callable[[Request], Response],
    notes: RateLimitedLog,
    stopping: bool,
) -> bool:
    """Answer the request in the first `length` bytes of conn.buf; True to keep the
    connection open. What the socket does not take at once is left in conn.out."""
    data = bytes(conn.buf[:length])
    del conn.buf[:length]
    try:
        request = parse(data)
    except BadRequest as exc:
        request, response = None, Response(exc.status, f"{exc}\n".encode())
    else:
        request.client = conn.client
        request.peercert = conn.sock.getpeercert() if conn.tls else None
        response = _respond(request, handler, notes)
    keep = request is not None and request.keep_alive and not response.close and not stopping
    out = memoryview(response.encode(request is not None and request.method == "HEAD", keep))
    try:
        # Never wait on a client: what the socket does not take now, the server's loop
        # writes as the client reads, under the write deadline.
        sent = send_now(conn.sock, out)
    except OSError as exc:
        notes.note(
            "write", "answers not delivered (client gone or too slow)", f"{conn.client}: {exc}"
        )
        return False
    if sent < len(out):
        conn.out, conn.keep = out[sent:], keep
    return keep


def _respond(
    request: Request, handler: Callable[[Request], Response], notes: RateLimitedLog
) -> Response:
    try:
        return handler(request)
    except Exception as exc:  # one failed answer must not kill a worker or the connection loop
        log.debug("answering %s %s failed", request.method, request.target, exc_info=True)
        notes.note(
            "handler", "requests failed with an internal error", repr(exc), level=logging.ERROR
        )
        return Response(500, b"internal error; see the exporter's log\n", close=True)


def send_now(sock: socket.socket, data: memoryview) -> int:
    """Bytes of `data` the (non-blocking) socket took without waiting."""
    sent = 0
    while sent < len(data):
        try:
            sent += sock.send(data[sent:])
        except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            break
    return sent
