"""Golden exposition and `check` findings from fixed cluster states (UPDATE_GOLDEN=1 rewrites)."""

from kube_scale_exporter.collectors.etcd.advice import advise
from kube_scale_exporter.collectors.etcd.state import EtcdState, families
from kube_scale_exporter.etcd.client import Status, TLSFiles
from kube_scale_exporter.etcd.cluster import ClusterState, MemberState
from testbed.golden import assert_golden, series_count

MiB = 1024 * 1024


def status(member_id, leader_id, size, in_use, quota=0, term=2, applied=1234):
    return Status(member_id, leader_id, "3.5.1", size, in_use, quota, term, applied)


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
            ),
            MemberState(
                "m1",
                "https://10.0.0.2:2379",
                status("2", "1", 2047 * MiB, 1900 * MiB),
                None,
                2048 * MiB,
                "metrics",
                frozenset({"NOSPACE"}),
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
            ),
        ),
        None,
        0.0,
    )
    down = ClusterState("spare", (), "http://10.0.1.1:2379: ConnectionRefused", 0.0)
    keys = {
        "main": ({"pods": 110000, "events": 40000, "example.com/widgets": 12, "other": 3}, 1.7e9),
        "events": ({"events": 250000}, 1.7e9 + 5),
    }
    return [main, events, down], keys


def test_golden_exposition_and_its_series_budget():
    states, keys = fixed_states()
    text = assert_golden("etcd", families(EtcdState(states, keys, 300.0)))
    # docs/etcd.md: 10 per answering member, 1 per silent member, per cluster 1 (up) and,
    # once counted, 1 (timestamp) + its resources.
    answering, silent = 3, 1
    assert series_count(text) == 10 * answering + silent + 3 + (1 + 4) + (1 + 1)


def test_findings_from_the_same_states():
    states, keys = fixed_states()
    found = {(f.severity, f.summary) for f in advise(EtcdState(states, keys, 300.0))}
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
    assert ("critical", "etcd spare: no member answered") in found
    assert (
        "warning",
        "etcd main: holds 40,000 event keys (27% of 150,015) beside the cluster's objects",
    ) in found
    with_tls = {
        f.summary: f.advice
        for f in advise(
            EtcdState(states, keys, 300.0, TLSFiles("/pki/ca.crt", "/pki/c.crt", "/pki/c.key"))
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
    # events etcd: 64 of 8192 MiB, little free, only events: nothing to act on.
    assert not [s for sev, s in found if "etcd events" in s and sev != "info"]
