"""Neighbor entries that count against gc_thresh3 on the whole host: an upper bound.

The kernel keeps no count of GC-eligible entries (all but PERMANENT, externally learned
and managed ones). It keeps one table per family for every network namespace, and its
entry count (RTM_GETNEIGHTBL, ~0.2 ms) is host-wide; but a dump of the entries
(RTM_GETNEIGH: ~1 ms per 1,000 entries, ~0.1 s at 100k) sees only the exporter's own
namespace, the host's with hostNetwork. So each scrape reads both and exports
max(0, table entries - exempt entries in the dump): exempt entries in pods' own
namespaces are counted as GC-eligible, and those namespaces hold few entries, nearly all
GC-eligible anyway. This is the figure to divide by kubescale_neighbor_gc_thresh3.

    # HELP kubescale_neighbor_gc_eligible_entries Upper bound of the host's entries that count against gc_thresh3: all namespaces' entries less the PERMANENT, externally learned and managed ones of the exporter's namespace.
    # TYPE kubescale_neighbor_gc_eligible_entries gauge
    kubescale_neighbor_gc_eligible_entries{family="ipv4"} 5.0
    kubescale_neighbor_gc_eligible_entries{family="ipv6"} 7.0
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from kube_scale_exporter.metrics import Family, GaugeFamily
from kube_scale_exporter.netlink.neighbor import (
    NeighborCount,
    NeighborTable,
    count_entries,
    host_gc_eligible,
    read_tables,
)
from kube_scale_exporter.netlink.route import RouteSocket
from kube_scale_exporter.registry import Collector

# One read of the tables and one dump of this namespace's entries.
NeighborCounts = tuple[Mapping[str, NeighborTable], Mapping[str, NeighborCount]]


class NeighborGCCollector(Collector):
    name = "neighbor_gc"
    modes = frozenset({"node"})
    default_enabled = True
    help = (
        "Host-wide GC-eligible neighbor entries (an upper bound): the table's entries less "
        "the exempt ones in a dump of this network namespace, about 1 ms per 1,000 entries "
        "(0.1 s at 100k) each scrape. Switch it off with --no-collector.neighbor_gc where "
        "the host table is huge and the O(1) neighbor collector is enough."
    )

    def __init__(self, args: argparse.Namespace):
        super().__init__(args)
        self._sock = RouteSocket()

    def observe(self) -> NeighborCounts:
        tables = read_tables(self._sock)
        if not tables:
            raise RuntimeError("the kernel reported no arp_cache or ndisc_cache table")
        return tables, count_entries(self._sock)

    @staticmethod
    def families(state: NeighborCounts) -> list[Family]:
        return count_families(*state)

    def close(self) -> None:
        self._sock.close()


def count_families(
    tables: Mapping[str, NeighborTable], counts: Mapping[str, NeighborCount]
) -> list[Family]:
    """The collector's exposition for one read of the tables and one dump."""
    eligible = GaugeFamily(
        "kubescale_neighbor_gc_eligible_entries",
        "Upper bound of the host's entries that count against gc_thresh3: all namespaces' "
        "entries less the PERMANENT, externally learned and managed ones of the exporter's "
        "namespace.",
        labels=["family"],
    )
    for name, table in tables.items():
        eligible.add_metric([name], host_gc_eligible(table, counts.get(name, NeighborCount())))
    return [eligible]
