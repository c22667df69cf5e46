"""Scenario 5: the node DaemonSet rolled to an image that cannot run, then the uninstall.

The new pod stays in ErrImagePull (no registry has the tag): its endpoint is not ready but
Prometheus' endpoints discovery still lists it, the scrape fails, and the targets-down
alert fires for the node job. `kubectl delete -k deploy/` then removes every object the
install created, and no exporter container is left on the node.
"""

import time

from .conftest import NS, REPO, TIMINGS, wait_for

APP = "app.kubernetes.io/name=kube-scale-exporter"


def test_broken_rollout_fires_targets_down(prom, kube):
    t = time.monotonic()
    assert not prom.firing("KubeScaleExporterTargetsDown")
    kube.kubectl(
        "-n",
        NS,
        "set",
        "image",
        "daemonset/kube-scale-exporter-node",
        "exporter=kube-scale-exporter:does-not-exist",
    )
    wait_for(
        "node target down",
        lambda: prom.value('up{job="kube-scale-exporter-node"}') == 0,
        timeout=120,
    )
    alert = wait_for(
        "KubeScaleExporterTargetsDown firing",
        lambda: prom.firing("KubeScaleExporterTargetsDown", job="kube-scale-exporter-node"),
        timeout=90,
    )
    assert alert
    # The cluster job is unaffected.
    assert prom.value('up{job="kube-scale-exporter-cluster"}') == 1
    TIMINGS["scenario_rollout"] = time.monotonic() - t


def test_delete_k_leaves_nothing(prom, kube, cluster):
    t = time.monotonic()
    kube.delete_kustomization(REPO / "deploy")
    wait_for(
        "namespace gone",
        lambda: kube.s.get(f"{kube.server}/api/v1/namespaces/{NS}", timeout=10).status_code == 404,
        timeout=120,
        interval=2,
    )
    left = []
    for path in (
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "/apis/monitoring.coreos.com/v1/servicemonitors",
        "/apis/monitoring.coreos.com/v1/prometheusrules",
        "/api/v1/pods",
        "/api/v1/services",
        "/api/v1/serviceaccounts",
        "/apis/apps/v1/daemonsets",
        "/apis/apps/v1/deployments",
    ):
        left += [
            f"{path}: {o['metadata']['name']}" for o in kube.get(path, labelSelector=APP)["items"]
        ]
    assert not left, left

    # Nor on the node: the kubelet has removed every exporter container.
    def no_containers():
        out = cluster.ctr("containers", "list").stdout
        return "kube-scale-exporter" not in out

    wait_for("no exporter container in containerd", no_containers, timeout=60, interval=2)
    TIMINGS["scenario_delete"] = time.monotonic() - t
