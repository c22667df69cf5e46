"""TLS handshakes started only when the client speaks, and only so many at once.

TLS state is made when the ClientHello arrives, not at accept: a silent connection costs
a socket, not OpenSSL's ~15 KiB (~50 KiB mid-handshake). At most MAX_HANDSHAKES run at
once, so a flood of handshakes cannot pile up that memory. A client past them waits, its
ClientHello unread, until one finishes or has had its slot for HANDSHAKE_SLOT_SECONDS (a
slow or silent handshake loses its slot to a waiting client). Waiting clients are served
newest first: under a flood a newcomer (Prometheus) is not queued behind every attacker,
and the oldest waiting ones run into the handshake deadline instead.
"""

from __future__ import annotations

import selectors
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

MAX_HANDSHAKES = 64
HANDSHAKE_SLOT_SECONDS = 1.0


class Conn(Protocol):
    """What a handshake needs of a connection (web/connections.py's Conn)."""

    sock: socket.socket
    context: ssl.SSLContext | None
    tls: bool


class HandshakeSlots:
    def __init__(self, sel: selectors.BaseSelector, close: Callable[[Conn], None]):
        self._sel = sel
        self._close = close
        self._shaking: OrderedDict[Conn, float] = OrderedDict()  # in progress, since
        self._waiting: OrderedDict[Conn, None] = OrderedDict()

    def start(self, conn: Conn) -> bool:
        """Wrap the connection and start its handshake; False when it must wait."""
        if len(self._shaking) >= MAX_HANDSHAKES:
            oldest, started = next(iter(self._shaking.items()))
            if time.monotonic() - started < HANDSHAKE_SLOT_SECONDS:
                self._sel.unregister(conn.sock)
                self._waiting[conn] = None
                return False
            self._close(oldest)
        self._sel.unregister(conn.sock)  # wrap_socket detaches the plain socket
        conn.sock = conn.context.wrap_socket(
            conn.sock, server_side=True, do_handshake_on_connect=False
        )
        conn.context, conn.tls = None, True
        self._sel.register(conn.sock, selectors.EVENT_READ, conn)
        self._shaking[conn] = time.monotonic()
        return True

    def over(self, conn: Conn) -> None:
        """The connection's handshake ended (or it closed): free its slot or place."""
        self._waiting.pop(conn, None)
        if self._shaking.pop(conn, False) is False:
            return
        if self._waiting and len(self._shaking) < MAX_HANDSHAKES:
            # The newest waiting client takes the slot when its turn in the poll comes.
            waiting, _ = self._waiting.popitem(last=True)
            self._sel.register(waiting.sock, selectors.EVENT_READ, waiting)
