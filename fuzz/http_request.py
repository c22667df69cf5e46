"""What a client sends the HTTP server, through web/request.py: request_length() delimits
the first request in the bytes read so far, parse() reads it.

Documented error: BadRequest (its status is what the client gets). Invariants: the
length is the same however much of the stream has arrived once it is known, and never
past what arrived; a parsed request written back out as HTTP parses to the same request.
"""

from __future__ import annotations

from fuzz import InvariantBroken
from kube_scale_exporter.web.request import (
    MAX_HEAD,
    BadRequest,
    accepts_gzip,
    parse,
    request_length,
)

TARGETS = ("kube_scale_exporter.web.request",)


def check(data: bytes) -> None:
    try:
        length = request_length(data)
    except BadRequest as exc:
        if not 400 <= exc.status < 600:
            raise InvariantBroken(f"status {exc.status}") from None
        return
    if length is None:
        return
    if not 0 < length <= len(data):
        raise InvariantBroken(f"length {length} of {len(data)} bytes")
    for cut in range(length, min(len(data), length + 64) + 1):
        if request_length(data[:cut]) != length:
            raise InvariantBroken(
                f"length {request_length(data[:cut])} with {cut} bytes, {length} with all"
            )
    for cut in range(max(0, length - 8), length):
        if request_length(data[:cut]) is not None:
            raise InvariantBroken(f"complete at {cut} bytes, {length} with all")
    try:
        request = parse(data[:length])
    except BadRequest:
        return
    again = parse(_written(request))
    # A repeated header is joined with ", ": an empty last value leaves a trailing space
    # that reading strips.
    headers = {name: value.strip() for name, value in request.headers.items()}
    if (again.method, again.target, again.version, again.headers, again.keep_alive) != (
        request.method,
        request.target,
        request.version,
        headers,
        request.keep_alive,
    ):
        raise InvariantBroken(f"{request} written and read again: {again}")
    accepts_gzip(request.header("accept-encoding"))
    if length > MAX_HEAD + 4 + (64 << 10):
        raise InvariantBroken(f"a request of {length} bytes")


def _written(request) -> bytes:
    head = f"{request.method} {request.target} {request.version}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in request.headers.items())
    return (head + "\r\n").encode("latin-1")
