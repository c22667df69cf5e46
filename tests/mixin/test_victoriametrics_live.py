"""The mixin past one Prometheus, live: two clusters' exporters scraped by hashmod-sharded
Prometheus servers (the newest release, 3.16: the rules on each release are test_live's and
test_promtool's business) that remote-write into one VictoriaMetrics single-node, the committed
rules/ evaluated there by vmalert, the dashboards' queries run there.

The two clusters ("east", "west": real exporters and etcds, tests/mixin/sharded.py) each run
two Prometheus shards with external_labels {cluster: NAME}: node targets split by hashmod of
their address, the cluster-mode job kept whole on shard 0 (its rules compare its series with
each other). Nothing may merge the two clusters: every recording rule, alert and dashboard
query keeps them apart, and counts that differ between them (node targets: 3 in east, 2 in
west) say so.
"""

from __future__ import annotations

import pytest
import yaml

from testbed.prometheus import NEWEST, PrometheusServer
from testbed.victoriametrics import VictoriaMetrics, Vmalert
from tests.mixin.sharded import (
    NODES,
    RULE_FILES,
    SHARDS,
    by_cluster,
    check_dashboard_queries,
    shard_config,
    start_clusters,
)
from tests.mixin.support import (
    prometheus_binary,
    victoria_metrics_binary,
    victoria_metrics_version,
)
from tests.mixin.test_live import Live, every_second
from tools import demo

pytestmark = pytest.mark.integration


class Store(Live):
    """test_live's queries and waits, on VictoriaMetrics (it answers the same API)."""

    def __init__(self, vm, vmalert, shards):
        self.prom = self.vm = vm
        self.vmalert = vmalert
        self.shards = shards  # {(cluster, shard): PrometheusServer}

    def series(self, expr) -> list[dict]:
        return [r["metric"] for r in self.vm.query(expr)]

    def wait_for(self, expr, until=bool, timeout=90):
        """As Live's, longer: samples pass a remote-write queue, then vmalert's."""
        return super().wait_for(expr, until, timeout)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("victoriametrics")
    prometheus = prometheus_binary(NEWEST, "prometheus")
    procs = []
    try:
        vm = VictoriaMetrics(workdir, victoria_metrics_binary("victoria-metrics")).start()
        procs.append(vm)
        shards = {}
        for cluster in start_clusters(workdir, procs):
            for shard in range(SHARDS):
                shard_dir = workdir / f"prometheus-{cluster.name}-{shard}"
                shard_dir.mkdir()
                prom = PrometheusServer(shard_dir, {}, binary=prometheus)
                prom.config = shard_config(cluster, shard, prom.port, vm.remote_write_url)
                procs.append(prom)
                shards[cluster.name, shard] = prom.start()
        rule_files = [str(p) for p in every_second(workdir, RULE_FILES)]
        vmalert = Vmalert(workdir, victoria_metrics_binary("vmalert"), vm.url, rule_files).start()
        procs.append(vmalert)
        yield Store(vm, vmalert, shards)
    finally:
        for proc in reversed(procs):
            proc.stop()


def test_the_victoria_metrics_release_that_ran(store, record_property):
    version = victoria_metrics_version()
    record_property("victoria_metrics_version", version)
    print(f"VictoriaMetrics single-node and vmalert {version}")
    assert store.vm.session.get(store.vm.url + "/health", timeout=5).text.strip() == "OK"


def test_every_node_target_is_scraped_by_exactly_one_shard(store):
    """hashmod splits the node targets; the cluster-mode job is whole on shard 0."""
    store.wait_for(
        f'count by (cluster) (up{{job="{demo.NODE_JOB}"}} == 1)',
        lambda f: by_cluster(f) == {(c,): float(n) for c, n in NODES.items()},
    )
    for cluster, nodes in NODES.items():
        scraped = []
        for shard in range(SHARDS):
            prom = store.shards[cluster, shard]
            scraped += [r["metric"]["instance"] for r in prom.query(f'up{{job="{demo.NODE_JOB}"}}')]
            cluster_job = prom.query(f'up{{job="{demo.CLUSTER_JOB}"}}')
            assert len(cluster_job) == (1 if shard == 0 else 0), (cluster, shard)
        assert len(scraped) == len(set(scraped)) == nodes, (cluster, scraped)


def _recorded(store) -> dict[str, list[dict]]:
    names = [
        r["record"]
        for f in RULE_FILES
        for g in yaml.safe_load(f.read_text())["groups"]
        for r in g["rules"]
        if "record" in r
    ]
    return {name: store.series(name) for name in names}


