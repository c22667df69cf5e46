"""Scenario 8: charts/kube-scale-exporter installed with `helm install`, as
kube-prometheus-stack users install exporters. Its default values (the default install of
deploy/, which the chart is generated from) bring up both modes; the metrics reader it
adds lets a ServiceAccount's token scrape each pod's /metrics through --web.kube-rbac;
`helm uninstall` leaves none of its objects behind. Then a platform team's values file:
the image from their registry (pushed there first), resources, extra flags, tolerations
for a tainted node, the kubelet's config at a path the node lacks, and the dashboards as
ConfigMaps for Grafana's sidecar.
"""

import json
import platform
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from testbed import helm, operator
from testbed.image import IMAGE_NAME
from testbed.node import NODE_NAME
from testbed.registry_server import RegistryServer

from .conftest import TIMINGS, wait_for

HELM_NS = "kse-e2e-helm"
# The second install's own namespace: the first one's may still be terminating.
TUNED_NS = "kse-e2e-helm-tuned"
RELEASE = "kse"
READER = "e2e-helm-scraper"
SELECTOR = "app.kubernetes.io/name=kube-scale-exporter"
# Every kind the chart renders, where `helm uninstall` must leave none.
NAMESPACED = [
    "/api/v1/namespaces/{ns}/pods",
    "/api/v1/namespaces/{ns}/services",
    "/api/v1/namespaces/{ns}/serviceaccounts",
    "/api/v1/namespaces/{ns}/configmaps",
    "/apis/apps/v1/namespaces/{ns}/daemonsets",
    "/apis/apps/v1/namespaces/{ns}/deployments",
    "/apis/monitoring.coreos.com/v1/namespaces/{ns}/servicemonitors",
    "/apis/monitoring.coreos.com/v1/namespaces/{ns}/prometheusrules",
]
CLUSTER_SCOPED = [
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
]


def ours(kube, ns=HELM_NS):
    """Every object of the chart's kinds labelled as kube-scale-exporter's, by path."""
    found = []
    for path in [p.format(ns=ns) for p in NAMESPACED] + CLUSTER_SCOPED:
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


