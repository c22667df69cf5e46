"""The server's listening socket: a deep backlog, the open-files limit raised, and out of
the poll for a moment when accepting fails and nothing can be closed to make room."""

from __future__ import annotations

import logging
import resource
import selectors
import socket
import time

log = logging.getLogger("kube_scale_exporter.http")

# Listen backlog; the kernel caps it at net.core.somaxconn (4096 on current kernels). The
# stdlib's 5 made 300 simultaneous connects wait on SYN retries for 47 s.
BACKLOG = 4096
# While accept() fails for want of descriptors and nothing can be closed, stop polling
# the listening socket this long: it stays readable, and polling it would spin a core.
ACCEPT_PAUSE_SECONDS = 0.1


class Listener:
    def __init__(self, host: str, port: int, sel: selectors.BaseSelector):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))
            self._sock.listen(BACKLOG)
        except OSError:
            self._sock.close()
            raise
        self._sock.setblocking(False)
        self.port = self._sock.getsockname()[1]
        self._sel = sel
        self.paused_until = 0.0  # 0.0: in the poll

    def start(self) -> None:
        """Poll for new connections; the poll's key data is "accept"."""
        self._sel.register(self._sock, selectors.EVENT_READ, "accept")

    def stop(self) -> None:
        if self.paused_until == 0.0:
            self._sel.unregister(self._sock)

    def accept(self) -> tuple[socket.socket, str] | None:
        """A new connection and its client address; None when none waits. Raises OSError
        when accepting fails (out of descriptors, say)."""
        try:
            sock, addr = self._sock.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return None
        return sock, addr[0]

    def pause(self) -> None:
        self._sel.unregister(self._sock)
        self.paused_until = time.monotonic() + ACCEPT_PAUSE_SECONDS

    def resume_when_due(self, now: float) -> None:
        if self.paused_until and now >= self.paused_until:
            self.paused_until = 0.0
            self.start()

    def close(self) -> None:
        self._sock.close()


def raise_nofile_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard one (containerd 2 gives 1024 soft); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft != hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open files limit from %d to %d: %s", soft, target, exc)
    return soft
