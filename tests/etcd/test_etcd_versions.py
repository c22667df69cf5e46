"""etcd versions and storage versions: what Status tells of each, and what `check` says of
a cluster part way through an upgrade or a downgrade, on real etcd 3.6 and 3.7."""

import pytest

from kube_scale_exporter.cli import main
from kube_scale_exporter.collectors.etcd.advice import advise
from kube_scale_exporter.collectors.etcd.state import EtcdState
from kube_scale_exporter.etcd import answers
from kube_scale_exporter.etcd.cluster import ClusterState, MemberState
from tests.etcd.conftest import sent_status as sent
from testbed import builds, etcd_server
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
    return {
        (f.severity, f.summary)
        for f in advise(state)
        if any(word in f.summary for word in ("version", "upgrade", "downgrade"))
    }


@pytest.mark.unit
@pytest.mark.parametrize(
    "version,storage,quota",
    [("3.5.30", None, 0), ("3.6", "3.6.0", 16 << 20), ("3.7", "3.7.0", 16 << 20)],
)
def test_each_versions_status_as_etcd_sent_it(version, storage, quota):
    status = answers.status(sent(version))
    assert status.version.startswith(version)
    assert (status.storage_version, status.db_size_quota, status.new_fields) == (storage, quota, ())
    assert status.downgrade_target is None  # 3.6 and 3.7 send downgradeInfo {}
    assert about_versions(cluster(m0=sent(version), m1=sent(version))) == set()


@pytest.mark.unit
def test_the_matrix_is_what_the_exporter_knows():
    assert {v[:3] for v in etcd_server.VERSIONS} == set(answers.KNOWN_VERSIONS)


@pytest.mark.unit
def test_a_half_done_upgrade_names_each_version():
    # A 3.7 member among 3.6 ones keeps its data at 3.6 (the cluster version): as the real
    # one does below.
    on_36_data = sent("3.7", storageVersion="3.6.0")
    state = cluster(m0=sent("3.6"), m1=sent("3.6"), m2=on_36_data)
    assert about_versions(state) == {
        (
            "warning",
            "etcd main: a rolling upgrade is half done: 3.6.16 on m0, m1; 3.7.3 on m2; "
            "data at storage version 3.6.0 on m2",
        )
    }
    [advice] = [f.advice for f in advise(state) if "half done" in f.summary]
    assert "runs as its oldest member (3.6)" in advice


@pytest.mark.unit
def test_a_half_done_patch_upgrade_is_named_too():
    state = cluster(m0=sent("3.6", version="3.6.15"), m1=sent("3.6"), m2=sent("3.6"))
    assert about_versions(state) == {
        ("warning", "etcd main: a rolling upgrade is half done: 3.6.15 on m0; 3.6.16 on m1, m2")
    }
    [advice] = [f.advice for f in advise(state) if "half done" in f.summary]
    assert "without the newer release's fixes" in advice


@pytest.mark.unit
def test_data_left_at_an_older_storage_version_is_an_upgrade_not_done():
    state = cluster(m0=sent("3.7"), m1=sent("3.7", storageVersion="3.6.0"), m2=sent("3.7"))
    assert about_versions(state) == {
        (
            "warning",
            "etcd main: a rolling upgrade is half done: 3.7.3 on m0, m1, m2; "
            "data at storage version 3.6.0 on m1",
        )
    }


@pytest.mark.unit
def test_a_downgrade_enabled_is_named_with_its_target():
    enabled = {"enabled": True, "targetVersion": "3.6.0"}
    state = cluster(
        m0=sent("3.7", storageVersion="3.6.0", downgradeInfo=enabled),
        m1=sent("3.6", downgradeInfo=enabled),
    )
    assert about_versions(state) == {
        (
            "warning",
            "etcd main: a downgrade to 3.6.0 is under way: 3.6.16 on m1; 3.7.3 on m0; "
            "data at storage version 3.6.0 on m0",
        )
    }
    [advice] = [f.advice for f in advise(state) if "downgrade" in f.summary]
    assert "etcd 3.6 one at a time" in advice and "etcdctl downgrade cancel" in advice


@pytest.mark.unit
def test_a_storage_version_the_exporter_does_not_know_is_named():
    state = cluster(m0=sent("3.7", storageVersion="3.8.0"), m1=sent("3.7"))
    assert about_versions(state) == {
        ("info", "etcd main: a version this exporter does not know: storage version 3.8.0 on m0")
    }


@pytest.mark.unit
def test_an_etcd_version_the_exporter_does_not_know_is_named():
    state = cluster(m0=sent("3.7", version="3.8.0"), m1=sent("3.7", version="3.8.0"))
    assert about_versions(state) == {
        ("info", "etcd main: a version this exporter does not know: etcd 3.8.0 on m0, m1")
    }
    assert about_versions(cluster(m0=sent("3.7", version=None))) == {
        ("info", "etcd main: a version this exporter does not know: no etcd version on m0")
    }
    # Text that is no etcd version: shown with what a version has no use for (here a
    # terminal escape) as ?.
    assert about_versions(cluster(m0=sent("3.7", version="\x1b[2Jv3.7"))) == {
        ("info", "etcd main: a version this exporter does not know: etcd ??2Jv3.7 on m0")
    }