def test_recording_rules_keep_the_clusters_apart(store):
    store.wait_for(
        "cluster_job:kubescale_exporter_targets:count",
        lambda f: (
            by_cluster(f, "job")
            == {
                **{(c, demo.NODE_JOB): float(n) for c, n in NODES.items()},
                **{(c, demo.CLUSTER_JOB): 1.0 for c in NODES},
            }
        ),
    )
    store.wait_for(
        "cluster_job:kubescale_exporter_up:avg",
        lambda f: set(f.values()) == {1.0} and len(f) == 2 * len(NODES),
    )
    usage = store.wait_for(
        "etcd_cluster_member:kubescale_etcd_quota_usage:ratio",
        lambda f: len(f) == 2 and by_cluster(f).get(("east",), 0) >= 0.95,
    )
    assert by_cluster(usage)["west",] < 0.5
    store.vmalert.wait_for_evaluations(2)
    recorded = _recorded(store)
    assert sum(map(len, recorded.values())) > 0
    both = set()
    for name, series in recorded.items():
        assert {s.get("cluster") for s in series} <= set(NODES), f"{name}: {series}"
        # West is east with a node fewer and no alarm: what a rule records for west it records
        # for east under the same labels (the instance aside: each cluster's own addresses).
        shapes = {
            c: {
                frozenset((k, v) for k, v in s.items() if k not in ("cluster", "instance"))
                for s in series
                if s["cluster"] == c
            }
            for c in NODES
        }
        assert shapes["west"] <= shapes["east"], name
        if shapes["west"]:
            both.add(name)
    print(f"{len(both)} of {len(recorded)} recording rules record both clusters")
    assert len(both) >= 15


def test_alerts_fire_for_their_own_cluster_only(store):
    alarm = store.wait_for(
        'ALERTS{alertname="KubeScaleEtcdAlarmActive"}',
        lambda f: bool(f),
        timeout=120,
    )
    assert {(s["cluster"], s["alarm"]) for s in map(dict, alarm)} == {("east", "NOSPACE")}
    near = store.wait_for('ALERTS{alertname="KubeScaleEtcdDatabaseNearQuota"}', bool)
    assert {dict(s)["cluster"] for s in near} == {"east"}
    # Every alert that fired carries its cluster. (At start, before vmalert's first record
    # of the target counts has landed, absent() may leave one pending without a cluster;
    # the check below requires that none remains.)
    for labels in store.series('ALERTS{alertstate="firing"}'):
        assert labels.get("cluster") in NODES, labels
    # Presence is judged per cluster: both clusters whole, nothing reports one missing.
    store.vmalert.wait_for_evaluations(3)
    blind = 'ALERTS{alertname=~"KubeScale(ExporterTargetMissing|EtcdNotObserved|PrometheusNotObserved)"}'
    assert store.series(blind) == []


@pytest.mark.parametrize("multi_cluster", [True, False], ids=["multi-cluster", "default"])
def test_every_dashboard_query_runs_on_victoria_metrics(store, multi_cluster):
    """Grafana's instant and range queries, each cluster picked in turn: no query fails, and
    with the cluster picker every series returned is of the picked cluster."""
    store.wait_for("etcd_cluster_member:kubescale_etcd_quota_usage:ratio", lambda f: len(f) == 2)
    store.vmalert.wait_for_evaluations(2)
    check_dashboard_queries(store.vm.api, "VictoriaMetrics", multi_cluster)


def test_vmalert_loaded_every_rule_without_error(store):
    groups = store.vmalert.groups()
    loaded = {r["name"] for g in groups for r in g["rules"]}
    expected = {
        r.get("record") or r["alert"]
        for f in RULE_FILES
        for g in yaml.safe_load(f.read_text())["groups"]
        for r in g["rules"]
    }
    assert loaded == expected
    store.vmalert.wait_for_evaluations(2)
    errors = {
        r["name"]: r["lastError"]
        for g in store.vmalert.groups()
        for r in g["rules"]
        if r.get("lastError")
    }
    assert errors == {}


def test_the_store_holds_both_clusters_in_one(store):
    """What the checks above guard against is there to happen: one store, where a count
    without the cluster reads 5 node targets, not 3 or 2."""
    merged = store.wait_for(
        f'count(up{{job="{demo.NODE_JOB}"}})',
        lambda f: list(f.values()) == [float(sum(NODES.values()))],
    )
    assert list(merged.values()) == [float(sum(NODES.values()))]
