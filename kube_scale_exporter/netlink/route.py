"""A NETLINK_ROUTE socket that sends a dump request and hands the raw reply chunks on.

The chunks are the bytes the kernel sent, unparsed: a parser reads the fixed kernel
structs in place (a 100k-message dump is never copied message by message), and tests can
feed a parser replies recorded from a real kernel.
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
import struct
from typing import Callable

NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300

# struct nlmsghdr: length, type, flags, sequence, port id.
HEADER = struct.Struct("=IHHII")
_ERRNO = struct.Struct("=i")
# struct rtattr: length, type.
_RTATTR = struct.Struct("=HH")

# The kernel sends dump replies in skbs of at most 32 KiB; a larger buffer never truncates.
_RECV_BYTES = 64 * 1024

# Called with each reply chunk; returns True once the chunk held NLMSG_DONE.
Consumer = Callable[[memoryview], bool]


class NetlinkUnavailable(OSError):
    """The process cannot open a NETLINK_ROUTE socket (seccomp, sandbox, fd limit)."""


def end_of_dump(msg_type: int, chunk, payload: int) -> bool:
    """For a control message: True at NLMSG_DONE, OSError(errno) at NLMSG_ERROR."""
    if msg_type == NLMSG_ERROR:
        (error,) = _ERRNO.unpack_from(chunk, payload)
        # -INT_MIN is past a C int: no errno has that number, and strerror cannot take it.
        reason = os.strerror(-error) if error > -(1 << 31) else f"error {error}"
        raise OSError(-error, f"netlink dump failed: {reason}")
    return msg_type == NLMSG_DONE


def attributes(buf, offset: int, end: int) -> list[tuple[int, int, int]]:
    """(type, value offset, value end) of each rtattr between offset and end.

    A list made in one loop, not a generator: a scrape walks a few dozen of them.
    """
    found = []
    unpack = _RTATTR.unpack_from
    while offset + 4 <= end:
        length, attr_type = unpack(buf, offset)
        if length < 4:
            break
        found.append((attr_type & 0x3FFF, offset + 4, offset + length))
        offset += (length + 3) & ~3
    return found


class RouteSocket:
    """One NETLINK_ROUTE socket, used by one thread at a time.

    The socket belongs to the network namespace of the thread that opened it. Any error
    closes it and the next request opens a fresh one, so its user recovers by itself.
    """

    def __init__(self):
        self._sock: socket.socket | None = None
        self._seq = itertools.count(1)

    def _open(self) -> socket.socket:
        if self._sock is None:
            try:
                sock = socket.socket(
                    socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE
                )
            except OSError as exc:
                raise NetlinkUnavailable(
                    exc.errno,
                    f"cannot open a NETLINK_ROUTE socket: {exc.strerror}. The "
                    "neighbor collectors read the kernel's tables over netlink: allow AF_NETLINK "
                    "sockets in the pod's seccomp profile or sandbox, and run it with "
                    "hostNetwork: true to see the host's entries",
                ) from exc
            sock.bind((0, 0))
            self._sock = sock
        return self._sock

    def dump(self, msg_type: int, body: bytes, consume: Consumer) -> None:
        """Send a dump request and pass each reply chunk to `consume` until it is done.

        A chunk is valid only during its call.
        """
        seq = next(self._seq) & 0xFFFFFFFF
        try:
            sock = self._open()
            sock.send(
                HEADER.pack(HEADER.size + len(body), msg_type, NLM_F_REQUEST | NLM_F_DUMP, seq, 0)
                + body
            )
            buf = bytearray(_RECV_BYTES)
            view = memoryview(buf)
            while True:
                n = sock.recv_into(buf)
                if not n:
                    raise OSError(errno.EIO, "netlink socket closed in the middle of a dump")
                if consume(view[:n]):
                    return
        except BaseException:
            # A half-read dump would leave replies queued for the next request.
            self.close()
            raise

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