@pytest.mark.unit
def test_etcd_34_is_read_and_named_as_untested():
    """3.4 is no longer tested: its Status reads as before (3.5's fields less the 3.6
    ones), and `check` says the version is not one it knows, beside the half-done upgrade."""
    on_34 = sent("3.5.30", version="3.4.23")
    assert answers.status(on_34).db_size == int(on_34["dbSize"])
    assert about_versions(cluster(m0=on_34, m1=sent("3.5.30"))) == {
        ("warning", "etcd main: a rolling upgrade is half done: 3.4.23 on m0; 3.5.30 on m1"),
        ("info", "etcd main: a version this exporter does not know: etcd 3.4.23 on m0"),
    }


def downgrade(member, action: str) -> None:
    """etcdctl downgrade ACTION 3.6, through the member's gateway."""
    reply = member.session().post(
        member.client_url + "/v3/maintenance/downgrade",
        json={"action": action, "version": "3.6"},
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


def observed_once_on(collector, member: str, version: str, timeout: float = 30):
    """The first state in which `member` reports `version`: a restarted member answers its
    Status once it serves again, a scrape or two after it came back under load."""
    state = None

    def on_it():
        nonlocal state
        state = collector.observe()
        statuses = {m.name: m.status for m in state.clusters[0].members}
        return getattr(statuses.get(member), "version", None) == version

    wait_until(on_it, timeout, interval=0.2)
    return state


def versions_seen(collector) -> dict[str, str]:
    """kubescale_etcd_version_info of one scrape: {member: version}."""
    return {
        s.labels["member"]: s.labels["version"]
        for f in collector.families(collector.observe())
        if f.name == "kubescale_etcd_version_info"
        for s in f.samples
    }


def check_says(flags: list[str], capsys) -> tuple[int, str]:
    """`kube-scale-exporter check` on these etcd flags: (exit status, output)."""
    status = main(["check", "--mode", "cluster", "--collector.disable-defaults", *flags])
    return status, capsys.readouterr().out


def upgrade(member, version: str) -> None:
    """One step of a rolling upgrade: the member stopped and started on `version`'s
    binary, on the same data dir, and healthy again."""
    member.stop()
    member.version = version
    member.start()


@pytest.mark.integration
def test_a_rolling_upgrade_from_36_to_37_shows_until_its_end(
    etcd_factory, collector_factory, capsys
):
    members = etcd_factory.cluster(3, version="3.6")
    urls = ",".join(m.client_url for m in members)
    flags = ["--etcd.cluster", f"main={urls}", "--etcd.min-interval", "0.1"]
    collector = collector_factory(*flags)
    old = collector.observe().clusters[0].members[0].status.version
    assert old == builds.etcd_version("3.6").removeprefix("v")
    # A new cluster's data stays at storage version 3.5.0 until it has settled its cluster
    # version, a few seconds after its leader is elected (longer on a loaded machine).
    assert findings_settle_on(collector, set(), 30) == set()
    assert versions_seen(collector) == {"m0": old, "m1": old, "m2": old}
    # The upgrade's first step: m2 on etcd 3.7, its data kept at the cluster's 3.6.
    upgrade(members[2], "3.7")
    state = observed_once_on(collector, "m2", builds.etcd_version("3.7").removeprefix("v"))
    new = {m.name: m.status for m in state.clusters[0].members}["m2"]
    assert new.version == builds.etcd_version("3.7").removeprefix("v")
    assert new.storage_version == "3.6.0"
    half = (
        "etcd main: a rolling upgrade is half done: "
        f"{old} on m0, m1; {new.version} on m2; data at storage version 3.6.0 on m2"
    )
    assert about_versions(state) == {("warning", half)}
    assert versions_seen(collector) == {"m0": old, "m1": old, "m2": new.version}
    status, out = check_says(flags, capsys)
    assert status == 1 and f"WARNING  {half}" in out, out
    assert "runs as its oldest member (3.6)" in out
    # Two of three on 3.7: still half done, each member named on its version.
    upgrade(members[1], "3.7")
    assert about_versions(observed_once_on(collector, "m1", new.version)) == {
        (
            "warning",
            "etcd main: a rolling upgrade is half done: "
            f"{old} on m0; {new.version} on m1, m2; data at storage version 3.6.0 on m1, m2",
        )
    }
    # The last: the cluster version moves to 3.7, then every member's data with it.
    upgrade(members[0], "3.7")
    assert findings_settle_on(collector, set(), 30) == set()
    state = collector.observe()
    assert {m.status.storage_version for m in state.clusters[0].members} == {"3.7.0"}
    assert versions_seen(collector) == {"m0": new.version, "m1": new.version, "m2": new.version}
    status, out = check_says(flags, capsys)
    assert "half done" not in out and "version" not in out, out


@pytest.mark.integration
def test_a_downgrade_enabled_moves_the_data_back_and_cancelled_forward(
    etcd_factory, collector_factory
):
    etcd = etcd_factory(version="3.7")
    collector = collector_factory(
        "--etcd.cluster", f"main={etcd.client_url}", "--etcd.min-interval", "0.1"
    )
    version = collector.observe().clusters[0].members[0].status.version
    downgrade(etcd, "ENABLE")
    behind = {
        (
            "warning",
            f"etcd main: a downgrade to 3.6.0 is under way: {version} on default; "
            "data at storage version 3.6.0 on default",
        )
    }
    assert findings_settle_on(collector, behind, 30) == behind
    assert collector.observe().clusters[0].members[0].status.downgrade_target == "3.6.0"
    [advice] = [f.advice for f in advise(collector.observe()) if "downgrade" in f.summary]
    assert "etcd 3.6 one at a time" in advice and "etcdctl downgrade cancel" in advice
    downgrade(etcd, "CANCEL")
    assert findings_settle_on(collector, set(), 30) == set()
    assert collector.observe().clusters[0].members[0].status.downgrade_target is None
