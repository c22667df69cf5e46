"""An HTTP/1.1 server whose cost per idle connection is a socket, not a thread.

One thread (the loop) owns every connection that is not being answered: it accepts,
runs TLS handshakes without blocking, reads request bytes and enforces the deadlines.
Only a complete request goes to a bounded pool of worker threads, which answers it and
hands the connection back; what of the answer the client does not take at once, the
loop writes as it reads. So thousands of idle or slow clients cost a few KiB each
and can neither exhaust threads (pids limit) nor memory; the measurements that chose
this design over thread-per-connection and asyncio are in docs/reliability.md.

Deadlines, each closing the connection: a TLS handshake within `handshake_timeout`; a
request head (and any body) within `header_timeout` of its first byte, however slowly
it trickles; no request at all for `idle_timeout`; an answer written within
`write_timeout`. Past `max_connections` open connections one is closed for each new one
(which: web/connections.py).
"""

from __future__ import annotations

import errno
import logging
import math
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kube_scale_exporter.web.answer import Response, answer, send_now
from kube_scale_exporter.web.connections import Conn, Connections
from kube_scale_exporter.web.handback import HandBack
from kube_scale_exporter.web.listener import Listener, raise_nofile_limit
from kube_scale_exporter.web.pool import Pool
from kube_scale_exporter.web.ratelog import RateLimitedLog
from kube_scale_exporter.web.request import BadRequest, Request, request_length

log = logging.getLogger("kube_scale_exporter.http")

# File descriptors kept back from connections for the collectors' own sockets and files.
FD_RESERVE = 64
ACCEPT_BATCH = 64
# Each poll wakes at least this often to expire deadlines and notice shutdown.
TICK_SECONDS = 0.5


@dataclass(frozen=True)
class Limits:
    """The server's bounds: connections held, workers, and each deadline (seconds)."""

    idle_timeout: float = 120.0
    max_connections: int = 512
    workers: int = 48
    handshake_timeout: float = 10.0
    header_timeout: float = 10.0
    write_timeout: float = 10.0


class Refused(Exception):
    """Raised by the TLS hook: close this new connection without a word."""


