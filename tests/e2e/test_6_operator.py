"""Scenario 6: prometheus-operator, as kube-prometheus users run it.

The real operator (the release .ci/go/prometheus-operator pins, with that release's CRDs,
applied by `deployed`) reconciles deploy/'s ServiceMonitors and PrometheusRule into the
Prometheus 3.5 it runs in the cluster (StatefulSet prometheus-k8s, kube-prometheus' names,
its ServiceAccount bound to the metrics reader as docs/deploy.md says). That Prometheus
scrapes both modes through --web.kube-rbac, evaluates the mixin's rules, and an alert
fires there. Only the test's clock is changed: the ServiceMonitors scrape every 5 s and
the PrometheusRule's `for:` are conftest.SHORT_FOR.
"""

import time

import pytest
import requests

from testbed import operator

from .conftest import NS, TIMINGS, e2e_rules, wait_for
from .test_4_balloon import deployment as balloon_deployment

STEADY_NS = "e2e-operator-steady"
STEADY_PRIORITY = "e2e-operator-below-cutoff"
JOBS = {"kube-scale-exporter-node", "kube-scale-exporter-cluster"}


def short_clock(kube):
    """Every ServiceMonitor endpoint at 5 s, and the PrometheusRule's `for:` shortened."""
    for sm in kube.get(f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/servicemonitors")["items"]:
        endpoints = [dict(e, interval="5s", scrapeTimeout="4s") for e in sm["spec"]["endpoints"]]
        kube.patch(
            f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/servicemonitors/"
            f"{sm['metadata']['name']}",
            {"spec": {"endpoints": endpoints}},
        )
    [rule] = kube.get(f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/prometheusrules")["items"]
    kube.patch(
        f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/prometheusrules/"
        f"{rule['metadata']['name']}",
        {"spec": {"groups": e2e_rules()["groups"]}},
    )


class InClusterProm:
    """The operator's Prometheus through its pod IP (the bridge reaches it)."""

    def __init__(self, ip):
        self.url = f"http://{ip}:9090"
        self.s = requests.Session()
        self.s.trust_env = False

    def get(self, path, **params):
        r = self.s.get(self.url + path, params=params, timeout=10)
        r.raise_for_status()
        return r.json()["data"]

    def healthy_jobs(self):
        return {
            t["labels"].get("job")
            for t in self.get("/api/v1/targets")["activeTargets"]
            if t["health"] == "up"
        }

    def firing(self, name):
        return [
            a
            for a in self.get("/api/v1/alerts")["alerts"]
            if a["labels"]["alertname"] == name and a["state"] == "firing"
        ]


@pytest.fixture(scope="module")
def operator_prometheus(deployed, kube, cluster, tmp_path_factory):
    t = time.monotonic()
    kc = cluster.kubeconfig
    short_clock(kube)
    log_dir = tmp_path_factory.mktemp("operator")
    op = operator.start_operator(
        kc, log_dir, namespaces=[operator.TARGET_NAMESPACE, operator.NAMESPACE]
    )
    try:
        operator.apply(kc, operator.prometheus_objects())
        config = wait_for(
            "the operator's config with our three ServiceMonitors",
            lambda: (
                c
                if (c := operator.generated_config(kc))
                and sum(NS in j["job_name"] for j in c.get("scrape_configs", [])) == 3
                else None
            ),
            timeout=120,
        )
        assert config
        pod = wait_for(
            "prometheus-k8s-0 Running and ready",
            lambda: (
                p
                if (p := kube.get(f"/api/v1/namespaces/{operator.NAMESPACE}/pods/prometheus-k8s-0"))
                and p["status"].get("phase") == "Running"
                and all(c.get("ready") for c in p["status"].get("containerStatuses", []))
                else None
            ),
            timeout=180,
            interval=2,
        )
        TIMINGS["operator_prometheus_ready"] = time.monotonic() - t
        yield InClusterProm(pod["status"]["podIP"])
    finally:
        kube.delete(
            f"/apis/monitoring.coreos.com/v1/namespaces/{operator.NAMESPACE}/prometheuses/{operator.NAME}"
        )
        kube.delete(f"/api/v1/namespaces/{operator.NAMESPACE}")
        op.stop()
        print("prometheus-operator:", operator.version(), "log:", log_dir)


def test_operator_prometheus_scrapes_both_modes_through_kube_rbac(operator_prometheus):
    jobs = wait_for(
        "both modes up in the operator's Prometheus",
        lambda: j if JOBS <= (j := operator_prometheus.healthy_jobs()) else None,
        timeout=120,
        interval=2,
    )
    assert JOBS <= jobs
    groups = operator_prometheus.get("/api/v1/rules")["groups"]
    names = {r["name"] for g in groups for r in g["rules"]}
    assert {g["name"] for g in e2e_rules()["groups"]} <= {g["name"] for g in groups}
    assert "KubeScaleBalloonMisconfigured" in names
    bad = [
        (r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r.get("lastError")
    ]
    assert not bad, bad


def test_an_alert_fires_in_the_operators_prometheus(operator_prometheus, kube):
    kube.post(
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"metadata": {"name": STEADY_PRIORITY}, "value": -20, "globalDefault": False},
    )
    kube.namespace(STEADY_NS)
    try:
        kube.post(
            f"/apis/apps/v1/namespaces/{STEADY_NS}/deployments",
            balloon_deployment("below-cutoff", 1, 1, STEADY_PRIORITY),
        )
        alert = wait_for(
            "KubeScaleBalloonMisconfigured firing in the operator's Prometheus",
            lambda: operator_prometheus.firing("KubeScaleBalloonMisconfigured"),
            timeout=180,
            interval=2,
        )
        assert alert[0]["labels"]["reason"] == "priority_below_autoscaler_cutoff", alert
    finally:
        kube.delete(f"/api/v1/namespaces/{STEADY_NS}")
        kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{STEADY_PRIORITY}")
