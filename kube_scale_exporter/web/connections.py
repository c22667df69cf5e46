"""The open connections: what the server keeps of each (Conn), and the loop's book of
them: what each waits for, until when, and which to close first when there are too many.

A connection is idle (waiting for a request, under the idle deadline), pending (in its
TLS handshake, part way through a request, or with an answer still to write, each under
its own deadline), or busy (with a worker, under none). Idle and pending connections
are kept in the order they began waiting, so the first of each is the one to watch.

Past the connection cap the loop evicts: a connection of the client address holding the
most, its oldest idle one, else its oldest pending one. One client (a compromised pod)
flooding the port closes its own connections, not Prometheus'; with a single client
this is simply the oldest idle connection first.
"""

from __future__ import annotations

import math
import selectors
import socket
import ssl
import time
from collections import OrderedDict

from kube_scale_exporter.web.tls import HandshakeSlots


class Conn:
    """One open connection: its socket, the bytes read and not yet answered, its deadline
    and TLS state, and the rest of an answer the client has not taken."""

    __slots__ = (
        "buf",
        "client",
        "closed",
        "context",
        "deadline",
        "handshaking",
        "keep",
        "out",
        "sock",
        "tls",
    )

    def __init__(self, sock: socket.socket, client: str):
        self.sock = sock
        self.client = client
        self.buf = bytearray()
        self.deadline = 0.0
        self.handshaking = False
        self.context: ssl.SSLContext | None = None  # TLS to start when the client speaks
        self.tls = False
        self.closed = False
        self.out: memoryview | None = None  # the rest of an answer the client has not taken
        self.keep = False  # whether the connection stays open once `out` is written


class Connections:
    def __init__(self, sel: selectors.BaseSelector):
        self._sel = sel
        self._idle: OrderedDict[Conn, None] = OrderedDict()
        self._pending: OrderedDict[Conn, None] = OrderedDict()
        self._busy: set[Conn] = set()
        # The same connections by client address: (idle, pending), for fair eviction.
        self._clients: dict[str, tuple[OrderedDict, OrderedDict]] = {}
        self.handshakes = HandshakeSlots(sel, self.close)

    def __len__(self) -> int:
        return len(self._idle) + len(self._pending) + len(self._busy)

    def is_idle(self, conn: Conn) -> bool:
        return conn in self._idle

    def wait_idle(self, conn: Conn, timeout: float) -> None:
        self._wait(conn, self._idle, timeout)

    def wait_pending(self, conn: Conn, timeout: float) -> None:
        self._wait(conn, self._pending, timeout)

    def to_worker(self, conn: Conn) -> None:
        self._unwait(conn)
        self._busy.add(conn)

    def from_worker(self, conn: Conn) -> None:
        self._busy.discard(conn)

    def soonest_deadline(self) -> float:
        """The earliest deadline to watch; infinity when nothing waits."""
        return min(
            (next(iter(waiting)).deadline for waiting in (self._idle, self._pending) if waiting),
            default=math.inf,
        )

    def expire(self, now: float) -> list[Conn]:
        """Close the connections whose deadline has passed; returns them."""
        expired = []
        for waiting in (self._idle, self._pending):
            while waiting:
                conn = next(iter(waiting))
                if conn.deadline > now:
                    break
                expired.append(conn)
                self.close(conn)
        return expired

    def evict(self) -> bool:
        """Close one connection to make room (see the module's docstring); False when no
        connection waits, so none can be closed."""
        if not self._clients:
            return False
        client = max(
            self._clients, key=lambda c: len(self._clients[c][0]) + len(self._clients[c][1])
        )
        idle, pending = self._clients[client]
        self.close(next(iter(idle or pending)))
        return True

    def close(self, conn: Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._unwait(conn)
        self._busy.discard(conn)
        self.handshakes.over(conn)
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass  # with a worker, or never registered
        conn.sock.close()

    def close_waiting(self) -> None:
        """Close every connection not with a worker (the server is closing)."""
        for conn in [*self._idle, *self._pending]:
            self.close(conn)

    def _wait(self, conn: Conn, waiting: OrderedDict, timeout: float) -> None:
        """Put the connection (back) in `waiting`, last, with a new deadline."""
        self._unwait(conn)
        conn.deadline = time.monotonic() + timeout
        waiting[conn] = None
        mine = self._clients.setdefault(conn.client, (OrderedDict(), OrderedDict()))
        mine[0 if waiting is self._idle else 1][conn] = None

    def _unwait(self, conn: Conn) -> None:
        self._idle.pop(conn, None)
        self._pending.pop(conn, None)
        mine = self._clients.get(conn.client)
        if mine is not None:
            mine[0].pop(conn, None)
            mine[1].pop(conn, None)
            if not mine[0] and not mine[1]:
                del self._clients[conn.client]
