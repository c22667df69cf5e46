"""The kernel's neighbor tables over raw netlink: table info (O(1)) and an entry count.

RTM_GETNEIGHTBL answers with one message per table (arp_cache, ndisc_cache) carrying its
thresholds, its global entry count and its statistics, whatever the table size. Only a
dump of every entry (RTM_GETNEIGH) tells which entries count against gc_thresh3, and it
sees only the entries of the socket's own network namespace.
"""

from __future__ import annotations

import socket
import struct
import sys
from dataclasses import dataclass, field

from kube_scale_exporter.netlink.route import HEADER, RouteSocket, attributes, end_of_dump

RTM_NEWNEIGH = 28
RTM_GETNEIGH = 30
RTM_NEWNEIGHTBL = 64
RTM_GETNEIGHTBL = 66

FAMILIES = {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6"}

# struct ndtmsg: family, 3 bytes of padding.
_NDTMSG = struct.Struct("=BBH")
NDTA_THRESH1, NDTA_THRESH2, NDTA_THRESH3, NDTA_CONFIG, NDTA_STATS = 2, 3, 4, 5, 7
# struct ndt_config starts with key_len (u16), entry_size (u16), entries (u32).
_CONFIG_ENTRIES = struct.Struct("=HHI")
# struct ndt_stats, u64 each, in the kernel's order. Older kernels send fewer fields
# (table_fulls came last); pyroute2 0.9 decodes only the first ten.
STATS_FIELDS = (
    "allocs",
    "destroys",
    "hash_grows",
    "res_failed",
    "lookups",
    "hits",
    "rcv_probes_mcast",
    "rcv_probes_ucast",
    "periodic_gc_runs",
    "forced_gc_runs",
    "table_fulls",
)

_STATS = struct.Struct(f"={len(STATS_FIELDS)}Q")
_THRESHOLDS = (NDTA_THRESH1, NDTA_THRESH2, NDTA_THRESH3)

# struct ndmsg: family, pad, pad, ifindex, state, flags, type.
_NDMSG = struct.Struct("=BBHiHBB")
# What the count needs of an RTM_NEWNEIGH message: nlmsghdr length and type, then ndmsg
# family, state and flags.
_NEIGH_FIELDS = struct.Struct("=IH10xB7xHB")
_SHORT_HEADER = struct.Struct("=IH")
NUD_PERMANENT = 0x80
NTF_EXT_LEARNED = 0x10
NDA_FLAGS_EXT = 15
NTF_EXT_MANAGED = 0x1
# An NDA_FLAGS_EXT attribute header as it appears in a reply; the kernel sends the
# attribute only for entries with extended flags, so most messages never contain it.
_FLAGS_EXT_ATTR = struct.pack("=HH", 8, NDA_FLAGS_EXT)

# Where a run's counted fields are in each of its messages (nlmsghdr, then ndmsg), and the
# byte of a u16 and of a u32 that holds its lowest bits: every NUD_* state, NTF_EXT_MANAGED.
_U16_LOW, _U32_LOW = (0, 0) if sys.byteorder == "little" else (1, 3)
_FAMILY_AT = 16
_STATE_AT = 24 + _U16_LOW
_FLAGS_AT = 26
_NLMSG_LENGTH_AND_TYPE = range(6)
# A run shorter than this goes through the loop: checking it would cost more than it saves.
MIN_RUN = 64
# After a short run the next is looked for this many bytes later, doubling up to MAX_SKIP
# while they stay short: a table of mixed lengths then costs about what the loop costs.
MAX_SKIP = 8192
# Byte value -> 1 where that byte of a message makes its entry exempt, else 0.
_PERMANENT_BYTE = bytes(int(bool(b & NUD_PERMANENT)) for b in range(256))
_EXT_LEARNED_BYTE = bytes(int(bool(b & NTF_EXT_LEARNED)) for b in range(256))
_MANAGED_BYTE = bytes(int(bool(b & NTF_EXT_MANAGED)) for b in range(256))
_IS_INET = bytes(int(b == socket.AF_INET) for b in range(256))
_IS_INET6 = bytes(int(b == socket.AF_INET6) for b in range(256))


@dataclass
class NeighborTable:
    """One family's table as the kernel reports it (global to the host)."""

    family: str
    thresh1: int = 0
    thresh2: int = 0
    thresh3: int = 0
    entries: int = 0
    stats: dict[str, int] = field(default_factory=dict)


@dataclass
class NeighborCount:
    """One family's entries in one network namespace, by whether GC may evict them."""

    entries: int = 0
    gc_eligible: int = 0

    @property
    def gc_exempt(self) -> int:
        return self.entries - self.gc_eligible


class TableReader:
    """Consumes an RTM_GETNEIGHTBL dump; `tables` maps family name to NeighborTable.

    The reply is a few messages, but a scrape reads it every time: each table's message
    is read in place, the per-device parms messages after it are skipped unread.
    """

    def __init__(self):
        self.tables: dict[str, NeighborTable] = {}

    def __call__(self, chunk) -> bool:
        offset, end = 0, len(chunk)
        while offset + HEADER.size <= end:
            length, msg_type = _SHORT_HEADER.unpack_from(chunk, offset)
            if length < HEADER.size or offset + length > end:
                raise ValueError(f"malformed netlink message of length {length} at {offset}")
            payload = offset + HEADER.size
            if msg_type == RTM_NEWNEIGHTBL:
                family = FAMILIES.get(chunk[payload])
                # A table's message comes before the parms messages of its devices, which
                # have no thresholds: once a family's table is read, the rest are skipped.
                if family is not None and family not in self.tables:
                    table = _table(family, chunk, payload + _NDTMSG.size, offset + length)
                    if table is not None:
                        self.tables[family] = table
            elif end_of_dump(msg_type, chunk, payload):
                return True
            offset += (length + 3) & ~3
        return False


class EntryCounter:
    """Consumes an RTM_GETNEIGH dump; `counts` maps family name to NeighborCount.

    GC-eligible follows the kernel (net/core/neighbour.c): every entry except PERMANENT
    ones, externally learned ones and managed ones. A 100k-entry table is 100k messages,
    and a Python loop over them costs about what the kernel spends producing the dump.
    But entries with the same attributes make messages of the same layout, which the
    kernel sends in long runs (one family's table after the other; a run breaks at an
    entry without a link-layer address, or with an extra attribute). A run is counted a
    field at a time: the bytes at one offset of every message, sliced out together,
    compared, translated and counted in C. Messages outside runs (mixed layouts, the end
    of the dump) go through the loop one at a time.
    """

    def __init__(self):
        self.counts = {name: NeighborCount() for name in FAMILIES.values()}

    def __call__(self, chunk) -> bool:
        data = bytes(chunk)
        unpack = _NEIGH_FIELDS.unpack_from
        # Locals: this loop runs once per message outside a run.
        af_inet, af_inet6, newneigh = socket.AF_INET, socket.AF_INET6, RTM_NEWNEIGH
        v4 = v4_exempt = v6 = v6_exempt = 0
        offset, end = 0, len(data)
        # Every message but NLMSG_DONE is at least _NEIGH_FIELDS.size long.
        last_full = end - _NEIGH_FIELDS.size
        look_from = skip = 0  # where the next run is looked for; see MAX_SKIP
        done = False
        while offset < end:
            if offset <= last_full:
                length, msg_type, family, state, flags = unpack(data, offset)
            else:
                length, msg_type = _SHORT_HEADER.unpack_from(data, offset)
                if msg_type == newneigh:
                    raise ValueError(f"truncated neighbor message at {offset}")
            if length < 16:
                raise ValueError(f"malformed netlink message of length {length} at {offset}")
            if msg_type == newneigh:
                if offset >= look_from and length >= _NEIGH_FIELDS.size:
                    stride = (length + 3) & ~3
                    run, managed_at = _run(data, offset, length, (end - offset) // stride)
                    if run >= MIN_RUN:
                        in_v4, exempt_v4, in_v6, exempt_v6 = _count_run(
                            data, offset, stride, run, managed_at
                        )
                        v4 += in_v4
                        v4_exempt += exempt_v4
                        v6 += in_v6
                        v6_exempt += exempt_v6
                        offset += run * stride
                        skip = 0
                        continue
                    skip = min(2 * skip + stride, MAX_SKIP)
                    look_from = offset + skip
                exempt = (
                    state & NUD_PERMANENT
                    or flags & NTF_EXT_LEARNED
                    or (
                        _FLAGS_EXT_ATTR in data[offset + _NEIGH_FIELDS.size : offset + length]
                        and _managed(data, offset + 16, offset + length)
                    )
                )
                if family == af_inet:
                    v4 += 1
                    if exempt:
                        v4_exempt += 1
                elif family == af_inet6:
                    v6 += 1
                    if exempt:
                        v6_exempt += 1
            elif end_of_dump(msg_type, data, offset + 16):
                done = True
                break
            offset += (length + 3) & ~3
        if not done and offset != end:  # checked once here rather than per message
            raise ValueError(f"netlink reply chunk of {end} bytes ends inside a message")
        for count, entries, exempt in (
            (self.counts["ipv4"], v4, v4_exempt),
            (self.counts["ipv6"], v6, v6_exempt),
        ):
            count.entries += entries
            count.gc_eligible += entries - exempt
        return done


def read_tables(sock: RouteSocket) -> dict[str, NeighborTable]:
    """Both families' tables in one round trip (~1 ms at any table size)."""
    reader = TableReader()
    sock.dump(RTM_GETNEIGHTBL, _NDTMSG.pack(socket.AF_UNSPEC, 0, 0), reader)
    return reader.tables


def count_entries(sock: RouteSocket) -> dict[str, NeighborCount]:
    """Both families' entries in the socket's network namespace, from one dump."""
    counter = EntryCounter()
    sock.dump(RTM_GETNEIGH, _NDMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0, 0), counter)
    return counter.counts


def host_gc_eligible(table: NeighborTable, count: NeighborCount) -> int:
    """An upper bound of the host's GC-eligible entries in one family's table.

    The table's entry count is global; the exempt entries are counted in the dump of one
    namespace (the host's, with hostNetwork). Exempt entries in other namespaces are
    invisible and counted as GC-eligible: pods' own namespaces hold few entries, nearly
    all of them GC-eligible, so the bound is close.
    """
    return max(0, table.entries - count.gc_exempt)


def _run(data: bytes, start: int, length: int, most: int) -> tuple[int, int | None]:
    """How many of the next `most` messages, each `length` bytes and aligned, share the
    first one's layout: its netlink length and type and each of its attribute headers,
    byte for byte (0 when fewer than MIN_RUN do); and where the byte holding
    NTF_EXT_MANAGED is in each, if they have an NDA_FLAGS_EXT attribute."""
    stride = (length + 3) & ~3
    run = _leading_run(data, start, stride, most, _NLMSG_LENGTH_AND_TYPE)
    if run < MIN_RUN:
        return 0, None
    managed_at = None
    for attr, value, value_end in attributes(data, start + 16 + _NDMSG.size, start + length):
        run = _leading_run(data, start, stride, run, range(value - start - 4, value - start))
        if run < MIN_RUN:
            return 0, None
        if attr == NDA_FLAGS_EXT and value_end - value == 4:
            managed_at = value - start + _U32_LOW
    return run, managed_at


def _leading_run(data: bytes, start: int, stride: int, most: int, offsets: range) -> int:
    """How many of `most` messages from `start` have the first one's bytes at `offsets`."""
    run = most
    for at in offsets:
        column = data[start + at : start + run * stride : stride]
        first = column[:1]
        if column.count(first) != run:
            run -= len(column.lstrip(first))
    return run


def _count_run(
    data: bytes, start: int, stride: int, run: int, managed_at: int | None
) -> tuple[int, int, int, int]:
    """IPv4 entries, exempt ones, IPv6 entries, exempt ones, in a run of messages."""
    stop = start + run * stride

    def flagged(at: int, table: bytes) -> int:
        """One bit per message, set where the byte at `at` maps to 1 in `table`."""
        return int.from_bytes(data[start + at : stop : stride].translate(table), "little")

    exempt = flagged(_STATE_AT, _PERMANENT_BYTE) | flagged(_FLAGS_AT, _EXT_LEARNED_BYTE)
    if managed_at is not None:
        exempt |= flagged(managed_at, _MANAGED_BYTE)
    families = data[start + _FAMILY_AT : stop : stride]
    v4, v6 = families.count(socket.AF_INET), families.count(socket.AF_INET6)
    if v4 == run:
        return v4, exempt.bit_count(), 0, 0
    if v6 == run:
        return 0, 0, v6, exempt.bit_count()
    return (
        v4,
        (exempt & flagged(_FAMILY_AT, _IS_INET)).bit_count(),
        v6,
        (exempt & flagged(_FAMILY_AT, _IS_INET6)).bit_count(),
    )


def _table(family: str, chunk, start: int, end: int) -> NeighborTable | None:
    """The table in one RTM_NEWNEIGHTBL message's attributes; None for a parms message."""
    spans = {attr: (value, value_end) for attr, value, value_end in attributes(chunk, start, end)}
    if NDTA_THRESH3 not in spans:
        return None
    table = NeighborTable(
        family, *(_u32(chunk, spans[a][0]) if a in spans else 0 for a in _THRESHOLDS)
    )
    if NDTA_CONFIG in spans:
        value, value_end = spans[NDTA_CONFIG]
        if value_end - value >= _CONFIG_ENTRIES.size:
            table.entries = _CONFIG_ENTRIES.unpack_from(chunk, value)[2]
    if NDTA_STATS in spans:
        value, value_end = spans[NDTA_STATS]
        if value_end - value >= _STATS.size:
            values = _STATS.unpack_from(chunk, value)
        else:  # an older kernel: fewer fields
            values = struct.unpack_from(f"={(value_end - value) // 8}Q", chunk, value)
        table.stats = dict(zip(STATS_FIELDS, values, strict=False))
    return table


def _u32(buf, offset: int) -> int:
    return struct.unpack_from("=I", buf, offset)[0]


def _managed(data: bytes, payload: int, end: int) -> bool:
    for attr, start, stop in attributes(data, payload + _NDMSG.size, end):
        if attr == NDA_FLAGS_EXT:
            # One without its u32 is not the kernel's; its next 4 bytes are another's.
            return stop - start >= 4 and bool(_u32(data, start) & NTF_EXT_MANAGED)
    return False
