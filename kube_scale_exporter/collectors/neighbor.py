"""Neighbor (ARP / NDISC) tables: size, limits, overflows and GC, O(1) in table size.

Linux keeps one ARP table and one NDISC table per host, shared by every network
namespace: pods' entries count against the host's gc_thresh3. When the GC-eligible
entries reach gc_thresh3 and forced GC frees nothing, new entries fail with ENOBUFS
("neighbor table overflow!") and traffic to new peers drops. One RTM_GETNEIGHTBL request
(~1 ms whatever the table size) gives everything below except unresolved discards, which
only /proc/net/stat/{arp,ndisc}_cache has (in the host network namespace only).

    # HELP kubescale_neighbor_entries Entries in the kernel's neighbor table, all network namespaces (PERMANENT included).
    # TYPE kubescale_neighbor_entries gauge
    kubescale_neighbor_entries{family="ipv4"} 9.0
    kubescale_neighbor_entries{family="ipv6"} 8.0
    # HELP kubescale_neighbor_gc_thresh3 Hard limit: adds fail once this many GC-eligible entries exist (sysctl net.*.neigh.default.gc_thresh3).
    # TYPE kubescale_neighbor_gc_thresh3 gauge
    kubescale_neighbor_gc_thresh3{family="ipv4"} 1024.0
    ... likewise gc_thresh1 and gc_thresh2 (gauges), and the counters
    kubescale_neighbor_table_overflows_total, _forced_gc_runs_total, _allocations_total,
    _destroys_total, _resolution_failures_total, _unresolved_discards_total
    (tests/golden/neighbor.prom has the full exposition).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from kube_scale_exporter.files import PROC_STAT_BYTES, read_capped
from kube_scale_exporter.flagtypes import non_negative_int
from kube_scale_exporter.metrics import CounterFamily, Family, GaugeFamily
from kube_scale_exporter.netlink.neighbor import (
    NeighborCount,
    NeighborTable,
    count_entries,
    host_gc_eligible,
    read_tables,
)
from kube_scale_exporter.netlink.route import RouteSocket
from kube_scale_exporter.registry import Collector, Finding

SYSCTL_PREFIX = {"ipv4": "net.ipv4.neigh.default", "ipv6": "net.ipv6.neigh.default"}
PROC_STAT_FILE = {"ipv4": "arp_cache", "ipv6": "ndisc_cache"}

# Kernel counters worth an operator's attention: name, ndt_stats field, help.
COUNTERS = (
    (
        "kubescale_neighbor_table_overflows",
        "table_fulls",
        "Times an entry could not be added because the table was full (the kernel's table_fulls; "
        "'neighbor table overflow!' in dmesg).",
    ),
    (
        "kubescale_neighbor_forced_gc_runs",
        "forced_gc_runs",
        "Forced garbage collections: the table was above gc_thresh2 (or at gc_thresh3) when adding.",
    ),
    ("kubescale_neighbor_allocations", "allocs", "Entries allocated."),
    ("kubescale_neighbor_destroys", "destroys", "Entries destroyed."),
    (
        "kubescale_neighbor_resolution_failures",
        "res_failed",
        "Address resolutions that failed (no ARP / NDISC answer).",
    ),
)

# gc_thresh3 should be at least this many times the entries a node needs: room for a
# burst (a rollout, a rescheduled batch of pods) without evicting entries in use.
HEADROOM = 2


@dataclass(frozen=True)
class NeighborState:
    """One read of the tables; `counts` (a dump) only when `check` runs."""

    tables: Mapping[str, NeighborTable]
    discards: Mapping[str, int]
    counts: Mapping[str, NeighborCount]
    expected_peers: int
    in_host_netns: bool


class NeighborCollector(Collector):
    name = "neighbor"
    modes = frozenset({"node"})
    default_enabled = True
    help = (
        "Neighbor (ARP/NDISC) tables per family: entries, gc_thresh1-3, overflows, GC and "
        "resolution counters; O(1) in table size (one netlink request)."
    )

    @classmethod
    def add_arguments(cls, group: argparse._ArgumentGroup) -> None:
        group.add_argument(
            "--neighbor.expected-peers",
            dest="neighbor_expected_peers",
            type=non_negative_int,
            default=0,
            metavar="N",
            help="For `check`: the most neighbors this node may need per family (nodes and "
            "pods it talks to directly on its L2 segments). gc_thresh1-3 are sized for "
            "the larger of this and what the node has now (default 0: what it has now).",
        )

    def __init__(self, args: argparse.Namespace):
        super().__init__(args)
        self._procfs = args.procfs
        self._expected_peers = args.neighbor_expected_peers
        # Only `check` pays for a dump (O(table size)); scrapes stay O(1).
        self._dump = args.check
        self._sock = RouteSocket()

    def observe(self) -> NeighborState:
        tables = read_tables(self._sock)
        if not tables:
            raise RuntimeError("the kernel reported no arp_cache or ndisc_cache table")
        return NeighborState(
            tables=tables,
            discards=read_unresolved_discards(self._procfs),
            counts=count_entries(self._sock) if self._dump else {},
            expected_peers=self._expected_peers,
            in_host_netns=os.path.isdir(os.path.join(self._procfs, "sys/net/ipv4/neigh/default")),
        )

    @staticmethod
    def families(state: NeighborState) -> list[Family]:
        return table_families(state.tables, state.discards)

    @staticmethod
    def advise(state: NeighborState) -> list[Finding]:
        return advise(state.tables, state.counts, state.expected_peers, state.in_host_netns)

    def close(self) -> None:
        self._sock.close()


def read_unresolved_discards(procfs: str) -> dict[str, int]:
    """Packets dropped while waiting for resolution, per family, summed over CPUs.

    /proc/net/stat/* exists only in the host network namespace; elsewhere this is empty.
    """
    found = {}
    for family, filename in PROC_STAT_FILE.items():
        try:
            data = read_capped(
                os.path.join(procfs, "net/stat", filename), PROC_STAT_BYTES, "PROC_STAT_BYTES"
            )
            header, *rows = data.decode("ascii", "replace").split("\n")
        except FileNotFoundError:
            continue
        column = header.split().index("unresolved_discards")
        found[family] = sum(int(row.split()[column], 16) for row in rows if row.strip())
    return found


def table_families(
    tables: Mapping[str, NeighborTable], discards: Mapping[str, int]
) -> list[Family]:
    """The collector's exposition for tables read from the kernel."""
    gauges = [
        (
            "kubescale_neighbor_entries",
            "entries",
            "Entries in the kernel's neighbor table, all network namespaces (PERMANENT included).",
        ),
        (
            "kubescale_neighbor_gc_thresh1",
            "thresh1",
            "Below this many entries GC never runs (sysctl net.*.neigh.default.gc_thresh1).",
        ),
        (
            "kubescale_neighbor_gc_thresh2",
            "thresh2",
            "Above this many entries adds force a GC (sysctl net.*.neigh.default.gc_thresh2).",
        ),
        (
            "kubescale_neighbor_gc_thresh3",
            "thresh3",
            "Hard limit: adds fail once this many GC-eligible entries exist "
            "(sysctl net.*.neigh.default.gc_thresh3).",
        ),
    ]
    out: list[Family] = []
    for name, attr, text in gauges:
        family = GaugeFamily(name, text, labels=["family"])
        for t in tables.values():
            family.add_metric([t.family], getattr(t, attr))
        out.append(family)
    for name, field, text in COUNTERS:
        family = CounterFamily(name, text, labels=["family"])
        for t in tables.values():
            if field in t.stats:  # table_fulls is missing on old kernels
                family.add_metric([t.family], t.stats[field])
        out.append(family)
    family = CounterFamily(
        "kubescale_neighbor_unresolved_discards",
        "Packets dropped because their queue for an unresolved neighbor was full.",
        labels=["family"],
    )
    for name in tables:
        if name in discards:
            family.add_metric([name], discards[name])
    out.append(family)
    return out


def is_short(need: int, table: NeighborTable) -> bool:
    """gc_thresh3 below HEADROOM x need, or gc_thresh2 below 3/4 of that."""
    return table.thresh3 < HEADROOM * need or table.thresh2 < HEADROOM * need * 3 / 4


def recommended_thresholds(need: int, table: NeighborTable) -> tuple[int, int, int]:
    """gc_thresh1-3 for a node that needs `need` entries, none lower than now.

    gc_thresh3 = HEADROOM x need, so a burst fits; gc_thresh2 = 3/4 of it, so the steady
    state stays below the forced-GC line with a margin; gc_thresh1 = 1/4 of it, so periodic
    GC still prunes stale entries. Rounded up to multiples of 1024.
    """
    thresh3 = max(1024 * math.ceil(HEADROOM * need / 1024), table.thresh3)
    thresh2 = min(max(thresh3 * 3 // 4, table.thresh2), thresh3)
    thresh1 = min(max(thresh3 // 4, table.thresh1), thresh2)
    return thresh1, thresh2, thresh3


def advise(
    tables: Mapping[str, NeighborTable],
    counts: Mapping[str, NeighborCount],
    expected_peers: int,
    in_host_netns: bool,
) -> list[Finding]:
    """What `check` says about each family's table.

    The host's GC-eligible entries are bounded from above as the neighbor_gc collector
    exports them (host_gc_eligible).
    """
    findings = []
    if not in_host_netns:
        findings.append(
            Finding(
                "warning",
                "the exporter is not in the host network namespace",
                "It sees only its own namespace's entries and cannot read the gc_thresh sysctls' "
                "files; run it with hostNetwork: true.",
            )
        )
    for name, table in sorted(tables.items()):
        count = counts.get(name, NeighborCount())
        eligible = host_gc_eligible(table, count)
        need = max(eligible, expected_peers)
        overflows = table.stats.get("table_fulls", 0)
        state = (
            f"{name}: {table.entries} entries (at most {eligible} GC-eligible), "
            f"gc_thresh1/2/3 = {table.thresh1}/{table.thresh2}/{table.thresh3}"
        )
        if expected_peers:
            state += f", {expected_peers} expected peers"
        if overflows:
            state += f", {overflows} overflows since boot"
        if not is_short(need, table):
            findings.append(Finding("info", state + ": enough headroom"))
            continue
        if need >= table.thresh3 or overflows:
            severity, why = (
                "critical",
                (
                    "gc_thresh3 is too low: past it new neighbors fail with ENOBUFS and traffic "
                    "to them is dropped"
                ),
            )
        elif need > table.thresh2:
            severity, why = (
                "warning",
                (
                    "more than gc_thresh2: every add forces a GC that evicts entries in use, causing "
                    "re-resolution storms"
                ),
            )
        else:
            severity, why = "warning", f"less than {HEADROOM}x headroom below gc_thresh3"
        prefix = SYSCTL_PREFIX[name]
        t1, t2, t3 = recommended_thresholds(need, table)
        findings.append(
            Finding(
                severity,
                f"{state}: {why}",
                "\n".join(
                    [
                        f"Size the {name} table for {need} entries with {HEADROOM}x headroom; on the node "
                        "(e.g. in /etc/sysctl.d/60-neighbor.conf, then `sysctl --system`):",
                        f"{prefix}.gc_thresh1 = {t1}",
                        f"{prefix}.gc_thresh2 = {t2}",
                        f"{prefix}.gc_thresh3 = {t3}",
                    ]
                ),
            )
        )
    return findings
