"""Neighbor entries that count against gc_thresh3, from a dump of this namespace's tables.

The kernel keeps no count of GC-eligible entries (all but PERMANENT, externally learned
and managed ones), so this collector dumps every entry with RTM_GETNEIGH and reads the
fixed structs in place: ~1 ms per 1,000 entries, ~0.1 s at 100k. A dump sees only the
exporter's own network namespace (the host's, with hostNetwork); entries in pods' own
namespaces count in kubescale_neighbor_entries but not here. For alerting, entries less
the exempt ones bounds the host's GC-eligible entries from above:
kubescale_neighbor_entries - kubescale_neighbor_gc_exempt_entries.

    # HELP kubescale_neighbor_gc_eligible_entries Entries in this network namespace that count against gc_thresh3 (not PERMANENT, externally learned or managed).
    # TYPE kubescale_neighbor_gc_eligible_entries gauge
    kubescale_neighbor_gc_eligible_entries{family="ipv4"} 3.0
    kubescale_neighbor_gc_eligible_entries{family="ipv6"} 3.0
    # HELP kubescale_neighbor_gc_exempt_entries Entries in this network namespace that never count against gc_thresh3 (PERMANENT, externally learned or managed).
    # TYPE kubescale_neighbor_gc_exempt_entries gauge
    kubescale_neighbor_gc_exempt_entries{family="ipv4"} 4.0
    kubescale_neighbor_gc_exempt_entries{family="ipv6"} 1.0
"""
from __future__ import annotations

import argparse
from typing import Iterable, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.netlink.neighbor import NeighborCount, count_entries
from exporter.netlink.route import RouteSocket
from exporter.registry import Collector, register


@register
class NeighborGCCollector(Collector):
    name = "neighbor_gc"
    modes = frozenset({"node"})
    default_enabled = True
    help = ("GC-eligible and exempt neighbor entries from a dump of this network namespace's "
            "tables: about 1 ms per 1,000 entries (0.1 s at 100k) each scrape. Switch it off "
            "with --no-collector.neighbor_gc where the host table is huge and the O(1) "
            "neighbor collector is enough.")

    def __init__(self, args: argparse.Namespace):
        super().__init__(args)
        self._sock = RouteSocket()

    def collect(self) -> Iterable[Metric]:
        return count_families(count_entries(self._sock))

    def close(self) -> None:
        self._sock.close()


def count_families(counts: Mapping[str, NeighborCount]) -> list[Metric]:
    eligible = GaugeMetricFamily(
        "kubescale_neighbor_gc_eligible_entries",
        "Entries in this network namespace that count against gc_thresh3 "
        "(not PERMANENT, externally learned or managed).", labels=["family"])
    exempt = GaugeMetricFamily(
        "kubescale_neighbor_gc_exempt_entries",
        "Entries in this network namespace that never count against gc_thresh3 "
        "(PERMANENT, externally learned or managed).", labels=["family"])
    for name, count in counts.items():
        eligible.add_metric([name], count.gc_eligible)
        exempt.add_metric([name], count.gc_exempt)
    return [eligible, exempt]
