"""Golden exposition and `check` findings from fixed cluster states (UPDATE_GOLDEN=1 rewrites)."""

import pytest

from kube_scale_exporter.collectors.etcd.advice import advise
from kube_scale_exporter.collectors.etcd.state import EtcdState, families
from kube_scale_exporter.etcd.answers import Status
from kube_scale_exporter.etcd.client import TLSFiles
from kube_scale_exporter.etcd.cluster import ClusterState, MemberState
from kube_scale_exporter.etcd.metrics_only import status_of
from kube_scale_exporter.etcd.page import Histogram, MemberMetrics
from testbed.golden import assert_golden, series_count

pytestmark = pytest.mark.unit

MiB = 1024 * 1024
METRICS_ONLY = frozenset({"local"})


def status(member_id, leader_id, size, in_use, quota=0, term=2, applied=1234):
    return Status(member_id, leader_id, "3.7.3", size, in_use, quota, term, applied)


# A healthy local SSD: fsyncs mostly under 2 ms; commits under 8 ms.
FAST = MemberMetrics(
    Histogram((9000, 9950, 9990, 10000, 10000, 10000)),
    Histogram((3000, 4990, 5000, 5000, 5000, 5000)),
    3.56e9,
    120000,
    2**31,
    writes_refused=0,
)
# A network disk: 3% of fsyncs over 16 ms, commits in the hundreds of ms.
SLOW = MemberMetrics(
    Histogram((100, 5000, 9700, 9900, 9990, 10000)),
    Histogram((0, 100, 1000, 3000, 4900, 5000)),
    5.1e11,
    9.9e6,
    2**31,
    writes_refused=0,
)
# A member read through its /metrics alone (--etcd.local-access=metrics), past its quota:
# its page also stands for Status (no raft term), and writes are being refused.
FULL_PAGE = MemberMetrics(
    Histogram((9000, 9950, 9990, 10000, 10000, 10000)),
    Histogram((3000, 4990, 5000, 5000, 5000, 5000)),
    8.1e8,
    4100,
    16 * MiB,
    writes_refused=37,
    db_size=17 * MiB,
    db_size_in_use=10 * MiB,
    is_leader=1,
    applied_index=45,
    member_id="2e1d73757f4e501b",
    version="3.5.30",
)


def fixed_states():
    main = ClusterState(
        "main",
        (
            MemberState(
                "m0",
                "https://10.0.0.1:2379",
                status("1", "1", 1800 * MiB, 900 * MiB),
                None,
                2048 * MiB,
                "metrics",
                frozenset(),
                SLOW,
            ),
            MemberState(
                "m1",
                "https://10.0.0.2:2379",
                status("2", "1", 2047 * MiB, 1900 * MiB),
                None,
                2048 * MiB,
                "flag",
                frozenset({"NOSPACE"}),
                None,
                "http://10.0.0.2:2381/metrics: ConnectionError: refused",
            ),
            MemberState(
                "m2",
                "https://10.0.0.3:2379",
                None,
                "http://10.0.0.3:2379: ConnectTimeout",
                0,
                "",
                None,
            ),
        ),
        None,
        0.0,
    )
    events = ClusterState(
        "events",
        (
            MemberState(
                "e0",
                "https://10.0.1.1:2379",
                status("9", "9", 64 * MiB, 60 * MiB, quota=8192 * MiB, term=7, applied=99),
                None,
                8192 * MiB,
                "status",
                frozenset(),
                FAST,
            ),
        ),
        None,
        0.0,
    )
    down = ClusterState("spare", (), "http://10.0.1.1:2379: ConnectionRefused", 0.0)
    keyless = ClusterState(
        "local",
        (
            MemberState(
                "2e1d73757f4e501b",
                "http://127.0.0.1:2381",
                status_of(FULL_PAGE),
                None,
                16 * MiB,
                "metrics",
                None,
                FULL_PAGE,
            ),
        ),
        None,
        0.0,
    )
    keys = {
        "main": ({"pods": 110000, "events": 40000, "example.com/widgets": 12, "other": 3}, 1.7e9),
        "events": ({"events": 250000}, 1.7e9 + 5),
    }
    return [main, events, down, keyless], keys


