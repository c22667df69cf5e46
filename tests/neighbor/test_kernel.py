"""Every neighbor metric against the real kernel: its own /proc files and entries we add.

The tables are global and other tests may add entries at the same time, so global
figures are compared with /proc read before and after (exact when /proc held still) and
deltas are taken in attempts until one ran undisturbed. The dump's namespace-local counts
are compared with `ip neigh show nud all` of a namespace only this test touches.
"""

import json
from pathlib import Path

import pytest

from kube_scale_exporter.netlink.neighbor import count_entries
from kube_scale_exporter.netlink.route import RouteSocket
from testbed.metrics import collect, sample
from testbed.netns import neighbor_adds

FAMILIES = ("ipv4", "ipv6")
STAT_FILE = {"ipv4": "arp_cache", "ipv6": "ndisc_cache"}
SYSCTL = {"ipv4": "/proc/sys/net/ipv4/neigh/default", "ipv6": "/proc/sys/net/ipv6/neigh/default"}
# Metric -> /proc/net/stat column.
PROC_COLUMNS = {
    "kubescale_neighbor_entries": "entries",
    "kubescale_neighbor_table_overflows_total": "table_fulls",
    "kubescale_neighbor_forced_gc_runs_total": "forced_gc_runs",
    "kubescale_neighbor_allocations_total": "allocs",
    "kubescale_neighbor_destroys_total": "destroys",
    "kubescale_neighbor_resolution_failures_total": "res_failed",
    "kubescale_neighbor_unresolved_discards_total": "unresolved_discards",
}


def proc_stat(family):
    """The /proc/net/stat row summed over CPUs (entries is global: taken once)."""
    header, *rows = Path("/proc/net/stat", STAT_FILE[family]).read_text().split("\n")
    columns = header.split()
    values = [[int(v, 16) for v in row.split()] for row in rows if row.strip()]
    totals = {c: sum(r[i] for r in values) for i, c in enumerate(columns)}
    totals["entries"] = values[0][columns.index("entries")]
    return totals


def scrape(collector):
    return collect(collector)


@pytest.mark.unit
def test_every_table_metric_matches_the_kernels_own_files(collectors):
    (neighbor,) = collectors("--collector.neighbor")
    for _ in range(20):
        before = {f: proc_stat(f) for f in FAMILIES}
        families = scrape(neighbor)
        after = {f: proc_stat(f) for f in FAMILIES}
        if before == after:
            break
    else:
        raise AssertionError("/proc/net/stat never held still for one scrape")
    for family in FAMILIES:
        for n in (1, 2, 3):
            expected = int(Path(SYSCTL[family], f"gc_thresh{n}").read_text())
            assert sample(families, f"kubescale_neighbor_gc_thresh{n}", family=family) == expected
        for metric, column in PROC_COLUMNS.items():
            assert sample(families, metric, family=family) == after[family][column], metric


def global_entries(collector):
    families = scrape(collector)
    return {f: sample(families, "kubescale_neighbor_entries", family=f) for f in FAMILIES}


@pytest.mark.integration
def test_entries_count_what_a_namespace_adds(collectors, netns):
    """Entries in a pod-like namespace count in the host-wide entries metric."""
    (neighbor,) = collectors("--collector.neighbor")
    adds = {
        "ipv4": neighbor_adds(40, "ipv4", "stale")
        + neighbor_adds(25, "ipv4", "permanent", start=100),
        "ipv6": neighbor_adds(30, "ipv6", "stale")
        + neighbor_adds(15, "ipv6", "permanent", start=100),
    }
    deletes = [
        line.replace("neigh add", "neigh del").split(" lladdr")[0] + " dev v0"
        for lines in adds.values()
        for line in lines
    ]
    for _ in range(10):
        before = global_entries(neighbor)
        netns.batch(adds["ipv4"] + adds["ipv6"])
        during = global_entries(neighbor)
        netns.batch(deletes)
        after = global_entries(neighbor)
        if all(during[f] - before[f] == len(adds[f]) == during[f] - after[f] for f in adds):
            return
    raise AssertionError(f"entries never rose by exactly what was added: {before} {during} {after}")


def ip_neigh_json(ns):
    return json.loads(ns.ip("-j", "neigh", "show", "nud", "all").stdout or "[]")


def namespace_counts():
    """count_entries() from a socket opened in the calling thread's namespace."""
    sock = RouteSocket()
    try:
        return count_entries(sock)
    finally:
        sock.close()


# 10 GC-eligible and 6 exempt IPv4 entries, 6 and 2 IPv6, of every kind the kernel tells apart.
MIXED_ENTRIES = (
    neighbor_adds(7, "ipv4", "stale")
    + neighbor_adds(4, "ipv4", "permanent", start=50)
    + neighbor_adds(3, "ipv4", "reachable", start=80)
    + neighbor_adds(5, "ipv6", "stale")
    + neighbor_adds(2, "ipv6", "permanent", start=50)
    + neighbor_adds(1, "ipv6", "noarp", start=80)
    + [
        "neigh add 10.99.0.1 lladdr 02:00:00:00:99:01 dev v0 nud stale extern_learn",
        "neigh add 10.99.0.2 dev v0 managed",
    ]
)
MIXED_EXEMPT = {"ipv4": 6, "ipv6": 2}


