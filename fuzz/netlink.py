"""One netlink reply chunk through both neighbor parsers (netlink/neighbor.py).

A chunk is what one recv() returns: RTM_NEWNEIGHTBL or RTM_NEWNEIGH messages, maybe
ending in NLMSG_DONE or NLMSG_ERROR. Documented errors (tests/neighbor/test_golden.py):
ValueError or struct.error for a malformed message, OSError for an NLMSG_ERROR. Invariants: the table reader keeps only ipv4/ipv6
tables whose values fit their kernel types; EntryCounter (one unpack per message, tuned
for 100k entries) counts exactly what a plain walk of the messages counts whenever every
message is whole.
"""

from __future__ import annotations

import socket
import struct

from fuzz import InvariantBroken
from kube_scale_exporter.netlink import neighbor, route

TARGETS = ("kube_scale_exporter.netlink.neighbor", "kube_scale_exporter.netlink.route")

_NDMSG = struct.Struct("=BBHiHBB")


def check(data: bytes) -> None:
    _tables(data)
    _entries(data)


def _tables(data: bytes) -> None:
    reader = neighbor.TableReader()
    try:
        reader(memoryview(data))
    except (ValueError, struct.error, OSError):
        return
    for family, table in reader.tables.items():
        if family not in neighbor.FAMILIES.values() or table.family != family:
            raise InvariantBroken(f"table of family {family!r}")
        for value in (table.thresh1, table.thresh2, table.thresh3, table.entries):
            if not 0 <= value < 1 << 32:
                raise InvariantBroken(f"u32 field of {value}")
        if list(table.stats) != list(neighbor.STATS_FIELDS[: len(table.stats)]):
            raise InvariantBroken(f"stats fields {list(table.stats)}")


def _entries(data: bytes) -> None:
    counter = neighbor.EntryCounter()
    try:
        done = counter(memoryview(data))
    except (ValueError, struct.error, OSError):
        fast = None
    else:
        fast = (done, {f: (c.entries, c.gc_eligible) for f, c in counter.counts.items()})
    expected = _reference(data)
    if expected is not None and fast != expected:
        raise InvariantBroken(f"EntryCounter counted {fast}, a plain walk {expected}")


def _reference(data: bytes):
    """(done, counts) from walking whole messages one by one; None when a message or its
    padding is cut, a message is too short for its struct, or at an NLMSG_ERROR."""
    counts = {name: [0, 0] for name in neighbor.FAMILIES.values()}
    offset, end = 0, len(data)
    while offset < end:
        if offset + route.HEADER.size > end:
            return None
        length, msg_type = struct.unpack_from("=IH", data, offset)
        if length < route.HEADER.size or offset + length > end:
            return None
        payload = offset + route.HEADER.size
        if msg_type == route.NLMSG_DONE:
            return True, {f: tuple(c) for f, c in counts.items()}
        if msg_type == route.NLMSG_ERROR:
            return None
        if msg_type == neighbor.RTM_NEWNEIGH:
            if length < route.HEADER.size + _NDMSG.size:
                return None
            family, _, _, _, state, flags, _ = _NDMSG.unpack_from(data, payload)
            managed = False
            for attr, start, stop in route.attributes(data, payload + _NDMSG.size, offset + length):
                if attr != neighbor.NDA_FLAGS_EXT:
                    continue
                if stop - start < 4:
                    break  # no value: it cannot say the entry is managed
                # The kernel puts NDA_FLAGS_EXT as a plain u32: 8 bytes, no flag bits in
                # its type. The counter's byte search relies on it: another is not compared.
                if data[start - 4 : start] != neighbor._FLAGS_EXT_ATTR or stop > offset + length:
                    return None
                managed = bool(struct.unpack_from("=I", data, start)[0] & neighbor.NTF_EXT_MANAGED)
                break
            name = {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6"}.get(family)
            if name is not None:
                exempt = (
                    state & neighbor.NUD_PERMANENT or flags & neighbor.NTF_EXT_LEARNED or managed
                )
                counts[name][0] += 1
                counts[name][1] += 0 if exempt else 1
        offset += (length + 3) & ~3
        if offset > end:  # the kernel pads every message to 4 bytes: its padding is cut
            return None
    return False, {f: tuple(c) for f, c in counts.items()}
