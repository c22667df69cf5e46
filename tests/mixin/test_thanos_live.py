"""The mixin past one Prometheus on Thanos, live: two clusters' exporters (tests/mixin/sharded.py)
scraped by hashmod-sharded Prometheus 3.16 servers, a Thanos sidecar beside each, Thanos Query
over the sidecars and Thanos Ruler evaluating the committed rules/ through Query; its records
and ALERTS are served back to Query over the StoreAPI, as in production.

Beside it, one Prometheus scrapes every target of both clusters (the cluster as a target
label) and evaluates the same rules: what one server holding all series records and fires.
Through Thanos each recording rule must record the same series, with the same values where
they hold still, and the same alerts must fire, once each, each with its cluster; every
dashboard query must answer through Query without an error or a partial-response warning.
The rule copies run every group on the stack's interval and every alert's `for` at a few
seconds: which alerts fire is decided by the data, not by how long the test waits (promtool's
tests judge the timing).
"""

from __future__ import annotations

import math
import time

import pytest
import yaml

from testbed import builds
from testbed.prometheus import NEWEST, PrometheusServer
from testbed.thanos import Query, Ruler, Sidecar
from tests.mixin.sharded import (
    NODES,
    RULE_FILES,
    SCRAPE,
    SELF_JOB,
    SHARDS,
    by_cluster,
    check_dashboard_queries,
    node_targets,
    shard_config,
    start_clusters,
)
from tests.mixin.support import prometheus_binary
from tools import demo

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("thanos-live")]

INTERVAL = "2s"
# Every alert's `for` in the test's rule copies.
FOR = "4s"
# The Ruler's own external label: a replica label (Query drops it), never the cluster label,
# which it would set on every record and alert of every cluster.
RULER_REPLICA = "rule_replica"
# Each shard's own external label beside the cluster, named as prometheus-operator names its
# pods' (prometheus-k8s-0, prometheus-k8s-shard-1-0): without one, the shards of a cluster are
# two producers of one label set to Thanos. Query drops it as a replica label; no shard
# scrapes what another does, so no two series differ in it alone.
SHARD_REPLICA = "prometheus_replica"


def shard_name(shard: int) -> str:
    return "prometheus-k8s-0" if shard == 0 else f"prometheus-k8s-shard-{shard}-0"


def quick_rules(directory) -> list[str]:
    """The generated rule files with every group on the stack's interval and every alert's
    `for` at FOR."""
    directory.mkdir()
    out = []
    for path in RULE_FILES:
        rules = yaml.safe_load(path.read_text())
        for group in rules["groups"]:
            group.pop("interval", None)
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = FOR
        copy = directory / path.name
        copy.write_text(yaml.safe_dump(rules, sort_keys=False))
        out.append(str(copy))
    return out


def reference_config(clusters, shard_ports, rule_files) -> dict:
    """One Prometheus scraping what all shards of both clusters scrape, the cluster a target
    label instead of an external one."""
    node = [t for c in clusters for t in node_targets(c, {"cluster": c.name})]
    cluster = [
        {"targets": [f"127.0.0.1:{c.cluster_port}"], "labels": {"cluster": c.name}}
        for c in clusters
    ]
    own = [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"cluster": name}}
        for (name, _), port in shard_ports.items()
    ]
    return {
        "global": {"scrape_interval": SCRAPE, "evaluation_interval": INTERVAL},
        "scrape_configs": [
            {"job_name": demo.NODE_JOB, "static_configs": node},
            {"job_name": demo.CLUSTER_JOB, "static_configs": cluster},
            {"job_name": SELF_JOB, "static_configs": own},
        ],
        "rule_files": rule_files,
    }


def values(result) -> dict[frozenset, float]:
    return {frozenset(r["metric"].items()): float(r["value"][1]) for r in result}


class Stack:
    def __init__(self, shards, sidecars, query, ruler, reference):
        self.shards = shards  # {(cluster, shard): PrometheusServer}
        self.sidecars = sidecars  # {(cluster, shard): Sidecar}
        self.query = query
        self.ruler = ruler
        self.reference = reference

    def thanos(self, expr) -> dict[frozenset, float]:
        """Through Query, every store answering (a partial answer fails)."""
        return values(self.query.query(expr, partial_response="false"))

    def one(self, expr) -> dict[frozenset, float]:
        """From the one Prometheus holding all series."""
        reply = self.reference.session.get(
            self.reference.url + "/api/v1/query", params={"query": expr}, timeout=10
        ).json()
        assert reply["status"] == "success", f"{expr}: {reply}"
        return values(reply["data"]["result"])

    def wait_for(self, expr, until=bool, timeout=90):
        deadline = time.monotonic() + timeout
        while True:
            found = self.thanos(expr)
            if until(found):
                return found
            if time.monotonic() > deadline:
                pytest.fail(f"{expr} gave {found} through Thanos after {timeout}s")
            time.sleep(0.5)