def assert_counts_are_ips(netns, counts, added: int) -> None:
    listed = ip_neigh_json(netns)
    assert len(listed) == added  # nothing else appeared in the namespace
    for family, is_family in (("ipv4", lambda d: ":" not in d), ("ipv6", lambda d: ":" in d)):
        mine = [e for e in listed if is_family(e["dst"])]
        exempt = [
            e for e in mine if "PERMANENT" in e["state"] or "extern_learn" in e or "managed" in e
        ]
        assert (counts[family].entries, counts[family].gc_exempt) == (len(mine), len(exempt))


@pytest.mark.integration
def test_count_entries_in_a_namespace_matches_ip(netns):
    """The netlink layer's dump of its own namespace, against ip's own dump of it."""
    netns.batch(MIXED_ENTRIES)
    counts = netns.run(namespace_counts)
    assert_counts_are_ips(netns, counts, len(MIXED_ENTRIES))
    assert (counts["ipv4"].gc_eligible, counts["ipv4"].gc_exempt) == (10, MIXED_EXEMPT["ipv4"])
    assert (counts["ipv6"].gc_eligible, counts["ipv6"].gc_exempt) == (6, MIXED_EXEMPT["ipv6"])


@pytest.mark.integration
def test_gc_eligible_is_the_hosts_entries_less_the_namespaces_exempt_ones(collectors, netns):
    """Run in a namespace holding only our entries, the collector's value is the host-wide
    entry count of the same scrape less the exempt entries added there; compared in an
    attempt where the global table held still (/proc/net/stat before and after)."""
    netns.batch(MIXED_ENTRIES)
    neighbor, gc = collectors("--collector.neighbor", "--collector.neighbor_gc")
    for _ in range(20):
        before = {f: proc_stat(f)["entries"] for f in FAMILIES}
        families = netns.run(lambda: scrape(neighbor) + scrape(gc))
        after = {f: proc_stat(f)["entries"] for f in FAMILIES}
        entries = {f: sample(families, "kubescale_neighbor_entries", family=f) for f in FAMILIES}
        if before == after == entries:
            break
    else:
        raise AssertionError(f"the global table never held still: {before} {entries} {after}")
    for family in FAMILIES:
        assert (
            sample(families, "kubescale_neighbor_gc_eligible_entries", family=family)
            == entries[family] - MIXED_EXEMPT[family]
        ), family


@pytest.mark.integration
def test_a_dump_larger_than_one_reply_chunk_counts_every_entry(netns):
    """5,000 entries span many 32 KiB chunks; the count must not lose any at the seams."""
    netns.batch(neighbor_adds(3000, "ipv4", "permanent") + neighbor_adds(2000, "ipv6", "permanent"))
    counts = netns.run(namespace_counts)
    assert (counts["ipv4"].entries, counts["ipv4"].gc_exempt) == (3000, 3000)
    assert (counts["ipv6"].entries, counts["ipv6"].gc_exempt) == (2000, 2000)


@pytest.mark.integration
def test_long_runs_of_one_layout_count_every_entry_by_its_own_state_and_flags(netns):
    """Thousands of entries of one layout (which the counter reads a field at a time)
    holding PERMANENT, stale and externally learned entries together, with a few of other
    layouts among them, as on a host: a protocol (8 bytes more, as the managed flag is),
    managed entries without a link-layer address. ~300 GC-eligible entries, for a second."""
    adds = (
        neighbor_adds(3000, "ipv4", "permanent")
        + neighbor_adds(150, "ipv4", "stale", start=5000)
        + [
            f"neigh add 10.98.0.{i} lladdr 02:00:00:00:98:{i:02x} dev v0 nud stale extern_learn"
            for i in range(1, 101)
        ]
        + [
            f"neigh add 10.97.{i >> 8}.{i & 255} lladdr 02:00:00:00:97:01 dev v0 nud permanent "
            "protocol 3"
            for i in range(20)
        ]
        + [f"neigh add 10.96.0.{i} dev v0 managed" for i in range(1, 11)]
        + neighbor_adds(1000, "ipv6", "permanent")
        + neighbor_adds(50, "ipv6", "stale", start=2000)
    )
    netns.batch(adds)
    counts = netns.run(namespace_counts)
    assert_counts_are_ips(netns, counts, len(adds))
    assert (counts["ipv4"].gc_eligible, counts["ipv4"].gc_exempt) == (150, 3130)
    assert (counts["ipv6"].gc_eligible, counts["ipv6"].gc_exempt) == (50, 1000)
