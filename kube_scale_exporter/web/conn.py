"""What the server keeps per connection, its limits, and the open-files limit."""

from __future__ import annotations

import logging
import resource
import socket
import ssl
from dataclasses import dataclass

log = logging.getLogger("kube_scale_exporter.http")


@dataclass(frozen=True)
class Limits:
    idle_timeout: float = 120.0
    max_connections: int = 512
    workers: int = 48
    handshake_timeout: float = 10.0
    header_timeout: float = 10.0
    write_timeout: float = 10.0


class Refused(Exception):
    """Raised by the TLS hook: close this new connection without a word."""


class Conn:
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
