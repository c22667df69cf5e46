"""The rules against the real exporter: Debian's Prometheus loads the generated rules and
scrapes kube-scale-exporter in node and cluster mode (and a real etcd filled past its quota),
every second. The recording rules must see the series the exporter really serves.

Checks follow the collectors present in this checkout: a collector's checks run once its
golden exposition (tests/golden/NAME.prom) exists, and then a missing collector fails them.
"""
import json
import socket
import time

import pytest
import requests

import exporter.collectors  # noqa: F401  (registers the collectors)
from exporter.registry import registered
from tests.helpers.etcd_server import EtcdServer
from tests.helpers.ports import free_port
from tests.helpers.procs import Proc, wait_for_port
from tests.mixin.support import REPO, binary, load_demo

demo = load_demo()
COLLECTORS = set(registered())


def landed(name):
    """Skip a collector's checks until its golden file exists; fail if it then is missing."""
    if not (REPO / "tests" / "golden" / f"{name}.prom").exists():
        pytest.skip(f"the {name} collector has not landed (no tests/golden/{name}.prom)")
    assert name in COLLECTORS, f"tests/golden/{name}.prom exists but no {name} collector is registered"


def running_collectors():
    """Collectors the live stack runs: node mode's defaults, and etcd in cluster mode."""
    node = {name for name, cls in registered().items() if cls.default_enabled and "node" in cls.modes}
    return node | (COLLECTORS & {"etcd"})


class Live:
    def __init__(self, prom_url, etcd_url):
        self.prom = demo.Prometheus(prom_url)
        self.etcd_url = etcd_url

    def values(self, expr):
        """{frozenset(labels): value} of an instant query."""
        return {frozenset(r["metric"].items()): float(r["value"][1]) for r in self.prom.query(expr)}

    def wait_for(self, expr, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.values(expr)
            if found:
                return found
            time.sleep(0.5)
        pytest.fail(f"no result for {expr} after {timeout}s")


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("live")
    procs = []
    try:
        node_port, cluster_port, prom_port = free_port(), free_port(), free_port()
        procs.append(demo.exporter(["--mode", "node"], node_port, workdir, "exporter-node"))
        cluster_args = ["--mode", "cluster"]
        etcd_url = None
        if "etcd" in COLLECTORS:
            etcd_server = EtcdServer(workdir, version="3.4", name="etcd-0", quota_bytes=demo.QUOTA).start()
            procs.append(etcd_server)
            etcd_url = etcd_server.client_url
            etcd = demo.Etcd(etcd_url)
            while etcd.put_object():
                pass
            cluster_args += ["--etcd.cluster", f"main={etcd_url}", "--etcd.min-interval", "1",
                             "--etcd.keys-interval", "1"]
        procs.append(demo.exporter(cluster_args, cluster_port, workdir, "exporter-cluster"))
        config = workdir / "prometheus.yml"
        config.write_text(json.dumps(demo.prometheus_config(node_port, cluster_port, prom_port, interval="1s")))
        prom = Proc([binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
                     f"--web.listen-address=127.0.0.1:{prom_port}"], workdir / "prometheus.log")
        procs.append(prom)
        wait_for_port(prom_port, proc=prom, timeout=60)
        result = Live(f"http://127.0.0.1:{prom_port}", etcd_url)
        result.prom.wait_ready(prom)
        yield result
    finally:
        for proc in reversed(procs):
            proc.stop()


def test_exporter_health_rules_see_both_jobs(live):
    up = live.wait_for("cluster_job:kubescale_exporter_up:avg")
    assert {dict(k)["job"]: v for k, v in up.items()} == {demo.NODE_JOB: 1.0, demo.CLUSTER_JOB: 1.0}
    versions = live.wait_for("cluster_job_version:kubescale_build_info:count")
    assert {dict(k)["job"] for k in versions} == {demo.NODE_JOB, demo.CLUSTER_JOB}
    samples = live.wait_for("cluster_job:kubescale_exporter_samples_scraped:max")
    budgets = {demo.NODE_JOB: 40, demo.CLUSTER_JOB: 500}
    for labels, value in samples.items():
        assert 0 < value <= budgets[dict(labels)["job"]]


def test_collector_failures_rule_sees_every_running_collector(live):
    expected = running_collectors()
    if not expected:
        pytest.skip("no collector has landed in this checkout")
    failures = live.wait_for("cluster_job_collector:kubescale_scrape_collector_failures:sum")
    assert {dict(k)["collector"]: v for k, v in failures.items()} == dict.fromkeys(expected, 0.0)


def test_neighbor_rules_follow_the_kernel(live):
    landed("neighbor")
    usage = live.wait_for("node_family:kubescale_neighbor_usage:ratio")
    assert {dict(k)["family"] for k in usage} == {"ipv4", "ipv6"}
    assert {dict(k)["node"] for k in usage} == {socket.gethostname()}
    assert all(0 <= v < 1 for v in usage.values())
    at_default = live.wait_for("cluster_family:kubescale_neighbor_nodes_at_kernel_default:sum")
    for labels, value in at_default.items():
        family = dict(labels)["family"]
        with open(f"/proc/sys/net/{family}/neigh/default/gc_thresh3") as f:
            assert value == float(int(f.read()) <= 1024), family


def test_etcd_rules_and_alert_see_a_real_nospace(live):
    landed("etcd")
    quota = live.wait_for("etcd_cluster_member:kubescale_etcd_quota_bytes:max")
    assert list(quota.values()) == [float(demo.QUOTA)]
    usage = live.wait_for("etcd_cluster_member:kubescale_etcd_quota_usage:ratio")
    assert list(usage.values())[0] >= 0.95
    alarms = live.wait_for('etcd_cluster_member_alarm:kubescale_etcd_alarm_active:max{alarm="NOSPACE"}')
    assert list(alarms.values()) == [1.0]
    # Three events for every two pods were written.
    share = live.wait_for("etcd_cluster:kubescale_etcd_events_keys:ratio")
    assert list(share.values())[0] == pytest.approx(0.6, abs=0.02)
    alert = live.wait_for('ALERTS{alertname="KubeScaleEtcdAlarmActive"}')
    assert {dict(k)["alarm"] for k in alert} == {"NOSPACE"}
