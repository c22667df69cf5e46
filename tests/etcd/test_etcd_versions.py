"""etcd versions and storage versions: what Status tells of each, and what `check` says of
a cluster part way through an upgrade or a downgrade, on real etcd 3.5.30 and 3.6."""

import pytest

from kube_scale_exporter.collectors.etcd.advice import advise
from kube_scale_exporter.collectors.etcd.state import EtcdState
from kube_scale_exporter.etcd import answers
from kube_scale_exporter.etcd.cluster import ClusterState, MemberState
from tests.etcd.conftest import sent_status as sent
from testbed import etcd_server
from testbed.metrics import wait_until

GiB = 1 << 30


def cluster(**docs) -> EtcdState:
    """One cluster "main" whose members (by name) answered these Status documents."""
    members = tuple(
        MemberState(
            name, f"https://10.0.0.{i}:2379", answers.status(doc), None, 2 * GiB, "status", None
        )
        for i, (name, doc) in enumerate(docs.items(), start=1)
    )
    return EtcdState([ClusterState("main", members, None, 0.0)], {}, 300.0)


def about_versions(state: EtcdState) -> set[tuple[str, str]]:
    return {(f.severity, f.summary) for f in advise(state) if "version" in f.summary}


@pytest.mark.unit
@pytest.mark.parametrize(
    "version,storage,quota",
    [("3.4", None, 0), ("3.5.30", None, 0), ("3.6", "3.6.0", 16 << 20)],
)
def test_each_versions_status_as_etcd_sent_it(version, storage, quota):
    status = answers.status(sent(version))
    assert status.version.startswith(version)
    assert (status.storage_version, status.db_size_quota, status.new_fields) == (storage, quota, ())
    assert about_versions(cluster(m0=sent(version), m1=sent(version))) == set()


@pytest.mark.unit
def test_the_matrix_is_what_the_exporter_knows():
    assert {v[:3] for v in etcd_server.VERSIONS} == set(answers.KNOWN_VERSIONS)


@pytest.mark.unit
def test_a_half_done_upgrade_names_each_version():
    # A 3.6 member among 3.5 ones keeps its data at 3.5 (the cluster version): as the real
    # one does below.
    on_35_data = sent("3.6", storageVersion="3.5.0")
    state = cluster(m0=sent("3.5.30"), m1=sent("3.5.30"), m2=on_35_data)
    assert about_versions(state) == {
        (
            "warning",
            "etcd main: members run different etcd versions: 3.5.30 on m0, m1; 3.6.16 on m2",
        )
    }
    [advice] = [f.advice for f in advise(state) if "different etcd versions" in f.summary]
    assert "runs as its oldest member (3.5)" in advice


@pytest.mark.unit
def test_data_left_at_an_older_storage_version_is_named():
    state = cluster(m0=sent("3.6"), m1=sent("3.6", storageVersion="3.5.0"), m2=sent("3.6"))
    assert about_versions(state) == {
        ("warning", "etcd main: etcd 3.6.16 with its data at storage version 3.5.0 on m1")
    }


@pytest.mark.unit
def test_a_storage_version_the_exporter_does_not_know_is_named():
    state = cluster(m0=sent("3.6", storageVersion="3.7.0"), m1=sent("3.6"))
    assert about_versions(state) == {
        ("info", "etcd main: a version this exporter does not know: storage version 3.7.0 on m0")
    }


@pytest.mark.unit
def test_an_etcd_version_the_exporter_does_not_know_is_named():
    state = cluster(m0=sent("3.6", version="3.7.0"), m1=sent("3.6", version="3.7.0"))
    assert about_versions(state) == {
        ("info", "etcd main: a version this exporter does not know: etcd 3.7.0 on m0, m1")
    }
    assert about_versions(cluster(m0=sent("3.6", version=None))) == {
        ("info", "etcd main: a version this exporter does not know: no etcd version on m0")
    }
    # Text that is no etcd version: shown with what a version has no use for (here a
    # terminal escape) as ?.
    assert about_versions(cluster(m0=sent("3.6", version="\x1b[2Jv3.6"))) == {
        ("info", "etcd main: a version this exporter does not know: etcd ??2Jv3.6 on m0")
    }


def downgrade(member, action: str) -> None:
    """etcdctl downgrade ACTION 3.5, through the member's gateway."""
    reply = member.session().post(
        member.client_url + "/v3/maintenance/downgrade",
        json={"action": action, "version": "3.5"},
        timeout=10,
    )
    reply.raise_for_status()


def findings_settle_on(collector, want: set, timeout: float) -> set:
    """`check`'s version findings, read until they are `want` (etcd moves storage versions
    on its own monitor, every few seconds) or `timeout` passed: the last ones read."""
    seen = set()

    def settled():
        nonlocal seen
        seen = about_versions(collector.observe())
        return seen == want

    wait_until(settled, timeout)
    return seen


@pytest.mark.integration
def test_a_rolling_upgrade_from_35_to_36_then_its_end(etcd_factory, collector_factory):
    members = etcd_factory.cluster(3, version="3.5.30")
    urls = ",".join(m.client_url for m in members)
    collector = collector_factory("--etcd.cluster", f"main={urls}", "--etcd.min-interval", "0.1")
    assert about_versions(collector.observe()) == set()
    # The upgrade's first step: m2 stopped and started again on etcd 3.6, same data.
    members[2].stop()
    members[2].version = "3.6"
    members[2].start()
    state = collector.observe()
    v36 = {m.name: m.status for m in state.clusters[0].members}["m2"]
    assert v36.version.startswith("3.6.") and v36.storage_version == "3.5.0"
    assert about_versions(state) == {
        (
            "warning",
            "etcd main: members run different etcd versions: "
            f"3.5.30 on m0, m1; {v36.version} on m2",
        )
    }
    # The rest: once all run 3.6 the cluster version moves, then each member's data.
    for m in members[:2]:
        m.stop()
        m.version = "3.6"
        m.start()
    assert findings_settle_on(collector, set(), 30) == set()
    assert {m.status.storage_version for m in collector.observe().clusters[0].members} == {"3.6.0"}


@pytest.mark.integration
def test_a_downgrade_enabled_moves_the_data_back_and_cancelled_forward(
    etcd_factory, collector_factory
):
    etcd = etcd_factory(version="3.6")
    collector = collector_factory(
        "--etcd.cluster", f"main={etcd.client_url}", "--etcd.min-interval", "0.1"
    )
    version = collector.observe().clusters[0].members[0].status.version
    downgrade(etcd, "ENABLE")
    behind = {
        ("warning", f"etcd main: etcd {version} with its data at storage version 3.5.0 on default")
    }
    assert findings_settle_on(collector, behind, 30) == behind
    [advice] = [f.advice for f in advise(collector.observe()) if "storage version" in f.summary]
    assert "etcdctl downgrade cancel" in advice
    downgrade(etcd, "CANCEL")
    assert findings_settle_on(collector, set(), 30) == set()
