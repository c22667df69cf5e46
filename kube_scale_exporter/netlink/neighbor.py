"""The kernel's neighbor tables over raw netlink: table info (O(1)) and an entry count.

RTM_GETNEIGHTBL answers with one message per table (arp_cache, ndisc_cache) carrying its
thresholds, its global entry count and its statistics, whatever the table size. Only a
dump of every entry (RTM_GETNEIGH) tells which entries count against gc_thresh3, and it
sees only the entries of the socket's own network namespace.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

from kube_scale_exporter.netlink.route import RouteSocket, attributes, end_of_dump, messages

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
# attribute only for entries with extended flags, so most chunks never contain it.
_FLAGS_EXT_ATTR = struct.pack("=HH", 8, NDA_FLAGS_EXT)


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
    """Consumes an RTM_GETNEIGHTBL dump; `tables` maps family name to NeighborTable."""

    def __init__(self):
        self.tables: dict[str, NeighborTable] = {}

    def __call__(self, chunk) -> bool:
        for msg_type, payload, end in messages(chunk):
            if msg_type != RTM_NEWNEIGHTBL:
                if end_of_dump(msg_type, chunk, payload):
                    return True
                continue
            family = FAMILIES.get(_NDTMSG.unpack_from(chunk, payload)[0])
            if family is None:
                continue
            table = NeighborTable(family)
            has_thresholds = False
            for attr, start, stop in attributes(chunk, payload + _NDTMSG.size, end):
                if attr == NDTA_THRESH1:
                    table.thresh1 = _u32(chunk, start)
                elif attr == NDTA_THRESH2:
                    table.thresh2 = _u32(chunk, start)
                elif attr == NDTA_THRESH3:
                    table.thresh3 = _u32(chunk, start)
                    has_thresholds = True
                elif attr == NDTA_CONFIG and stop - start >= _CONFIG_ENTRIES.size:
                    table.entries = _CONFIG_ENTRIES.unpack_from(chunk, start)[2]
                elif attr == NDTA_STATS:
                    count = min(len(STATS_FIELDS), (stop - start) // 8)
                    values = struct.unpack_from(f"={count}Q", chunk, start)
                    table.stats = dict(zip(STATS_FIELDS[:count], values, strict=True))
            # The table's own message has thresholds; the others are per-device parms.
            if has_thresholds:
                self.tables[family] = table
        return False


class EntryCounter:
    """Consumes an RTM_GETNEIGH dump; `counts` maps family name to NeighborCount.

    GC-eligible follows the kernel (net/core/neighbour.c): every entry except PERMANENT
    ones, externally learned ones and managed ones. This loop runs once per entry (100k
    times for a big table), so it reads the few fields it needs with one unpack per
    message and counts in local variables: ~20-40 ms at 100k, next to the kernel's ~70 ms
    to produce the dump.
    """

    def __init__(self):
        self.counts = {name: NeighborCount() for name in FAMILIES.values()}

    def __call__(self, chunk) -> bool:
        data = bytes(chunk)
        may_have_ext_flags = _FLAGS_EXT_ATTR in data
        unpack = _NEIGH_FIELDS.unpack_from
        af_inet, af_inet6 = socket.AF_INET, socket.AF_INET6  # locals: this loop runs 100k times
        v4 = v4_exempt = v6 = v6_exempt = 0
        offset, end = 0, len(data)
        # Every message but NLMSG_DONE is at least _NEIGH_FIELDS.size long.
        last_full = end - _NEIGH_FIELDS.size
        done = False
        while offset < end:
            if offset <= last_full:
                length, msg_type, family, state, flags = unpack(data, offset)
            else:
                length, msg_type = _SHORT_HEADER.unpack_from(data, offset)
                if msg_type == RTM_NEWNEIGH:
                    raise ValueError(f"truncated neighbor message at {offset}")
            if length < 16:
                raise ValueError(f"malformed netlink message of length {length} at {offset}")
            if msg_type == RTM_NEWNEIGH:
                exempt = (
                    state & NUD_PERMANENT
                    or flags & NTF_EXT_LEARNED
                    or (may_have_ext_flags and _managed(data, offset + 16, offset + length))
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


def _u32(buf, offset: int) -> int:
    return struct.unpack_from("=I", buf, offset)[0]


def _managed(data: bytes, payload: int, end: int) -> bool:
    for attr, start, stop in attributes(data, payload + _NDMSG.size, end):
        if attr == NDA_FLAGS_EXT:
            # One without its u32 is not the kernel's; its next 4 bytes are another's.
            return stop - start >= 4 and bool(_u32(data, start) & NTF_EXT_MANAGED)
    return False
