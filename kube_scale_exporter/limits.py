"""Bounds on what a backend's HTTP reply may cost: bytes, line length and total time.

A socket timeout bounds each read, never the request: a server that drips one byte a
second keeps a request alive forever, and a reply read whole costs memory however large
it is. This module adds both bounds to the HTTP client (httpclient.py):

    with deadline(2.0):               # the whole request, headers and body included
        with client.request("POST", url, body=body, timeout=2.0) as reply:
            body = read_body(reply, 64 << 10, "Status")

A single watchdog thread (whatever the number of requests) shuts the socket down when a
request's deadline passes, which ends any blocked read; the caller then sees a transport
error and `expired()` is true. Caps are checked on the decoded bytes as they arrive,
so a reply over its cap (or a gzip bomb) costs at most the cap.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from contextlib import contextmanager
from typing import Protocol

# Read this much at most per call: small enough that a slow reply is checked often,
# large enough that a big one costs few calls.
CHUNK = 64 << 10


class Reply(Protocol):
    """What the readers below take: an httpclient.Response (not imported: it imports this)."""

    headers: dict

    def read1(self, n: int) -> bytes: ...


class LimitExceeded(Exception):
    """A reply went past a cap; the message names the cap and where it is set."""


def mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n / 1024:g} KiB"


class _Watchdog:
    """Shuts sockets down at their deadline; one thread for the whole process."""

    def __init__(self):
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._live: dict[int, socket.socket] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, when: float, sock: socket.socket) -> int:
        with self._cond:
            token = next(self._ids)
            heapq.heappush(self._heap, (when, token))
            self._live[token] = sock
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="deadline", daemon=True)
                self._thread.start()
            self._cond.notify()
            return token

    def cancel(self, token: int) -> None:
        with self._cond:
            self._live.pop(token, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._live:
                    heapq.heappop(self._heap)  # cancelled: the request ended in time
                if not self._heap:
                    self._cond.wait()
                    continue
                when, token = self._heap[0]
                delay = when - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
                sock = self._live.pop(token)
                try:
                    # The plain socket's shutdown, also for TLS: SSLSocket.shutdown would
                    # drop its SSL object under the thread still reading it.
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass


_WATCHDOG = _Watchdog()
_local = threading.local()


class Deadline:
    def __init__(self, seconds: float):
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.tokens: list[int] = []

    def expired(self) -> bool:
        return time.monotonic() >= self.at

    def arm(self, sock) -> None:
        if sock is not None:
            self.tokens.append(_WATCHDOG.add(self.at, sock))


@contextmanager
def deadline(seconds: float):
    """Bound every request made by this thread inside the block to `seconds` in all."""
    this = Deadline(seconds)
    previous = current()
    _local.deadline = this
    try:
        yield this
    finally:
        _local.deadline = previous
        for token in this.tokens:
            _WATCHDOG.cancel(token)


def current() -> Deadline | None:
    """The deadline this thread is inside, if any."""
    return getattr(_local, "deadline", None)


def arm(sock) -> None:
    """Hand `sock` to the watchdog, to be shut down at this thread's deadline, if any."""
    this = current()
    if this is not None:
        this.arm(sock)


def iter_chunks(reply: Reply):
    """The reply's decoded bytes as they arrive, for callers that decode as they read
    (kube/listing.py) and so bound what they keep themselves."""
    while chunk := reply.read1(CHUNK):
        yield chunk


def read_body(reply: Reply, cap: int, what: str, truncate: bool = False) -> bytearray:
    """The reply's decoded body, read as it arrives; LimitExceeded past `cap` bytes
    (or the first `cap` bytes when `truncate`, for error messages)."""
    declared = reply.headers.get("Content-Length", "")
    if not truncate and declared.isdigit() and int(declared) > cap:
        raise LimitExceeded(f"{what}: reply of {declared} bytes is over the {mib(cap)} cap")
    body = bytearray()
    try:
        while chunk := reply.read1(CHUNK):
            body += chunk
            if len(body) > cap:
                if truncate:
                    return body[:cap]
                raise LimitExceeded(f"{what}: reply over the {mib(cap)} cap")
        return body
    except BaseException:
        # The traceback keeps this frame in a reference cycle until a full collection:
        # it must not keep the bytes read too, on every failing request.
        body.clear()
        raise


def iter_lines(reply: Reply, max_line: int, what: str, max_total: int | None = None):
    """The reply's lines (without b"\\n") as they arrive; LimitExceeded for a line over
    `max_line` bytes, or after `max_total` bytes in all when given."""
    pending = bytearray()
    total = 0
    try:
        while chunk := reply.read1(CHUNK):
            total += len(chunk)
            if max_total is not None and total > max_total:
                raise LimitExceeded(f"{what}: reply over the {mib(max_total)} cap")
            pending += chunk
            start = 0
            while (end := pending.find(b"\n", start)) >= 0:
                yield bytes(pending[start:end])
                start = end + 1
            del pending[:start]  # once per chunk, not per line
            if len(pending) > max_line:
                raise LimitExceeded(f"{what}: a line over the {mib(max_line)} cap")
        if pending:
            yield bytes(pending)
    except BaseException:
        pending.clear()  # as in read_body
        raise