class HTTPServer:
    """serve_forever() runs the loop; shutdown() stops it; server_close() frees it all."""

    def __init__(
        self,
        host: str,
        port: int,
        handler: Callable[[Request], Response],
        limits: Limits | None = None,
        tls_hook: Callable[[], ssl.SSLContext | None] = lambda: None,
    ):
        self.handler = handler
        self.tls_hook = tls_hook
        self.limits = limits = limits or Limits()
        nofile = raise_nofile_limit()
        self.max_connections = max(1, min(limits.max_connections, nofile - FD_RESERVE))
        if self.max_connections < limits.max_connections:
            log.warning(
                "--web.max-connections %d lowered to %d by the open files limit (%d)",
                limits.max_connections,
                self.max_connections,
                nofile,
            )
        self._sel = selectors.DefaultSelector()
        self._listener = Listener(host, port, self._sel)
        self.server_port = self._listener.port
        self._conns = Connections(self._sel)
        self._handback = HandBack(self._sel)
        self._pool = Pool(limits.workers, self._answer, "http", then=self._give_back)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self.notes = RateLimitedLog(log)

    # --- the loop ------------------------------------------------------------------------

    def open_connections(self) -> int:
        return len(self._conns)

    def worker_threads(self) -> int:
        return self._pool.threads()

    def serve_forever(self) -> None:
        self._stopped.clear()
        self._listener.start()
        self._handback.start()
        try:
            while not self._stop.is_set():
                for key, _mask in self._sel.select(self._poll_timeout()):
                    try:
                        self._event(key.data)
                    except Exception as exc:
                        log.debug("HTTP loop error", exc_info=True)
                        self.notes.note(
                            "loop",
                            "connections dropped on an internal error",
                            repr(exc),
                            level=logging.ERROR,
                        )
                        if isinstance(key.data, Conn):
                            self._conns.close(key.data)
                self._expire()
        finally:
            self._handback.stop()
            self._listener.stop()
            self._stopped.set()

    def _event(self, what) -> None:
        if what == "accept":
            self._accept()
        elif what == "wake":
            self._take_back()
        elif what.closed:
            pass
        elif what.out is not None:
            self._writable(what)
        else:
            self._readable(what)

    def shutdown(self) -> None:
        self._stop.set()
        self._handback.wake()
        self._stopped.wait()

    def server_close(self) -> None:
        self._listener.close()
        self._conns.close_waiting()
        self._sel.close()
        self._handback.close()

    def _poll_timeout(self) -> float:
        now = time.monotonic()
        resume = self._listener.paused_until or math.inf
        soonest = min(now + TICK_SECONDS, self._conns.soonest_deadline(), resume)
        return max(0.0, soonest - now)

    def _expire(self) -> None:
        now = time.monotonic()
        for conn in self._conns.expire(now):
            if conn.buf or conn.handshaking:
                self.notes.note(
                    "timeout",
                    "closed connections whose handshake or request did not arrive in time",
                    conn.client,
                )
        self._listener.resume_when_due(now)

    # --- accepting -----------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                accepted = self._listener.accept()
            except OSError as exc:
                self.notes.note(
                    "accept",
                    "accept failed; closing the oldest idle connection or pausing",
                    exc.strerror or repr(exc),
                    level=logging.WARNING,
                )
                out_of_files = exc.errno in (errno.EMFILE, errno.ENFILE)
                if not (out_of_files and self._conns.evict()):
                    self._listener.pause()
                return
            if accepted is None:
                return
            self._admit(*accepted)

    def _admit(self, sock: socket.socket, client: str) -> None:
        while self.open_connections() >= self.max_connections:
            if not self._conns.evict():
                sock.close()
                return
        try:
            context = self.tls_hook()
        except Refused:
            sock.close()
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Conn(sock, client)
        if context is not None:
            conn.context, conn.handshaking = context, True
            self._conns.wait_pending(conn, self.limits.handshake_timeout)
        else:
            self._conns.wait_idle(conn, self.limits.idle_timeout)
        self._sel.register(conn.sock, selectors.EVENT_READ, conn)

    # --- reading -------------------------------------------------------------------------

    def _readable(self, conn: Conn) -> None:
        if conn.context is not None and not self._conns.handshakes.start(conn):
            return
        if conn.handshaking and not self._handshake(conn):
            return
        while len(conn.buf) <= 4 * 65536:
            try:
                chunk = conn.sock.recv(65536)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except OSError as exc:  # ssl.SSLError is one too
                if conn.buf:
                    self.notes.note(
                        "reset", "connections reset or broken mid-request", f"{conn.client}: {exc}"
                    )
                self._conns.close(conn)
                return
            if not chunk:
                if conn.buf:
                    self.notes.note("reset", "connections closed mid-request", conn.client)
                self._conns.close(conn)
                return
            conn.buf += chunk
        self._advance(conn)

    def _handshake(self, conn: Conn) -> bool:
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._sel.modify(conn.sock, selectors.EVENT_READ, conn)
            return False
        except ssl.SSLWantWriteError:
            self._sel.modify(conn.sock, selectors.EVENT_WRITE, conn)
            return False
        except OSError as exc:
            log.debug("TLS handshake with %s failed: %s", conn.client, exc)
            self._conns.close(conn)
            return False
        conn.handshaking = False
        self._conns.handshakes.over(conn)
        self._sel.modify(conn.sock, selectors.EVENT_READ, conn)
        self._conns.wait_idle(conn, self.limits.idle_timeout)
        return True

    def _advance(self, conn: Conn) -> None:
        """Dispatch a complete request; start the head deadline at a request's first byte."""
        try:
            length = request_length(conn.buf)
        except BadRequest as exc:
            self._refuse(conn, exc)
            return
        if length is None:
            if conn.buf and self._conns.is_idle(conn):
                self._conns.wait_pending(conn, self.limits.header_timeout)
            return
        self._conns.to_worker(conn)
        self._sel.unregister(conn.sock)
        self._pool.submit((conn, length))

    def _refuse(self, conn: Conn, exc: BadRequest) -> None:
        body = f"{exc}\n".encode()
        try:
            conn.sock.send(Response(exc.status, body).encode(False, keep_alive=False))
        except OSError:
            pass
        self._conns.close(conn)

    # --- answering (worker threads) ------------------------------------------------------

    def _answer(self, item: tuple[Conn, int]) -> bool:
        """Whether the connection is kept for another request."""
        conn, length = item
        return answer(conn, length, self.handler, self.notes, self._stop.is_set())

    def _give_back(self, item: tuple[Conn, int], keep: bool | None) -> None:
        """After the answer, its thread free again; keep is None when answering raised."""
        self._handback.give(item[0], bool(keep))

    def _take_back(self) -> None:
        for conn, keep in self._handback.take():
            self._conns.from_worker(conn)
            if conn.out is not None:
                self._sel.register(conn.sock, selectors.EVENT_WRITE, conn)
                self._conns.wait_pending(conn, self.limits.write_timeout)
            elif keep:
                self._sel.register(conn.sock, selectors.EVENT_READ, conn)
                self._next_request(conn)
            else:
                self._conns.close(conn)

    def _next_request(self, conn: Conn) -> None:
        self._conns.wait_idle(conn, self.limits.idle_timeout)
        if conn.buf:  # a pipelined request came with the last one
            self._advance(conn)

    def _writable(self, conn: Conn) -> None:
        try:
            sent = send_now(conn.sock, conn.out)
        except OSError as exc:
            self.notes.note(
                "write", "answers not delivered (client gone or too slow)", f"{conn.client}: {exc}"
            )
            self._conns.close(conn)
            return
        if sent < len(conn.out):
            conn.out = conn.out[sent:]
            return
        conn.out = None
        if not conn.keep:
            self._conns.close(conn)
            return
        self._sel.modify(conn.sock, selectors.EVENT_READ, conn)
        self._next_request(conn)
