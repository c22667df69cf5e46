"""HTTP/1.1 requests parsed from a connection's bytes.

Only what an exporter needs: GET and HEAD, no request bodies. A body announced with
Content-Length is read and discarded (up to MAX_BODY) so it is never taken for a second
request; Transfer-Encoding is refused and the connection closed, for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass

# Largest request head (request line and headers). Prometheus sends ~300 bytes.
MAX_HEAD = 16 * 1024
# Largest body discarded on a keep-alive connection; anything longer closes it.
MAX_BODY = 64 * 1024
MAX_HEADERS = 100


class BadRequest(Exception):
    """The bytes are not a request we answer; the connection gets `status` and closes."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Request:
    method: str
    target: str
    version: str
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "
    keep_alive: bool
    peercert: dict | None = None
    client: str = ""

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)


def request_length(buf: bytes | bytearray) -> int | None:
    """How many bytes of `buf` the first request takes (head and body), None if incomplete.

    Raises BadRequest for a head that is too long or a body we do not take."""
    end = buf.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
    if end < 0:
        if len(buf) > MAX_HEAD:
            raise BadRequest(431, "request head too large")
        return None
    head_len = end + 4
    lowered = bytes(buf[:end]).lower()
    if b"\ntransfer-encoding:" in lowered:
        raise BadRequest(501, "request bodies (Transfer-Encoding) are not supported")
    body = _content_length(lowered)
    if body > MAX_BODY:
        raise BadRequest(413, "request body too large")
    total = head_len + body
    return total if len(buf) >= total else None


def _content_length(lowered_head: bytes) -> int:
    values = {
        line.split(b":", 1)[1].strip()
        for line in lowered_head.split(b"\r\n")[1:]
        if line.startswith(b"content-length:")
    }
    if not values:
        return 0
    # Differing or non-numeric lengths are how requests get smuggled: refuse them.
    if len(values) != 1 or not next(iter(values)).isdigit():
        raise BadRequest(400, "bad Content-Length")
    return int(next(iter(values)))


def parse(data: bytes) -> Request:
    """One complete request as request_length() delimited it (the body is ignored)."""
    head = data[: data.find(b"\r\n\r\n")].decode("latin-1")
    request_line, *lines = head.split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(400, "bad request line")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadRequest(505, "HTTP version not supported")
    if len(lines) > MAX_HEADERS:
        raise BadRequest(431, "too many headers")
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or line[0] in " \t":
            raise BadRequest(400, "bad header line")
        name, value = name.lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    connection = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    return Request(method, target, version, headers, keep_alive)


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether Accept-Encoding allows gzip: listed (or *) with a q-value above 0."""
    allowed = {}
    for item in accept_encoding.split(","):
        coding, *params = (p.strip() for p in item.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if coding:
            allowed[coding.lower()] = q
    q = allowed.get("gzip", allowed.get("x-gzip", allowed.get("*", 0.0)))
    return q > 0
