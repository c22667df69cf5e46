"""Golden expositions from netlink replies recorded on a real kernel (tests/neighbor/fixtures).

The recordings were taken together with /proc/net/stat, which shows the same kernel
counters through another interface: decoding the binary replies must give the same
numbers, table_fulls (the field pyroute2 drops) included.
"""

import struct
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from kube_scale_exporter.collectors.neighbor import read_unresolved_discards, table_families
from kube_scale_exporter.collectors.neighbor_gc import count_families
from kube_scale_exporter.netlink.neighbor import EntryCounter, TableReader
from testbed.golden import assert_golden
from tests.neighbor.recorded import FIXTURES, RECORDED_ENTRIES, load, replay
from tests.neighbor.test_kernel import PROC_COLUMNS

pytestmark = pytest.mark.unit

PROCFS = str(FIXTURES / "procfs")


def recorded_tables():
    return replay(TableReader(), load(FIXTURES / "neightbl_dump.bin")).tables


def recorded_counts():
    return replay(EntryCounter(), load(FIXTURES / "neigh_dump.bin")).counts


def proc_stat_totals(family):
    name = {"ipv4": "arp_cache", "ipv6": "ndisc_cache"}[family]
    header, *rows = (FIXTURES / "procfs/net/stat" / name).read_text().split("\n")
    values = [[int(v, 16) for v in row.split()] for row in rows if row.strip()]
    totals = {c: sum(r[i] for r in values) for i, c in enumerate(header.split())}
    totals["entries"] = values[0][header.split().index("entries")]
    return totals


def test_neighbor_golden():
    assert_golden("neighbor", table_families(recorded_tables(), read_unresolved_discards(PROCFS)))


def test_neighbor_gc_golden():
    assert_golden("neighbor_gc", count_families(recorded_tables(), recorded_counts()))


def test_decoded_tables_agree_with_proc_net_stat_recorded_alongside():
    from testbed.metrics import sample  # noqa: PLC0415

    families = table_families(recorded_tables(), read_unresolved_discards(PROCFS))
    for family in ("ipv4", "ipv6"):
        proc = proc_stat_totals(family)
        for metric, column in PROC_COLUMNS.items():
            assert sample(families, metric, family=family) == proc[column], (family, metric)
    # The recording was made after a real overflow, so the 11th field is not just zero.
    assert sample(families, "kubescale_neighbor_table_overflows_total", family="ipv4") > 0


def test_decoded_counts_are_the_recorded_namespace_entries():
    exempt = Counter(
        f
        for f, _, nud, extra in RECORDED_ENTRIES
        if nud == "permanent" or extra in (("extern_learn",), ("managed",))
    )
    total = Counter(f for f, *_ in RECORDED_ENTRIES)
    for family, count in recorded_counts().items():
        assert (count.entries, count.gc_exempt) == (total[family], exempt[family])


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_damaged_replies_raise_and_never_hang(data):
    """A chunk cut short or with bytes overwritten either parses or raises ValueError /
    struct.error (OSError for an error message); it never loops."""
    recorded = load(FIXTURES / data.draw(st.sampled_from(["neigh_dump.bin", "neightbl_dump.bin"])))
    chunk = bytearray(data.draw(st.sampled_from(recorded)))
    if data.draw(st.booleans()):
        del chunk[data.draw(st.integers(0, len(chunk))) :]
    for _ in range(data.draw(st.integers(0, 4)) if chunk else 0):
        chunk[data.draw(st.integers(0, len(chunk) - 1))] = data.draw(st.integers(0, 255))
    for consumer in (EntryCounter(), TableReader()):
        try:
            consumer(memoryview(bytes(chunk)))
        except (ValueError, struct.error, OSError):
            pass


def test_gc_eligible_is_never_negative_when_the_table_shrank_between_the_reads():
    """The table is read before the dump: entries freed in between can leave fewer entries
    than exempt ones counted."""
    from testbed.metrics import sample  # noqa: PLC0415

    tables = recorded_tables()
    counts = recorded_counts()
    tables["ipv4"].entries = counts["ipv4"].gc_exempt - 1
    families = count_families(tables, counts)
    assert sample(families, "kubescale_neighbor_gc_eligible_entries", family="ipv4") == 0
    assert sample(families, "kubescale_neighbor_gc_eligible_entries", family="ipv6") == 7
