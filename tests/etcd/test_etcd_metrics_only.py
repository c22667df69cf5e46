"""--etcd.local without a key (the default, --etcd.local-access=metrics), on real members
of every etcd version: the member's /metrics stands in for Status, its writes refused stand
in for the alarm list, and nothing else is asked of etcd."""

import base64
import time

import pytest

from testbed.etcd_server import make_tls
from testbed.faultproxy import FaultProxy
from tests.etcd.conftest import samples, value
from tests.etcd.test_etcd_collector import settle

pytestmark = pytest.mark.integration

QUOTA = 16 * 1024 * 1024
STATUS_SERIES = (
    "kubescale_etcd_db_size_bytes",
    "kubescale_etcd_db_size_in_use_bytes",
    "kubescale_etcd_quota_bytes",
    "kubescale_etcd_is_leader",
    "kubescale_etcd_raft_applied_index",
)
NEEDS_A_KEY = ("kubescale_etcd_alarm_active", "kubescale_etcd_raft_term", "kubescale_etcd_keys")


def gateway(member, path, body):
    reply = member.session().post(member.client_url + path, json=body, timeout=10)
    return reply.json()


def put(member, key, value):
    body = {"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()}
    return gateway(member, "/v3/kv/put", body)


def status(member):
    """Maintenance.Status over the gateway, as the full access reads it."""
    doc = gateway(member, "/v3/maintenance/status", {})
    return {
        "id": format(int(doc["header"]["member_id"]), "x"),
        "leader": doc["leader"] == doc["header"]["member_id"],
        "size": int(doc["dbSize"]),
        "in_use": int(doc["dbSizeInUse"]),
        "applied": int(doc["raftAppliedIndex"]),
    }


def keyless(collector_factory, url, *flags):
    return collector_factory("--etcd.local", f"main={url}", *flags, mode="node", start=True)


def test_the_page_gives_what_status_gives_and_nothing_that_needs_a_key(
    version, etcd_factory, collector_factory
):
    etcd = etcd_factory(version=version, quota_bytes=QUOTA, metrics_port=True)
    for i in range(20):
        put(etcd, f"/registry/pods/ns/p{i}".encode(), b"x" * 2048)
    settle(etcd.session(), etcd.client_url)
    collector = keyless(collector_factory, etcd.metrics_url)
    found = samples(collector)
    truth = status(etcd)
    member = {"etcd_cluster": "main", "member": truth["id"]}
    assert value(found, "kubescale_etcd_member_up", **member) == 1
    assert value(found, "kubescale_etcd_db_size_bytes", **member) == truth["size"]
    assert value(found, "kubescale_etcd_db_size_in_use_bytes", **member) == truth["in_use"]
    assert value(found, "kubescale_etcd_quota_bytes", **member) == QUOTA
    assert value(found, "kubescale_etcd_quota_info", source="metrics", **member) == 1
    assert value(found, "kubescale_etcd_is_leader", **member) == 1
    assert value(found, "kubescale_etcd_raft_applied_index", **member) == truth["applied"] > 20
    assert value(found, "kubescale_etcd_writes_refused_total", **member) == 0
    assert value(found, "kubescale_etcd_member_metrics_up", **member) == 1
    assert not [k for k in found if k[0].startswith(NEEDS_A_KEY)]
    # One page a refresh and nothing else: no Status, member list, alarm list or key count.
    assert collector.clusters[0].requests_sent() == 1
    assert collector._thread is None


def test_a_kubeadm_member_is_read_without_its_certificates(
    tmp_path, etcd_factory, collector_factory
):
    """kubeadm's layout: client port with TLS and client-certificate auth, metrics on a plain
    listener. The key-less pod reads the latter with no TLS file at all."""
    tls = make_tls(tmp_path / "pki")
    etcd = etcd_factory(version="3.5.30", tls=tls, metrics_port=True)
    collector = keyless(collector_factory, etcd.metrics_url)
    assert collector.tls.cert is None and collector.tls.key is None
    found = samples(collector)
    [(name, labels)] = [k for k in found if k[0] == "kubescale_etcd_member_up"]
    assert found[(name, labels)] == 1
    assert dict(labels)["member"] == status(etcd)["id"]


def test_nospace_shows_as_writes_refused_and_the_size_at_the_quota(
    version, etcd_factory, collector_factory
):
    etcd = etcd_factory(version=version, quota_bytes=QUOTA, metrics_port=True)
    collector = keyless(collector_factory, etcd.metrics_url, "--etcd.min-interval", "0.01")
    member = {"etcd_cluster": "main", "member": status(etcd)["id"]}
    big = b"x" * (512 * 1024)
    for _ in range(80):
        if "space exceeded" in str(put(etcd, b"/registry/events/ns/e", big)):
            break
    else:
        pytest.fail("etcd never refused a write")
    # The alarm is raised: every write is refused now, small ones too.
    for i in range(3):
        assert "space exceeded" in str(put(etcd, f"/registry/leases/l{i}".encode(), b"x"))
    found = samples(collector)
    assert value(found, "kubescale_etcd_writes_refused_total", **member) == 4
    size = value(found, "kubescale_etcd_db_size_bytes", **member)
    assert size >= 0.9 * QUOTA, size
    advice = {f.summary for f in collector.advise(collector.observe())}
    assert f"etcd main member {member['member']}: refused 4 writes since it started" in advice
    # etcd's recovery: compact, defragment, disarm. No more refusals once it is done.
    head = gateway(etcd, "/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
    gateway(etcd, "/v3/kv/compaction", {"revision": head["header"]["revision"], "physical": True})
    gateway(etcd, "/v3/maintenance/defragment", {})
    for alarm in gateway(etcd, "/v3/maintenance/alarm", {"action": "GET"}).get("alarms", []):
        gateway(etcd, "/v3/maintenance/alarm", {"action": "DEACTIVATE", **alarm})
    assert "header" in put(etcd, b"/registry/leases/after", b"x")
    found = samples(collector)
    assert value(found, "kubescale_etcd_writes_refused_total", **member) == 4
    assert value(found, "kubescale_etcd_db_size_bytes", **member) < 0.5 * QUOTA


def test_only_the_leader_says_so_in_a_three_member_cluster(etcd_factory, collector_factory):
    members = etcd_factory.cluster(3, version="3.5.30", metrics_ports=True)
    leaders = {}
    for m in members:
        found = samples(keyless(collector_factory, m.metrics_url))
        [(labels, is_leader)] = [
            (dict(k[1]), v) for k, v in found.items() if k[0] == "kubescale_etcd_is_leader"
        ]
        assert labels["member"] == status(m)["id"]
        leaders[m.name] = is_leader
    assert sorted(leaders.values()) == [0, 0, 1]
    assert leaders[next(m.name for m in members if status(m)["leader"])] == 1


def test_a_page_that_fails_fails_the_collector_then_recovers(etcd_factory, collector_factory):
    etcd = etcd_factory(version="3.5", metrics_port=True)
    proxy = FaultProxy(upstream=etcd.metrics_url).start()
    try:
        collector = keyless(
            collector_factory, proxy.url, "--etcd.min-interval", "0.01", "--etcd.timeout", "1"
        )
        member = {"etcd_cluster": "main", "member": status(etcd)["id"]}
        assert value(samples(collector), "kubescale_etcd_member_up", **member) == 1
        # A page that is not etcd's (a proxy's error page, say) is the member down, named.
        proxy.inject(r"^/metrics", status=200, body=b"# nothing here\nup 1\n")
        time.sleep(0.05)  # past --etcd.min-interval
        with pytest.raises(Exception, match="no etcd_mvcc_db_total_size_in_bytes sample"):
            collector.observe()
        proxy.clear()
        proxy.inject(r"^/metrics", hang=True)
        time.sleep(0.05)
        began = time.monotonic()
        with pytest.raises(Exception, match="within 1s"):
            collector.observe()
        assert time.monotonic() - began < 2.5
        proxy.clear()
        time.sleep(0.05)
        assert value(samples(collector), "kubescale_etcd_member_up", **member) == 1
    finally:
        proxy.stop()
