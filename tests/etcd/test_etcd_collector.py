"""The etcd collector against real etcd of every version the tests run (conftest.version)."""

import os
import subprocess
import time

import pytest

from tests.etcd.conftest import quota_source, samples, storage_version, value
from testbed.etcd_server import etcd_metric, etcdctl_binary, put_many
from testbed.metrics import collect
from kube_scale_exporter.etcd.cluster import client_url
from kube_scale_exporter.etcd.answers import Member
import base64

MiB = 1024 * 1024


@pytest.mark.integration
def test_sizes_and_quota_match_etcds_own_metrics(etcd_factory, collector_factory, version):
    etcd = etcd_factory(version=version, quota_bytes=64 * MiB)
    session = etcd.session()
    put_many(
        session, etcd.client_url, ((f"/registry/pods/ns/p{i}", "x" * 2000) for i in range(3000))
    )
    settle(session, etcd.client_url)
    collector = collector_factory("--etcd.cluster", f"main={etcd.client_url}")

    found = samples(collector)
    member = {"etcd_cluster": "main", "member": "default"}
    assert value(found, "kubescale_etcd_db_size_bytes", **member) == etcd_metric(
        session, etcd.client_url, "etcd_mvcc_db_total_size_in_bytes"
    )
    assert value(found, "kubescale_etcd_db_size_in_use_bytes", **member) == etcd_metric(
        session, etcd.client_url, "etcd_mvcc_db_total_size_in_use_in_bytes"
    )
    assert value(found, "kubescale_etcd_db_size_bytes", **member) > 6 * MiB  # the writes landed
    assert (
        value(found, "kubescale_etcd_quota_bytes", **member)
        == 64 * MiB
        == etcd_metric(session, etcd.client_url, "etcd_server_quota_backend_bytes")
    )
    assert value(found, "kubescale_etcd_quota_info", source=quota_source(version), **member) == 1
    assert value(found, "kubescale_etcd_is_leader", **member) == 1
    assert value(found, "kubescale_etcd_raft_applied_index", **member) >= 3000 / 128
    assert value(found, "kubescale_etcd_alarm_active", alarm="NOSPACE", **member) == 0
    assert value(found, "kubescale_etcd_up", etcd_cluster="main") == 1
    # Its version as its /metrics tells it, its data's storage version (3.6 moved it to
    # 3.6.0 as soon as the cluster version was set, long before the writes above ended),
    # and nothing in `check` about either.
    state = collector.observe()
    status = state.clusters[0].members[0].status
    assert status.version == server_version(session, etcd.client_url)
    assert status.version.startswith(version) and status.new_fields == ()
    assert status.storage_version == storage_version(version)
    assert not [f for f in collector.advise(state) if "version" in f.summary]


def server_version(session, url) -> str:
    """etcd_server_version's label on the member's /metrics page."""
    for line in session.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("etcd_server_version{"):
            return line.split('"')[1]
    raise KeyError("etcd_server_version")


def settle(session, url):
    """Wait until etcd's backend has committed: sizes change for ~100 ms after writes."""
    seen = None
    for _ in range(50):
        now = [
            etcd_metric(session, url, n)
            for n in ("etcd_mvcc_db_total_size_in_bytes", "etcd_mvcc_db_total_size_in_use_in_bytes")
        ]
        if now == seen:
            return
        seen = now
        time.sleep(0.2)
    raise AssertionError("etcd's database size kept changing")


@pytest.mark.integration
def test_status_is_cached_for_min_interval(etcd_factory, collector_factory):
    etcd = etcd_factory()
    collector = collector_factory(
        "--etcd.cluster", f"main={etcd.client_url}", "--etcd.min-interval", "1"
    )
    cluster = collector.clusters[0]
    collect(collector)
    one_refresh = cluster.requests_sent()
    # member list, alarm list, Status, /metrics (quota, disk latency and read load at once)
    assert one_refresh == 4
    for _ in range(20):
        collect(collector)
    assert cluster.requests_sent() == one_refresh
    time.sleep(1.05)
    collect(collector)
    assert cluster.requests_sent() == 2 * one_refresh


