"""Netlink replies recorded from a real kernel, and replaying them into the parsers.

A recording is the reply chunks exactly as the kernel sent them, each prefixed with its
length (u32, native order), so replaying exercises the same parsing as a live socket.
`python -m tests.neighbor.recorded` re-records tests/neighbor/fixtures/ (as root).
"""

from __future__ import annotations

import struct
from pathlib import Path

from kube_scale_exporter.netlink.route import RouteSocket

FIXTURES = Path(__file__).resolve().parent / "fixtures"
_LENGTH = struct.Struct("=I")


class RecordingSocket(RouteSocket):
    """A RouteSocket that keeps a copy of the reply chunks of its last dump."""

    def __init__(self):
        super().__init__()
        self.chunks: list[bytes] = []

    def dump(self, msg_type, body, consume) -> None:
        self.chunks = []

        def keep(chunk) -> bool:
            self.chunks.append(bytes(chunk))
            return consume(chunk)

        super().dump(msg_type, body, keep)


def save(path: Path, chunks: list[bytes]) -> None:
    path.write_bytes(b"".join(_LENGTH.pack(len(c)) + c for c in chunks))


def load(path: Path) -> list[bytes]:
    data, chunks, offset = path.read_bytes(), [], 0
    while offset < len(data):
        (length,) = _LENGTH.unpack_from(data, offset)
        chunks.append(data[offset + 4 : offset + 4 + length])
        offset += 4 + length
    return chunks


def replay(consumer, chunks: list[bytes]):
    """Feed recorded chunks to a consumer as RouteSocket.dump would; returns the consumer."""
    for chunk in chunks:
        if consumer(memoryview(chunk)):
            return consumer
    raise ValueError("recording ends before NLMSG_DONE")


# What the recorded namespace holds: (family, address, nud state, extra `ip neigh` args).
RECORDED_ENTRIES = [
    ("ipv4", "192.0.2.1", "permanent", ()),
    ("ipv4", "192.0.2.2", "permanent", ()),
    ("ipv4", "192.0.2.3", "stale", ()),
    ("ipv4", "192.0.2.4", "stale", ()),
    ("ipv4", "192.0.2.5", "reachable", ()),
    ("ipv4", "192.0.2.6", "stale", ("extern_learn",)),
    ("ipv4", "192.0.2.7", None, ("managed",)),
    ("ipv6", "2001:db8::1", "permanent", ()),
    ("ipv6", "2001:db8::2", "stale", ()),
    ("ipv6", "2001:db8::3", "stale", ()),
    ("ipv6", "2001:db8::4", "noarp", ()),
]


def populate(ns) -> None:
    """Add RECORDED_ENTRIES to a NetNS on its v0 link."""
    for i, (_family, address, nud, extra) in enumerate(RECORDED_ENTRIES):
        args = ["neigh", "add", address, "dev", "v0", *extra]
        if nud is not None:
            args += ["lladdr", f"02:00:00:00:01:{i:02x}", "nud", nud]
        ns.ip(*args)


def record() -> None:
    """Record both dumps and the /proc/net/stat files they are compared with."""
    from kube_scale_exporter.netlink.neighbor import count_entries, read_tables  # noqa: PLC0415
    from testbed.netns import NetNS  # noqa: PLC0415

    stat_dir = FIXTURES / "procfs/net/stat"
    stat_dir.mkdir(parents=True, exist_ok=True)
    with NetNS() as ns:
        populate(ns)
        sock = RecordingSocket()
        ns.run(count_entries, sock)  # the socket opens in the namespace on first use
        save(FIXTURES / "neigh_dump.bin", sock.chunks)
        # Table stats move while other things run: read /proc around the request until it
        # held still, so the recorded files and the recorded reply agree.
        while True:
            before = [Path("/proc/net/stat", n).read_text() for n in ("arp_cache", "ndisc_cache")]
            read_tables(sock)
            after = [Path("/proc/net/stat", n).read_text() for n in ("arp_cache", "ndisc_cache")]
            if before == after:
                break
        save(FIXTURES / "neightbl_dump.bin", sock.chunks)
        sock.close()
    for name, text in zip(("arp_cache", "ndisc_cache"), after, strict=True):
        (stat_dir / name).write_text(text)


if __name__ == "__main__":
    record()
