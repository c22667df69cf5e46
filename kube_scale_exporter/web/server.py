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
`write_timeout`. Past `max_connections` open connections the oldest idle one is closed
for each new one (of the client address holding the most), then the oldest still
handshaking or sending its head.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from kube_scale_exporter.web.answer import answer, send_now
from kube_scale_exporter.web.conn import Conn, Limits, Refused, raise_nofile_limit
from kube_scale_exporter.web.pool import Pool
from kube_scale_exporter.web.ratelog import RateLimitedLog
from kube_scale_exporter.web.request import (
    BadRequest,
    Request,
    Response,
    request_length,
)
from kube_scale_exporter.web.tls import HandshakeSlots

log = logging.getLogger("kube_scale_exporter.http")

# Listen backlog; the kernel caps it at net.core.somaxconn (4096 on current kernels). The
# stdlib's 5 made 300 simultaneous connects wait on SYN retries for 47 s.
BACKLOG = 4096
# File descriptors kept back from connections for the collectors' own sockets and files.
FD_RESERVE = 64
ACCEPT_BATCH = 64
# While accept() fails for want of descriptors and nothing can be closed, stop polling
# the listening socket this long: it stays readable, and polling it would spin a core.
ACCEPT_PAUSE_SECONDS = 0.1
# Each poll wakes at least this often to expire deadlines and notice shutdown.
TICK_SECONDS = 0.5


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
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listen = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listen.bind((host, port))
            self._listen.listen(BACKLOG)
        except OSError:
            self._listen.close()
            raise
        self._listen.setblocking(False)
        self.server_port = self._listen.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._idle: OrderedDict[Conn, None] = OrderedDict()  # waiting for a request
        self._pending: OrderedDict[Conn, None] = OrderedDict()  # handshake or partial head
        self._busy: set[Conn] = set()  # with a worker
        # The same connections by client address: (idle, pending), for fair eviction.
        self._clients: dict[str, tuple[OrderedDict, OrderedDict]] = {}
        self._tls = HandshakeSlots(self._sel, self._close)
        self._returned: deque[tuple[Conn, bool]] = deque()
        self._pool = Pool(limits.workers, self._answer, "http")
        self._paused_until = 0.0
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self.notes = RateLimitedLog(log)

    # --- the loop ------------------------------------------------------------------------

    def open_connections(self) -> int:
        return len(self._idle) + len(self._pending) + len(self._busy)

    def serve_forever(self) -> None:
        self._stopped.clear()
        self._sel.register(self._listen, selectors.EVENT_READ, "accept")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
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
                            self._close(key.data)
                self._expire()
        finally:
            self._sel.unregister(self._wake_r)
            if self._paused_until == 0.0:
                self._sel.unregister(self._listen)
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
        self._wake()
        self._stopped.wait()

    def server_close(self) -> None:
        self._listen.close()
        for conn in [*self._idle, *self._pending]:
            self._close(conn)
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()

    def _poll_timeout(self) -> float:
        now = time.monotonic()
        soonest = now + TICK_SECONDS
        for waiting in (self._idle, self._pending):
            if waiting:
                soonest = min(soonest, next(iter(waiting)).deadline)
        if self._paused_until:
            soonest = min(soonest, self._paused_until)
        return max(0.0, soonest - now)

    def _expire(self) -> None:
        now = time.monotonic()
        for waiting in (self._idle, self._pending):
            while waiting:
                conn = next(iter(waiting))
                if conn.deadline > now:
                    break
                if conn.buf or conn.handshaking:
                    self.notes.note(
                        "timeout",
                        "closed connections whose handshake or request did not arrive in time",
                        conn.client,
                    )
                self._close(conn)
        if self._paused_until and now >= self._paused_until:
            self._paused_until = 0.0
            self._sel.register(self._listen, selectors.EVENT_READ, "accept")

    # --- accepting -----------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, addr = self._listen.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                self.notes.note(
                    "accept",
                    "accept failed; closing the oldest idle connection or pausing",
                    exc.strerror or repr(exc),
                    level=logging.WARNING,
                )
                out_of_files = exc.errno in (errno.EMFILE, errno.ENFILE)
                if not (out_of_files and self._evict()):
                    self._sel.unregister(self._listen)
                    self._paused_until = time.monotonic() + ACCEPT_PAUSE_SECONDS
                return
            self._admit(sock, addr[0])

    def _admit(self, sock: socket.socket, client: str) -> None:
        while self.open_connections() >= self.max_connections:
            if not self._evict():
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
            self._wait(conn, self._pending, self.limits.handshake_timeout)
        else:
            self._wait(conn, self._idle, self.limits.idle_timeout)
        self._sel.register(conn.sock, selectors.EVENT_READ, conn)

    def _evict(self) -> bool:
        """Close a connection of the client address holding the most: its oldest idle one,
        else its oldest unfinished one. One client (a compromised pod) flooding the port
        closes its own connections, not Prometheus'; with a single client this is simply
        the oldest idle connection first."""
        if not self._clients:
            return False
        client = max(
            self._clients, key=lambda c: len(self._clients[c][0]) + len(self._clients[c][1])
        )
        idle, pending = self._clients[client]
        self._close(next(iter(idle or pending)))
        return True

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

    def _close(self, conn: Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._unwait(conn)
        self._busy.discard(conn)
        self._tls.over(conn)
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass  # with a worker, or never registered
        conn.sock.close()

    # --- reading -------------------------------------------------------------------------

    def _readable(self, conn: Conn) -> None:
        if conn.context is not None and not self._tls.start(conn):
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
                self._close(conn)
                return
            if not chunk:
                if conn.buf:
                    self.notes.note("reset", "connections closed mid-request", conn.client)
                self._close(conn)
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
            self._close(conn)
            return False
        conn.handshaking = False
        self._tls.over(conn)
        self._sel.modify(conn.sock, selectors.EVENT_READ, conn)
        self._wait(conn, self._idle, self.limits.idle_timeout)
        return True

    def _advance(self, conn: Conn) -> None:
        """Dispatch a complete request; start the head deadline at a request's first byte."""
        try:
            length = request_length(conn.buf)
        except BadRequest as exc:
            self._refuse(conn, exc)
            return
        if length is None:
            if conn.buf and conn in self._idle:
                self._wait(conn, self._pending, self.limits.header_timeout)
            return
        self._unwait(conn)
        self._sel.unregister(conn.sock)
        self._busy.add(conn)
        self._pool.submit((conn, length))

    def _refuse(self, conn: Conn, exc: BadRequest) -> None:
        body = f"{exc}\n".encode()
        try:
            conn.sock.send(Response(exc.status, body).encode(False, keep_alive=False))
        except OSError:
            pass
        self._close(conn)

    # --- answering (worker threads) ------------------------------------------------------

    def _answer(self, item: tuple[Conn, int]) -> None:
        conn, length = item
        keep = False
        try:
            keep = answer(conn, length, self.handler, self.notes, self._stop.is_set())
        finally:
            self._returned.append((conn, keep))
            self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass  # already awake, or closing

    def _take_back(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass
        while self._returned:
            conn, keep = self._returned.popleft()
            self._busy.discard(conn)
            if conn.out is not None:
                self._sel.register(conn.sock, selectors.EVENT_WRITE, conn)
                self._wait(conn, self._pending, self.limits.write_timeout)
            elif keep:
                self._sel.register(conn.sock, selectors.EVENT_READ, conn)
                self._next_request(conn)
            else:
                self._close(conn)

    def _next_request(self, conn: Conn) -> None:
        self._wait(conn, self._idle, self.limits.idle_timeout)
        if conn.buf:  # a pipelined request came with the last one
            self._advance(conn)

    def _writable(self, conn: Conn) -> None:
        try:
            sent = send_now(conn.sock, conn.out)
        except OSError as exc:
            self.notes.note(
                "write", "answers not delivered (client gone or too slow)", f"{conn.client}: {exc}"
            )
            self._close(conn)
            return
        if sent < len(conn.out):
            conn.out = conn.out[sent:]
            return
        conn.out = None
        if not conn.keep:
            self._close(conn)
            return
        self._sel.modify(conn.sock, selectors.EVENT_READ, conn)
        self._next_request(conn)