def fill_until_nospace(session, url):
    value = "v" * (512 * 1024)
    for i in range(200):
        reply = session.post(url + "/v3/kv/put", json={"key": "L2JpZw==", "value": _b64(value)})
        if "database space exceeded" in reply.text:
            return i
    raise AssertionError("etcd never raised NOSPACE")


def _b64(text):

    return base64.b64encode(text.encode()).decode()


def etcdctl(url, *args):
    out = subprocess.run(
        [etcdctl_binary(), f"--endpoints={url}", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return out.stdout


@pytest.mark.integration
def test_nospace_alarm_then_compact_defrag_disarm_clears_it(
    etcd_factory, collector_factory, version
):
    etcd = etcd_factory(version=version, quota_bytes=16 * MiB)
    session = etcd.session()
    collector = collector_factory(
        "--etcd.cluster", f"main={etcd.client_url}", "--etcd.min-interval", "0.1"
    )
    member = {"etcd_cluster": "main", "member": "default"}
    assert value(samples(collector), "kubescale_etcd_alarm_active", alarm="NOSPACE", **member) == 0

    fill_until_nospace(session, etcd.client_url)
    time.sleep(0.1)
    found = samples(collector)
    assert value(found, "kubescale_etcd_alarm_active", alarm="NOSPACE", **member) == 1
    assert value(found, "kubescale_etcd_alarm_active", alarm="CORRUPT", **member) == 0
    full = value(found, "kubescale_etcd_db_size_bytes", **member)
    # etcd refuses the put that would cross the quota, so the file stops just short of it.
    assert (
        full > 0.9 * 16 * MiB and value(found, "kubescale_etcd_quota_bytes", **member) == 16 * MiB
    )
    alarm = [f for f in collector.advise(collector.observe()) if "alarm NOSPACE" in f.summary]
    assert alarm and alarm[0].severity == "critical"

    # Run the finding's advice as printed, with the real etcdctl.
    env = dict(os.environ, PATH=os.path.dirname(etcdctl_binary()) + ":" + os.environ["PATH"])
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", alarm[0].advice],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    settle(session, etcd.client_url)
    found = samples(collector)
    assert value(found, "kubescale_etcd_alarm_active", alarm="NOSPACE", **member) == 0
    after = value(found, "kubescale_etcd_db_size_bytes", **member)
    assert after < full / 4
    assert after == etcd_metric(session, etcd.client_url, "etcd_mvcc_db_total_size_in_bytes")
    assert not [f for f in collector.advise(collector.observe()) if f.severity == "critical"]
    reply = session.post(
        etcd.client_url + "/v3/kv/put", json={"key": _b64("/k"), "value": _b64("v")}
    )
    assert reply.ok, reply.text  # writes are accepted again


@pytest.mark.integration
def test_fragmentation_worth_a_defrag_is_reported(etcd_factory, collector_factory):
    etcd = etcd_factory(version="3.5", quota_bytes=32 * MiB)
    session = etcd.session()
    put_many(
        session,
        etcd.client_url,
        ((f"/registry/configmaps/ns/c{i}", "x" * 4000) for i in range(3000)),
    )
    session.post(
        etcd.client_url + "/v3/kv/deleterange",
        json={"key": _b64("/registry/"), "range_end": _b64("/registry0")},
    ).raise_for_status()
    revision = (
        etcdctl(etcd.client_url, "endpoint", "status", "--write-out=json")
        .split('"revision":')[1]
        .split(",")[0]
    )
    etcdctl(etcd.client_url, "compaction", "--physical", revision)
    collector = collector_factory("--etcd.cluster", f"main={etcd.client_url}")
    found = samples(collector)
    member = {"etcd_cluster": "main", "member": "default"}
    size = value(found, "kubescale_etcd_db_size_bytes", **member)
    in_use = value(found, "kubescale_etcd_db_size_in_use_bytes", **member)
    assert size - in_use > 8 * MiB
    defrag = [f for f in collector.advise(collector.observe()) if "defragment returns" in f.summary]
    assert defrag and "etcdctl" in defrag[0].advice and "defrag" in defrag[0].advice


@pytest.mark.integration
def test_three_members_each_asked_at_its_own_url_and_exactly_one_leader(
    etcd_factory, collector_factory, version
):
    members = etcd_factory.cluster(3, version=version)
    collector = collector_factory(
        "--etcd.cluster", f"main={members[1].client_url}", "--etcd.min-interval", "0.1"
    )
    found = samples(collector)
    names = [m.name for m in members]
    leaders = [
        n for n in names if value(found, "kubescale_etcd_is_leader", etcd_cluster="main", member=n)
    ]
    assert len(leaders) == 1
    for m in members:
        labels = {"etcd_cluster": "main", "member": m.name}
        assert value(found, "kubescale_etcd_member_up", **labels) == 1
        assert value(found, "kubescale_etcd_db_size_bytes", **labels) == etcd_metric(
            m.session(), m.client_url, "etcd_mvcc_db_total_size_in_bytes"
        )
        assert value(found, "kubescale_etcd_raft_term", **labels) >= 2
        assert collector.clusters[0].client(m.client_url).requests_sent >= 1
    assert len([k for k in found if k[0] == "kubescale_etcd_db_size_bytes"]) == 3

    # One member down: the others still report, it shows member_up 0.
    members[2].stop()
    time.sleep(0.2)
    found = samples(collector)
    assert value(found, "kubescale_etcd_member_up", etcd_cluster="main", member="m2") == 0
    assert value(found, "kubescale_etcd_member_up", etcd_cluster="main", member="m0") == 1
    assert (
        "kubescale_etcd_db_size_bytes",
        frozenset({"etcd_cluster": "main", "member": "m2"}.items()),
    ) not in found


@pytest.mark.integration
def test_local_mode_reports_only_its_member_and_counts_keys_only_beside_the_leader(
    etcd_factory, collector_factory
):
    members = etcd_factory.cluster(3, version="3.5")
    put_many(
        members[0].session(),
        members[0].client_url,
        ((f"/registry/pods/ns/p{i}", "x") for i in range(10)),
    )
    per_member = {}
    for m in members:
        collector = collector_factory(
            "--etcd.local", f"main={m.client_url}", "--etcd.local-access=full", mode="node"
        )
        collector.count_keys()
        per_member[m.name] = samples(collector)
    for name, found in per_member.items():
        sizes = [k for k in found if k[0] == "kubescale_etcd_db_size_bytes"]
        assert sizes == [
            (
                "kubescale_etcd_db_size_bytes",
                frozenset({"etcd_cluster": "main", "member": name}.items()),
            )
        ]
    counted = [
        name
        for name, found in per_member.items()
        if ("kubescale_etcd_keys", frozenset({"etcd_cluster": "main", "resource": "pods"}.items()))
        in found
    ]
    leader = [
        name
        for name, found in per_member.items()
        if value(found, "kubescale_etcd_is_leader", etcd_cluster="main", member=name)
    ]
    assert counted == leader and len(leader) == 1
    assert (
        value(per_member[leader[0]], "kubescale_etcd_keys", etcd_cluster="main", resource="pods")
        == 10
    )


@pytest.mark.unit
def test_member_url_skips_unix_sockets():

    assert (
        client_url(Member("1", "m0", ("unix://localhost:2379", "https://10.0.0.1:2379")))
        == "https://10.0.0.1:2379"
    )
    assert client_url(Member("1", "", ())) is None
    assert Member("255", "", ()).label == "ff"
