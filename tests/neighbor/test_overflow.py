"""A real neighbor table overflow, in a throwaway namespace, for a second or two.

The ARP table is the host's: while it is full every namespace on this host fails to add
neighbors, so the namespace is deleted (which flushes its entries) as soon as the
overflow has been scraped, and the test checks that the table has room again.
"""

import pytest

from testbed.metrics import collect, sample, wait_until
from testbed.netns import NetNS, neighbor_adds

pytestmark = pytest.mark.integration


def test_overflow_raises_table_overflows_total(collectors):
    (neighbor,) = collectors("--collector.neighbor")
    before = collect(neighbor)
    thresh3 = int(sample(before, "kubescale_neighbor_gc_thresh3", family="ipv4"))
    # Fresh STALE entries: forced GC frees only entries older than 5 s, so it frees none
    # of these and adds past gc_thresh3 fail.
    with NetNS("kst-overflow") as ns:
        result = ns.batch(neighbor_adds(thresh3 + 200, "ipv4", "stale"), force=True)
        during = collect(neighbor)

    def room_again():
        return sample(collect(neighbor), "kubescale_neighbor_entries", family="ipv4") < thresh3

    assert "No buffer space available" in result.stderr
    for name in (
        "kubescale_neighbor_table_overflows_total",
        "kubescale_neighbor_forced_gc_runs_total",
    ):
        assert sample(during, name, family="ipv4") > sample(before, name, family="ipv4"), name
    assert sample(during, "kubescale_neighbor_entries", family="ipv4") >= thresh3
    # The kernel frees a deleted namespace's entries in a background worker.
    assert wait_until(room_again, timeout=10)
