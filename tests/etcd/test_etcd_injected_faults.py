"""Faults etcd will not make on demand, injected by testbed/faultproxy.py in front of it.

--etcd.local sends every request to the one configured URL (no discovery), so all of
them pass through the proxy.
"""

import json
import time

import pytest

from tests.etcd.conftest import samples, value
from testbed.etcd_server import put_many
from testbed.faultproxy import FaultProxy
from testbed.metrics import collect

pytestmark = pytest.mark.integration

MEMBER = {"etcd_cluster": "main", "member": "default"}


@pytest.fixture
def proxied(etcd_factory):
    etcd = etcd_factory(version="3.5")
    proxy = FaultProxy(upstream=etcd.client_url).start()
    yield etcd, proxy
    proxy.stop()


def test_quota_falls_back_to_the_flag_when_metrics_fail_then_returns(proxied, collector_factory):
    _, proxy = proxied
    proxy.inject(r"^/metrics", status=500)
    collector = collector_factory(
        "--etcd.local",
        f"main={proxy.url}",
        "--etcd.local-access=full",
        "--etcd.quota-bytes",
        "1Gi",
        "--etcd.min-interval",
        "0.1",
        "--etcd.keys-interval",
        "0.5",
        mode="node",
    )
    found = samples(collector)
    assert value(found, "kubescale_etcd_quota_bytes", **MEMBER) == 1024**3
    assert value(found, "kubescale_etcd_quota_info", source="flag", **MEMBER) == 1
    assert proxy.count(r"^/metrics", 500) == 1
    # Only the page's part failed: Status series stay, the performance series go.
    assert value(found, "kubescale_etcd_member_metrics_up", **MEMBER) == 0
    assert value(found, "kubescale_etcd_member_up", **MEMBER) == 1
    proxy.clear()
    collect(collector)
    assert proxy.count(r"^/metrics") == 1  # cached until --etcd.min-interval, like Status
    time.sleep(0.15)
    # The page is read once per refresh (it also carries the performance samples).
    found = samples(collector)
    assert proxy.count(r"^/metrics") == 2
    assert value(found, "kubescale_etcd_quota_bytes", **MEMBER) == 2 * 1024**3  # etcd's default
    assert value(found, "kubescale_etcd_quota_info", source="metrics", **MEMBER) == 1
    assert value(found, "kubescale_etcd_member_metrics_up", **MEMBER) == 1


def test_status_error_marks_the_member_down_with_etcds_answer(proxied, collector_factory):
    _, proxy = proxied
    proxy.inject(
        r"^/v3/maintenance/status", status=503, body=b'{"message":"etcdserver: leader changed"}'
    )
    collector = collector_factory(
        "--etcd.local",
        f"main={proxy.url}",
        "--etcd.local-access=full",
        "--etcd.min-interval",
        "0.1",
        mode="node",
    )
    with pytest.raises(Exception, match="HTTP 503: etcdserver: leader changed"):
        collect(collector)
    proxy.clear()
    time.sleep(0.15)
    assert value(samples(collector), "kubescale_etcd_member_up", **MEMBER) == 1


def test_hung_alarm_list_costs_one_timeout_and_only_the_alarm_series(proxied, collector_factory):
    _, proxy = proxied
    proxy.inject(r"^/v3/maintenance/alarm", hang=True)
    collector = collector_factory(
        "--etcd.local",
        f"main={proxy.url}",
        "--etcd.local-access=full",
        "--etcd.timeout",
        "0.5",
        mode="node",
    )
    began = time.monotonic()
    found = samples(collector)
    assert time.monotonic() - began < 1.2
    assert value(found, "kubescale_etcd_db_size_bytes", **MEMBER) > 0
    assert not [k for k in found if k[0] == "kubescale_etcd_alarm_active"]


def test_failed_key_count_keeps_the_last_counts(proxied, collector_factory):
    etcd, proxy = proxied
    put_many(etcd.session(), etcd.client_url, ((f"/registry/pods/ns/p{i}", "x") for i in range(12)))
    collector = collector_factory(
        "--etcd.local", f"main={proxy.url}", "--etcd.local-access=full", mode="node"
    )
    collector.count_keys()
    first = samples(collector)
    proxy.inject(r"^/v3/kv/range", status=429, body=b'{"message":"etcdserver: too many requests"}')
    put_many(etcd.session(), etcd.client_url, ((f"/registry/pods/ns/q{i}", "x") for i in range(5)))
    collector.count_keys()
    found = samples(collector)
    assert value(found, "kubescale_etcd_keys", etcd_cluster="main", resource="pods") == 12
    stamp = {"name": "kubescale_etcd_keys_refresh_timestamp_seconds", "etcd_cluster": "main"}
    assert value(found, stamp.pop("name"), **stamp) == value(
        first, "kubescale_etcd_keys_refresh_timestamp_seconds", etcd_cluster="main"
    )
    proxy.clear()
    collector.count_keys()
    assert (
        value(samples(collector), "kubescale_etcd_keys", etcd_cluster="main", resource="pods") == 17
    )


def test_corrupt_alarm_is_reported_and_not_to_be_disarmed(proxied, collector_factory):
    etcd, proxy = proxied
    member_id = (
        etcd.session()
        .post(etcd.client_url + "/v3/maintenance/status", json={})
        .json()["header"]["member_id"]
    )
    # etcd raises CORRUPT only after a failed hash check between members; answer for it.
    body = json.dumps({"alarms": [{"memberID": member_id, "alarm": "CORRUPT"}]}).encode()
    proxy.inject(
        r"^/v3/maintenance/alarm",
        status=200,
        headers={"Content-Type": "application/json"},
        body=body,
    )
    collector = collector_factory(
        "--etcd.local", f"main={proxy.url}", "--etcd.local-access=full", mode="node"
    )
    found = samples(collector)
    assert value(found, "kubescale_etcd_alarm_active", alarm="CORRUPT", **MEMBER) == 1
    assert value(found, "kubescale_etcd_alarm_active", alarm="NOSPACE", **MEMBER) == 0
    advice = [f for f in collector.advise(collector.observe()) if "alarm CORRUPT" in f.summary]
    assert advice and advice[0].severity == "critical" and "Do not disarm" in advice[0].advice