def thanos_binary() -> str:
    try:
        return builds.thanos_binary()
    except FileNotFoundError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("thanos")
    prometheus = prometheus_binary(NEWEST, "prometheus")
    thanos = thanos_binary()
    procs = []
    try:
        clusters = start_clusters(workdir, procs)
        shards, sidecars = {}, {}
        for cluster in clusters:
            for shard in range(SHARDS):
                key = cluster.name, shard
                shard_dir = workdir / f"prometheus-{cluster.name}-{shard}"
                shard_dir.mkdir()
                prom = PrometheusServer(shard_dir, {}, binary=prometheus)
                prom.config = shard_config(
                    cluster, shard, prom.port, external_labels={SHARD_REPLICA: shard_name(shard)}
                )
                procs.append(prom)
                shards[key] = prom.start()
                sidecar = Sidecar(workdir, thanos, prom, name=f"sidecar-{cluster.name}-{shard}")
                procs.append(sidecar)
                sidecars[key] = sidecar.start()
        rule_files = quick_rules(workdir / "rules")
        grpcs = [s.grpc for s in sidecars.values()]
        query = Query(workdir, thanos, grpcs, [SHARD_REPLICA, RULER_REPLICA])
        ruler = Ruler(workdir, thanos, query.url, rule_files, {RULER_REPLICA: "0"}, INTERVAL)
        query.endpoints.append(ruler.grpc)
        procs.append(query)
        query.start()
        procs.append(ruler)
        ruler.start()
        query.wait_for_endpoints()
        reference_dir = workdir / "reference"
        reference_dir.mkdir()
        reference = PrometheusServer(reference_dir, {}, binary=prometheus)
        reference.config = reference_config(
            clusters, {k: p.port for k, p in shards.items()}, rule_files
        )
        procs.append(reference)
        yield Stack(shards, sidecars, query, ruler, reference.start())
    finally:
        for proc in reversed(procs):
            proc.stop()


def test_the_thanos_release_that_ran(stack, record_property):
    line = builds.version_line(thanos_binary())
    record_property("thanos_version", line)
    print(line)
    info = stack.query.session.get(stack.query.url + "/api/v1/status/buildinfo", timeout=5).json()
    assert f"version {builds.thanos_version().removeprefix('v')} " in line
    assert info["data"]["version"] == builds.thanos_version().removeprefix("v")


def test_query_sees_every_shard_and_the_ruler(stack):
    """Each sidecar answers with its shard's external labels; the Ruler with its own."""
    stores = stack.query.stores()
    sidecars = {s["name"]: s for s in stores.get("sidecar", [])}
    assert set(sidecars) == {s.grpc for s in stack.sidecars.values()}
    for (cluster, shard), sidecar in stack.sidecars.items():
        labels = {"cluster": cluster, SHARD_REPLICA: shard_name(shard)}
        assert sidecars[sidecar.grpc]["labelSets"] == [labels]
    rulers = stores.get("rule", [])
    assert [r["name"] for r in rulers] == [stack.ruler.grpc]


def test_every_node_target_is_scraped_by_exactly_one_shard(stack):
    """hashmod splits the node targets; the cluster-mode job is whole on shard 0."""
    stack.wait_for(
        f'count by (cluster) (up{{job="{demo.NODE_JOB}"}} == 1)',
        lambda f: by_cluster(f) == {(c,): float(n) for c, n in NODES.items()},
    )
    for cluster, nodes in NODES.items():
        scraped = []
        for shard in range(SHARDS):
            prom = stack.shards[cluster, shard]
            scraped += [r["metric"]["instance"] for r in prom.query(f'up{{job="{demo.NODE_JOB}"}}')]
            cluster_job = prom.query(f'up{{job="{demo.CLUSTER_JOB}"}}')
            assert len(cluster_job) == (1 if shard == 0 else 0), (cluster, shard)
        assert len(scraped) == len(set(scraped)) == nodes, (cluster, scraped)


def test_the_ruler_loaded_every_rule_and_evaluates_it_without_error(stack):
    expected = {
        r.get("record") or r["alert"]
        for f in RULE_FILES
        for g in yaml.safe_load(f.read_text())["groups"]
        for r in g["rules"]
    }
    loaded = {r["name"] for g in stack.ruler.groups() for r in g["rules"]}
    assert loaded == expected
    # Each group in the default partial-response strategy: abort, a store that does not
    # answer fails the evaluation instead of thinning it.
    assert {g.get("partialResponseStrategy") for g in stack.ruler.groups()} == {"ABORT"}
    stack.ruler.wait_for_evaluations(2)
    errors = {
        r["name"]: r["lastError"]
        for g in stack.ruler.groups()
        for r in g["rules"]
        if r.get("lastError")
    }
    assert errors == {}
    warnings = stack.ruler.metric("thanos_rule_evaluation_with_warnings_total")
    assert set(warnings.values()) <= {0.0}, warnings