def reader_token(kube, ns=HELM_NS):
    """A ServiceAccount bound to the chart's metrics reader, as docs/deploy.md says to bind
    Prometheus', and a token of it."""
    kube.post(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": READER}})
    kube.post(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": READER},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "kube-scale-exporter-metrics-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": ns}],
        },
    )
    return kube.post(
        f"/api/v1/namespaces/{ns}/serviceaccounts/{READER}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]


def ready_pods(kube, ns=HELM_NS):
    pods = kube.pods(ns=ns, selector=SELECTOR)
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


# --- a platform team's values -------------------------------------------------------------

TAINT = {"key": "kse-e2e/dedicated", "value": "monitoring", "effect": "NoSchedule"}
TOLERATE = [
    {"key": TAINT["key"], "operator": "Equal", "value": "monitoring", "effect": "NoSchedule"}
]
REPOSITORY = "platform/kube-scale-exporter"
PLATFORM = f"linux/{ {'x86_64': 'amd64', 'aarch64': 'arm64'}[platform.machine()] }"


@pytest.fixture
def registry(tmp_path, cluster):
    """A local docker-registry the node's containerd pulls from over plain HTTP, holding the
    image the e2e built, pushed there by containerd's own client: `host:port`."""
    reg = RegistryServer(tmp_path / "registry").start()
    host = f"127.0.0.1:{reg.port}"
    cluster.add_registry(host, f"http://{host}")
    tag = IMAGE_NAME.rsplit(":", 1)[1]
    pushed = f"{host}/{REPOSITORY}:{tag}"
    cluster.ctr("images", "tag", "--force", IMAGE_NAME, pushed)
    cluster.ctr("images", "push", "--plain-http", "--platform", PLATFORM, pushed)
    cluster.ctr("images", "rm", pushed)  # the kubelet pulls it from the registry
    yield reg, host, tag, set(manifest_requests(reg))
    cluster.ctr("images", "rm", pushed, check=False)
    reg.stop()


@pytest.fixture
def tainted(kube):
    """The node tainted NoSchedule for the test, as a dedicated pool's nodes are."""
    path = f"/api/v1/nodes/{NODE_NAME}"
    before = kube.get(path)["spec"].get("taints")
    kube.patch(path, {"spec": {"taints": [*(before or []), TAINT]}})
    yield
    kube.patch(path, {"spec": {"taints": before}})


def manifest_requests(reg):
    """containerd's requests for the repository's manifests, each access log line (with its
    time): a pull resolves the tag there, even with every blob already on the node."""
    return [line for line in reg.requests_from("containerd/", REPOSITORY) if "/manifests/" in line]


def pod_logs(kube, pod):
    r = kube.s.get(
        f"{kube.server}/api/v1/namespaces/{TUNED_NS}/pods/{pod['metadata']['name']}/log",
        timeout=30,
    )
    r.raise_for_status()
    return r.text


def test_helm_install_with_a_platform_teams_values(
    kube, cluster, with_crds, registry, tainted, tmp_path
):
    reg, host, tag, pushed = registry
    # A kubelet config path set for the fleet that this node lacks: its directory is there.
    kubelet_dir = tmp_path / "kubelet"
    kubelet_dir.mkdir(mode=0o755)
    tmp_path.chmod(0o755)
    missing = kubelet_dir / "config.json"
    values = {
        "image": {"registry": host, "repository": REPOSITORY, "pullPolicy": "Always"},
        "collectors": {"etcdNode": "off"},  # the one node runs the node DaemonSet
        "node": {
            "resources": {"limits": {"memory": "160Mi"}},
            "tolerations": TOLERATE,
            "extraArgs": ["--image-pull.stall-after=5m"],
            "podAnnotations": {"example.com/team": "platform"},
        },
        "cluster": {
            "resources": {"requests": {"memory": "128Mi"}, "limits": {"memory": "1500Mi"}},
            "tolerations": TOLERATE,
            "extraArgs": ["--web.kube-rbac.cache-ttl=5m"],
        },
        "hostPaths": {"kubeletConfig": str(missing)},
        "serviceMonitors": {"interval": "1m"},
        "grafanaDashboards": {"enabled": True, "annotations": {"grafana_folder": "Scale"}},
    }
    (tmp_path / "values.yaml").write_text(json.dumps(values))
    kc = cluster.kubeconfig
    kube.namespace(TUNED_NS)
    try:
        t = time.monotonic()
        helm.helm(
            "install",
            RELEASE,
            str(helm.CHART),
            "--namespace",
            TUNED_NS,
            "--values",
            str(tmp_path / "values.yaml"),
            kubeconfig=kc,
        )
        pods = wait_for(
            "the release's pods Running and ready", lambda: ready_pods(kube, TUNED_NS), 240, 2
        )
        TIMINGS["helm_install_tuned_ready"] = time.monotonic() - t
        by_mode = {p["metadata"]["labels"]["app.kubernetes.io/component"]: p for p in pods}
        image = f"{host}/{REPOSITORY}:{tag}"
        for mode, pod in by_mode.items():
            [c] = pod["spec"]["containers"]
            assert c["image"] == image and c["imagePullPolicy"] == "Always", mode
            assert pod["spec"]["tolerations"][: len(TOLERATE)] == TOLERATE, mode
            [status] = pod["status"]["containerStatuses"]
            assert status["image"] == image, status
        assert by_mode["node"]["spec"]["containers"][0]["resources"]["limits"]["memory"] == "160Mi"
        assert by_mode["node"]["spec"]["containers"][0]["args"][-1] == "--image-pull.stall-after=5m"
        assert by_mode["node"]["metadata"]["annotations"]["example.com/team"] == "platform"
        cluster_resources = by_mode["cluster"]["spec"]["containers"][0]["resources"]
        assert cluster_resources["limits"]["memory"] == "1500Mi"
        assert cluster_resources["requests"]["memory"] == "128Mi"
        assert (
            by_mode["cluster"]["spec"]["containers"][0]["args"][-1]
            == "--web.kube-rbac.cache-ttl=5m"
        )
        # Pulled from the registry, by containerd (the kubelet's pull, pullPolicy Always).
        assert set(manifest_requests(reg)) - pushed, "no pull from the registry"

        # The kubelet's file missing: the pod runs, imagepull succeeds without its series,
        # and the log names the file.
        token = reader_token(kube, TUNED_NS)
        url = f"http://{by_mode['node']['status']['podIP']}:9867/metrics"
        r = wait_for(
            f"{url} with the reader's token", lambda: (r := scrape(url, token)).ok and r, 60
        )
        assert collector_success(r.text).get("imagepull") == 1.0, collector_success(r.text)
        assert "kubescale_kubelet_serialize_image_pulls" not in r.text
        assert "kubescale_image_pulls_in_progress" in r.text
        wanted = f"kubelet config {missing}: No such file or directory"
        assert wait_for(
            "the log naming the file", lambda: wanted in pod_logs(kube, by_mode["node"]), 30
        )

        # The dashboards, as Grafana's sidecar lists them: by its label.
        cms = kube.get(
            f"/api/v1/namespaces/{TUNED_NS}/configmaps", labelSelector="grafana_dashboard=1"
        )["items"]
        assert len(cms) == len(list(helm.CHART.joinpath("dashboards").glob("*.json"))) >= 4
        for cm in cms:
            assert cm["metadata"]["annotations"]["grafana_folder"] == "Scale"
            [(name, text)] = cm["data"].items()
            assert json.loads(text)["uid"] == name.removesuffix(".json"), name
        monitors = kube.get(
            f"/apis/monitoring.coreos.com/v1/namespaces/{TUNED_NS}/servicemonitors"
        )["items"]
        assert monitors and all(m["spec"]["endpoints"][0]["interval"] == "1m" for m in monitors)

        helm.helm("uninstall", RELEASE, "--namespace", TUNED_NS, "--wait", kubeconfig=kc)
        assert wait_for(
            "nothing of the release left", lambda: ours(kube, TUNED_NS) == [] or None, 120, 2
        )
    finally:
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{READER}")
        helm.helm(
            "uninstall",
            RELEASE,
            "--namespace",
            TUNED_NS,
            "--ignore-not-found",
            kubeconfig=kc,
            check=False,
        )
        kube.delete(f"/api/v1/namespaces/{TUNED_NS}")
