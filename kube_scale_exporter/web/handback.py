"""Connections handed back to the server's loop by the workers that answered them.

A worker queues the connection and writes a byte to a socket pair the loop polls, so the
loop takes it back at once, not at its next tick; shutdown wakes the loop the same way.
"""

from __future__ import annotations

import selectors
import socket
from collections import deque
from collections.abc import Iterator

from kube_scale_exporter.web.connections import Conn


class HandBack:
    def __init__(self, sel: selectors.BaseSelector):
        self._sel = sel
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._returned: deque[tuple[Conn, bool]] = deque()

    def start(self) -> None:
        """Poll the wake-up socket; the poll's key data is "wake"."""
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")

    def stop(self) -> None:
        self._sel.unregister(self._wake_r)

    def give(self, conn: Conn, keep: bool) -> None:
        """On a worker: the connection is answered; `keep` it open for another request."""
        self._returned.append((conn, keep))
        self.wake()

    def wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass  # already awake, or closing

    def take(self) -> Iterator[tuple[Conn, bool]]:
        """On the loop, when woken: each connection given back, with its `keep`."""
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass
        while self._returned:
            yield self._returned.popleft()

    def close(self) -> None:
        self._wake_r.close()
        self._wake_w.close()