def _recorded() -> list[str]:
    return [
        r["record"]
        for f in RULE_FILES
        for g in yaml.safe_load(f.read_text())["groups"]
        for r in g["rules"]
        if "record" in r
    ]


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


# How long a record must have held still in the one Prometheus for its value to be compared:
# the two sides scrape the same exporters at different moments, so what each scrape measures
# (its duration, the samples a scrape counted) differs between them, and rates move.
STILL = "20s"


def _compare_records(stack, names):
    """(differences, records with series for both clusters, values compared)."""
    differences, both, compared = {}, set(), 0
    for name in names:
        before = stack.one(name)
        got = stack.thanos(name)
        after = stack.one(name)
        if set(got) not in (set(before), set(after)):
            differences[name] = {
                "only through Thanos": set(got) - set(after),
                "only in one Prometheus": set(after) - set(got),
            }
            continue
        still = {
            labels - {("__name__", name)} for labels in stack.one(f"changes({name}[{STILL}]) == 0")
        }
        for labels, value in got.items():
            if labels - {("__name__", name)} in still and labels in after:
                compared += 1
                if not _close(value, after[labels]):
                    differences.setdefault(name, {})[labels] = (value, after[labels])
        if {dict(labels).get("cluster") for labels in got} >= set(NODES):
            both.add(name)
    return differences, both, compared


def test_every_recording_rule_records_what_one_prometheus_holding_all_series_records(stack):
    """No rule merges the clusters or loses a shard's series: through Thanos each recording
    rule gives the series one Prometheus with every target gives, each with its cluster."""
    stack.wait_for(
        "cluster_job:kubescale_exporter_targets:count",
        lambda f: (
            by_cluster(f, "job")
            == {
                **{(c, demo.NODE_JOB): float(n) for c, n in NODES.items()},
                **{(c, demo.CLUSTER_JOB): 1.0 for c in NODES},
            }
        ),
    )
    stack.wait_for(
        "etcd_cluster_member:kubescale_etcd_quota_usage:ratio",
        lambda f: len(f) == 2 and by_cluster(f).get(("east",), 0) >= 0.95,
    )
    names = _recorded()
    deadline = time.monotonic() + 90
    while True:
        stack.ruler.wait_for_evaluations(1)
        differences, both, compared = _compare_records(stack, names)
        if not differences or time.monotonic() > deadline:
            break
    assert differences == {}
    for name in names:
        for labels in stack.thanos(name):
            assert dict(labels).get("cluster") in NODES, (name, labels)
            assert not {RULER_REPLICA, SHARD_REPLICA} & set(dict(labels)), (name, labels)
    print(
        f"{len(both)} of {len(names)} recording rules record both clusters; {compared} values compared"
    )
    assert len(both) >= 15
    assert compared >= 30


def _firing(result) -> list[frozenset]:
    return [frozenset(r["metric"].items()) for r in result]


def test_every_alert_that_should_fire_fires_once_per_cluster(stack):
    """The alerts one Prometheus holding all series fires, each once, each with its cluster:
    the etcd alarm and quota alerts for east alone, nothing reporting a cluster missing."""
    expr = 'ALERTS{alertstate="firing"}'
    deadline = time.monotonic() + 120
    while True:
        through = _firing(stack.query.query(expr, partial_response="false"))
        one = set(stack.one(expr))
        alarm = {
            dict(a).get("cluster")
            for a in through
            if dict(a)["alertname"] == "KubeScaleEtcdAlarmActive"
        }
        if (set(through) == one and alarm) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert set(through) == one, {
        "only through Thanos": set(through) - one,
        "only in one Prometheus": one - set(through),
    }
    assert len(through) == len(set(through)), "an alert fires twice"
    for labels in through:
        assert dict(labels).get("cluster") in NODES, labels
        assert not {RULER_REPLICA, SHARD_REPLICA} & set(dict(labels)), labels
    names = {}
    for labels in map(dict, through):
        names.setdefault((labels["alertname"], labels["severity"]), []).append(labels["cluster"])
    print({f"{n} ({s})": sorted(c) for (n, s), c in sorted(names.items())})
    assert names["KubeScaleEtcdAlarmActive", "critical"] == ["east"]
    assert names["KubeScaleEtcdDatabaseNearQuota", "warning"] == ["east"]
    assert names["KubeScaleEtcdDatabaseNearQuota", "critical"] == ["east"]
    blind = (
        "KubeScaleExporterTargetMissing",
        "KubeScaleEtcdNotObserved",
        "KubeScalePrometheusNotObserved",
    )
    assert not {name for name, _ in names} & set(blind)
    # The alerts list Query serves from the Ruler (what a UI shows) holds each once too.
    reply = stack.query.api("/api/v1/alerts")
    assert reply["status"] == "success" and not reply.get("warnings"), reply
    listed = [
        frozenset(a["labels"].items()) for a in reply["data"]["alerts"] if a["state"] == "firing"
    ]
    print(f"{len(listed)} alerts listed firing; {len(through)} ALERTS series firing")
    assert len(listed) == len(set(listed)) >= len(through)


