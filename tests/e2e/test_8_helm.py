"""Scenario 8: charts/kube-scale-exporter installed with `helm install`, as
kube-prometheus-stack users install exporters. Its default values (the default install of
deploy/, which the chart is generated from) bring up both modes; the metrics reader it
adds lets a ServiceAccount's token scrape each pod's /metrics through --web.kube-rbac;
`helm uninstall` leaves none of its objects behind.
"""

import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from testbed import helm, operator

from .conftest import TIMINGS, wait_for

HELM_NS = "kse-e2e-helm"
RELEASE = "kse"
READER = "e2e-helm-scraper"
SELECTOR = "app.kubernetes.io/name=kube-scale-exporter"
# Every kind the chart renders, where `helm uninstall` must leave none.
NAMESPACED = [
    "/api/v1/namespaces/{ns}/pods",
    "/api/v1/namespaces/{ns}/services",
    "/api/v1/namespaces/{ns}/serviceaccounts",
    "/apis/apps/v1/namespaces/{ns}/daemonsets",
    "/apis/apps/v1/namespaces/{ns}/deployments",
    "/apis/monitoring.coreos.com/v1/namespaces/{ns}/servicemonitors",
    "/apis/monitoring.coreos.com/v1/namespaces/{ns}/prometheusrules",
]
CLUSTER_SCOPED = [
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
]


def ours(kube):
    """Every object of the chart's kinds labelled as kube-scale-exporter's, by path."""
    found = []
    for path in [p.format(ns=HELM_NS) for p in NAMESPACED] + CLUSTER_SCOPED:
        for obj in kube.get(path, labelSelector=SELECTOR)["items"]:
            found.append(f"{path}/{obj['metadata']['name']}")
    return found


@pytest.fixture(scope="module")
def with_crds(kube, cluster):
    """The pinned operator release's CRDs (as `deployed` applies them; idempotent), and no
    kube-scale-exporter object in the cluster: the chart's ClusterRoles have the kustomize
    install's names, which test_7_rollout.py has deleted by now."""
    operator.apply_crds(cluster.kubeconfig)
    left = [
        o["metadata"]["name"]
        for path in CLUSTER_SCOPED
        for o in kube.get(path, labelSelector=SELECTOR)["items"]
    ]
    assert left == [], f"a kustomize install is still there: {left}"


def reader_token(kube):
    """A ServiceAccount bound to the chart's metrics reader, as docs/deploy.md says to bind
    Prometheus', and a token of it."""
    kube.post(f"/api/v1/namespaces/{HELM_NS}/serviceaccounts", {"metadata": {"name": READER}})
    kube.post(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": READER},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "kube-scale-exporter-metrics-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": HELM_NS}],
        },
    )
    return kube.post(
        f"/api/v1/namespaces/{HELM_NS}/serviceaccounts/{READER}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]


def ready_pods(kube):
    pods = kube.pods(ns=HELM_NS, selector=SELECTOR)
    ready = [
        p
        for p in pods
        if p["status"].get("phase") == "Running"
        and p["status"].get("containerStatuses")
        and all(c.get("ready") for c in p["status"]["containerStatuses"])
    ]
    modes = {p["metadata"]["labels"]["app.kubernetes.io/component"] for p in ready}
    return ready if modes == {"node", "cluster"} and len(ready) == len(pods) else None


def scrape(url, token=None) -> requests.Response:
    s = requests.Session()
    s.trust_env = False
    return s.get(url, headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=5)


def collector_success(text):
    return {
        s.labels["collector"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "kubescale_scrape_collector_success"
    }


def test_helm_install_runs_both_modes_scraped_and_uninstall_leaves_nothing(
    kube, cluster, with_crds
):
    kc = cluster.kubeconfig
    t = time.monotonic()
    kube.namespace(HELM_NS)
    try:
        helm.helm("install", RELEASE, str(helm.CHART), "--namespace", HELM_NS, kubeconfig=kc)
        pods = wait_for("the release's pods Running and ready", lambda: ready_pods(kube), 180, 2)
        TIMINGS["helm_install_ready"] = time.monotonic() - t
        status = helm.helm("status", RELEASE, "--namespace", HELM_NS, kubeconfig=kc).stdout
        assert "STATUS: deployed" in status, status

        token = reader_token(kube)
        for pod in pods:
            url = f"http://{pod['status']['podIP']}:9867/metrics"
            assert scrape(url).status_code == 401, url  # kubeRbac.enabled
            r = wait_for(
                f"{url} with the reader's token", lambda u=url: (r := scrape(u, token)).ok and r, 60
            )
            success = collector_success(r.text)
            assert success and set(success.values()) == {1.0}, (pod["metadata"]["name"], success)
        kinds = {o.split("/")[-2] for o in ours(kube)}
        assert {"servicemonitors", "prometheusrules", "daemonsets", "deployments"} <= kinds

        helm.helm("uninstall", RELEASE, "--namespace", HELM_NS, "--wait", kubeconfig=kc)
        left = wait_for("nothing of the release left", lambda: ours(kube) == [] or None, 120, 2)
        assert left
        releases = kube.get(f"/api/v1/namespaces/{HELM_NS}/secrets", labelSelector="owner=helm")
        assert releases["items"] == []
    finally:
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{READER}")
        helm.helm(
            "uninstall",
            RELEASE,
            "--namespace",
            HELM_NS,
            "--ignore-not-found",
            kubeconfig=kc,
            check=False,
        )
        kube.delete(f"/api/v1/namespaces/{HELM_NS}")
