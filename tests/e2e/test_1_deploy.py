"""deploy/ on a real kubelet: the image runs, both workloads serve, Prometheus finds them."""

import time

import requests

from prometheus_client.parser import text_string_to_metric_families

from testbed.node import MAX_PARALLEL_IMAGE_PULLS

from .conftest import NODE_METRICS, NS, TIMINGS, metrics_text, wait_for


def samples(text, name):
    return [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def test_node_daemonset_answers_on_9867(deployed):
    text = wait_for("node exporter /metrics", lambda: metrics_text(NODE_METRICS), timeout=60)
    assert samples(text, "kubescale_neighbor_gc_thresh3"), text[:2000]
    # imagepull reads the real kubelet's config (parallel pulls, a limit) and containerd.
    assert [s.value for s in samples(text, "kubescale_kubelet_serialize_image_pulls")] == [0.0]
    limit = samples(text, "kubescale_kubelet_max_parallel_image_pulls")
    assert [s.value for s in limit] == [MAX_PARALLEL_IMAGE_PULLS]
    success = {
        s.labels["collector"]: s.value for s in samples(text, "kubescale_scrape_collector_success")
    }
    assert success and all(v == 1.0 for v in success.values()), success
    watches = {s.labels["resource"]: s.value for s in samples(text, "kubescale_kube_watch_up")}
    assert watches == {"pods": 1.0}, watches


def test_node_metrics_need_a_token_healthz_does_not(deployed):
    """--web.kube-rbac (the default install): no token 401, a token the API server does
    not know 401, the kubelet's probe path open."""
    s = requests.Session()
    s.trust_env = False
    assert s.get(NODE_METRICS, timeout=5).status_code == 401
    bad = s.get(NODE_METRICS, headers={"Authorization": "Bearer not-a-token"}, timeout=5)
    assert bad.status_code == 401
    assert s.get(NODE_METRICS.replace("/metrics", "/healthz"), timeout=5).status_code == 200


def test_cluster_deployment_watches_up_without_403(deployed, cluster):
    pod = deployed.pods(selector="app.kubernetes.io/component=cluster")[0]
    url = f"http://{pod['status']['podIP']}:9867/metrics"

    def all_up():
        text = metrics_text(url)
        ups = {s.labels["resource"]: s.value for s in samples(text, "kubescale_kube_watch_up")}
        return ups if ups and all(v == 1.0 for v in ups.values()) else None

    ups = wait_for("cluster-mode watches up", all_up, timeout=60)
    assert set(ups) >= {"pods", "nodes", "priorityclasses", "events"}, ups
    logs = cluster.kubectl("-n", NS, "logs", pod["metadata"]["name"])
    assert "403" not in logs and "orbidden" not in logs, logs[-3000:]


def test_prometheus_discovers_and_scrapes_both_jobs(prom, cluster):
    t = time.monotonic()

    def up():
        ups = {r["metric"]["job"]: r["value"][1] for r in prom.query("up")}
        return (
            ups
            if ups.get("kube-scale-exporter-node") == "1"
            and ups.get("kube-scale-exporter-cluster") == "1"
            else None
        )

    wait_for("both jobs up in Prometheus", up, timeout=90)
    TIMINGS["first_scrape"] = time.monotonic() - t
    # What the cluster itself costs (etcds, control plane, kubelet, containerd, kube-proxy).
    TIMINGS["cluster_rss_mib"] = cluster.rss_mib()
    TIMINGS["cluster_disk_mib"] = cluster.disk_mib()
    # The node label comes from the scrape config's relabelling, as the mixin expects.
    node = prom.query('kubescale_neighbor_gc_thresh3{job="kube-scale-exporter-node"}')
    assert node and node[0]["metric"].get("node") == "kse-e2e-node", node
    # No rule fails to evaluate against the real series.
    groups = prom.session.get(prom.url + "/api/v1/rules", timeout=5).json()["data"]["groups"]
    bad = [
        (r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r.get("lastError")
    ]
    assert not bad, bad