def test_golden_exposition_and_its_series_budget():
    states, keys = fixed_states()
    text = assert_golden(
        "etcd", families(EtcdState(states, keys, 300.0, metrics_only=METRICS_ONLY))
    )
    # docs/etcd.md: 11 per answering member (8 read through /metrics alone: no alarms or
    # term), 1 per silent member, per cluster 1 (up) and, once counted, 1 (timestamp) + its
    # resources; performance: 16 per member whose /metrics was read, 1 per member whose
    # page was not.
    answering, keyless, silent, pages, no_page = 3, 1, 1, 3, 2
    assert series_count(text) == (
        11 * answering + 8 * keyless + silent + 4 + (1 + 4) + (1 + 1) + 16 * pages + no_page
    )


def test_findings_from_the_same_states():
    states, keys = fixed_states()
    found = {
        (f.severity, f.summary)
        for f in advise(EtcdState(states, keys, 300.0, metrics_only=METRICS_ONLY))
    }
    assert ("critical", "etcd main: alarm NOSPACE is raised on m1 (writes are refused)") in found
    assert (
        "critical",
        "etcd main member m0: database 1,800 MiB is 88% of its 2,048 MiB quota (metrics)",
    ) in found
    assert (
        "warning",
        (
            "etcd main member m0: 900 MiB of the 1,800 MiB database is free pages; "
            "a defragment returns them"
        ),
    ) in found
    assert ("warning", "etcd main member m2: did not answer") in found
    assert (
        "warning",
        "etcd main member m1: /metrics not read (no disk latency or read load)",
    ) in found
    assert (
        "warning",
        "etcd main member m0: 3.0% of WAL fsyncs took over 16 ms since the "
        "member started (etcd wants the p99 below 10 ms)",
    ) in found
    assert (
        "warning",
        "etcd main member m0: 40.0% of backend commits took over 32 ms since "
        "the member started (etcd wants the p99 below 25 ms)",
    ) in found
    assert ("critical", "etcd spare: no member answered") in found
    assert (
        "warning",
        "etcd main: holds 40,000 event keys (27% of 150,015) beside the cluster's objects",
    ) in found
    with_tls = {
        f.summary: f.advice
        for f in advise(
            EtcdState(
                states,
                keys,
                300.0,
                TLSFiles("/pki/ca.crt", "/pki/c.crt", "/pki/c.key"),
                METRICS_ONLY,
            )
        )
    }
    ctl = "etcdctl --endpoints=https://10.0.0.1:2379 --cacert=/pki/ca.crt --cert=/pki/c.crt --key=/pki/c.key"
    assert with_tls["etcd main: alarm NOSPACE is raised on m1 (writes are refused)"].splitlines()[
        -3:
    ] == [f'{ctl} compaction --physical "$rev"', f"{ctl} defrag --cluster", f"{ctl} alarm disarm"]
    assert with_tls[
        "etcd main member m0: 900 MiB of the 1,800 MiB database is free pages; "
        "a defragment returns them"
    ].endswith(f"\n{ctl} defrag")
    # No etcdctl command names the metrics listener, nor TLS files the pod does not have.
    assert with_tls[
        "etcd local member 2e1d73757f4e501b: 7 MiB of the 17 MiB database is free pages; "
        "a defragment returns them"
    ].endswith("\netcdctl --endpoints=URL defrag")
    assert not [a for a in with_tls.values() if a and "etcdctl" in a and "2381" in a]
    # events etcd: 64 of 8192 MiB, little free, only events: nothing to act on.
    assert not [s for sev, s in found if "etcd events" in s and sev != "info"]