@pytest.mark.parametrize("multi_cluster", [True, False], ids=["multi-cluster", "default"])
def test_every_dashboard_query_answers_through_thanos_query(stack, multi_cluster):
    """Grafana's instant and range queries, each cluster picked in turn: none fails or comes
    back partial, and with the cluster picker every series returned is of the picked cluster."""
    stack.wait_for("etcd_cluster_member:kubescale_etcd_quota_usage:ratio", lambda f: len(f) == 2)
    stack.ruler.wait_for_evaluations(2)
    check_dashboard_queries(stack.query.api, "Thanos Query", multi_cluster, no_warnings=True)


def _node_shard(stack, cluster) -> int:
    """A shard of `cluster` that scrapes node targets (hashmod decides which)."""
    for shard in range(SHARDS):
        if stack.shards[cluster, shard].query(f'up{{job="{demo.NODE_JOB}"}}'):
            return shard
    raise AssertionError(f"no shard of {cluster} scrapes a node target")


def _failures(ruler) -> float:
    return sum(ruler.metric("prometheus_rule_evaluation_failures_total").values())


def test_a_shard_that_stops_answering_fails_the_rules_instead_of_thinning_them(stack):
    """Query with strict endpoints and the groups' abort strategy: while one shard's sidecar
    is away the Ruler's evaluations fail, and the node-target count it recorded never drops
    (a Query whose endpoints are not strict answers the same query from the other shards,
    without an error or a warning, once its health check has failed). Runs last: the
    sidecar is started again at the end."""
    expr = f'cluster_job:kubescale_exporter_targets:count{{cluster="east",job="{demo.NODE_JOB}"}}'
    east = float(NODES["east"])
    stack.wait_for(expr, lambda f: list(f.values()) == [east])
    shard = _node_shard(stack, "east")
    sidecar = stack.sidecars["east", shard]
    workdir = sidecar.workdir
    grpcs = [s.grpc for s in stack.sidecars.values()]
    lax = Query(workdir, sidecar.binary, grpcs, strict=False, name="query-lax")
    up = f'count(up{{cluster="east",job="{demo.NODE_JOB}"}})'
    try:
        lax.start()
        lax.wait_for_endpoints()
        assert values(lax.query(up)) == {frozenset(): east}
        failed = _failures(stack.ruler)
        stopped = time.time()
        sidecar.stop()
        # The lax Query warns until its health check drops the endpoint, then answers
        # from the shard left, as if that were all of east.
        deadline = time.monotonic() + 60
        while (reply := lax.api("/api/v1/query", query=up)).get("warnings"):
            assert time.monotonic() < deadline, f"the lax Query still warns: {reply}"
            time.sleep(0.5)
        assert reply["status"] == "success", reply
        assert sum(values(reply["data"]["result"]).values()) < east
        reply = stack.query.api("/api/v1/query", query=up, partial_response="false")
        assert reply["status"] == "error", reply
        stack.ruler.wait_for_evaluations(3)
        assert _failures(stack.ruler) > failed
        # From before the stop (3 then) to now: nothing lower was recorded meanwhile.
        window = f"{int(time.time() - stopped) + 10}s"
        held = stack.query.api(
            "/api/v1/query", query=f"min_over_time({expr}[{window}])", partial_response="true"
        )
        assert held["status"] == "success" and held.get("warnings"), held
        assert [float(r["value"][1]) for r in held["data"]["result"]] == [east]
    finally:
        lax.stop()
        if not sidecar.proc.alive():
            sidecar.start()
    # Back: every evaluation succeeds again.
    stack.query.wait_for_endpoints()
    stack.ruler.wait_for_evaluations(2)
    recovered = _failures(stack.ruler)
    stack.ruler.wait_for_evaluations(2)
    assert _failures(stack.ruler) == recovered
