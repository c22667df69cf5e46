"""Scenario 2: image pulls queued behind a big one on the real kubelet (serializeImagePulls:
true), then the big one frozen mid-download; and a failed pull as the kubelet reports it.

A local registry (Debian's docker-registry) behind a throttling proxy serves a big image of
fresh random bytes. Pod A needs it; pod B needs a small image and waits in the kubelet's
serial pull queue: `queued` = 1 and the backlog alert (threshold 1 through the mixin's
_config). Then the proxy is frozen (SIGSTOP): no byte arrives, and after the exporter's
default --image-pull.stall-after (2m) `stalled` = 1 and its alert fires, the pull still in
progress. (containerd 1.6, the cluster's, has no image_pull_progress_timeout at all: 1.7 and
2.x cancel a pull without progress after 5m; 1.6 and kubelet 1.20 wait for ever.)
"""

import time

import pytest

from kube_scale_exporter.labels import sanitize
from kube_scale_exporter.pullfailures import parse_failed
from testbed.registry_server import RegistryServer
from testbed.throttle_proxy import ThrottleProxy

from .conftest import NODE_NAME, TIMINGS, wait_for

NS = "e2e-pull"
NS_FAILED = "e2e-pull-failed"
BIG = 300 * 1024 * 1024
RATE = 2 * 1024 * 1024
NODE = '{job="kube-scale-exporter-node"}'


def pod(name, image):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": image, "imagePullPolicy": "Always"}],
            "terminationGracePeriodSeconds": 0,
        },
    }


@pytest.fixture
def registry(tmp_path, cluster):
    reg = RegistryServer(tmp_path / "registry").start()
    proxy = ThrottleProxy(tmp_path, reg.port, RATE)
    cluster.add_registry(proxy.host, f"http://{proxy.host}")
    yield reg, proxy
    proxy.proc.resume()
    proxy.stop()
    reg.stop()


def test_queued_behind_big_pull_then_stalled(prom, kube, registry):
    reg, proxy = registry
    t = time.monotonic()
    reg.push_image("big", "1", [BIG])
    reg.push_image("small", "1", [64 * 1024])
    kube.namespace(NS)
    try:
        kube.post(f"/api/v1/namespaces/{NS}/pods", pod("big", f"{proxy.host}/big:1"))
        wait_for(
            "big image downloading",
            lambda: prom.value(f"kubescale_image_pulls_in_progress{NODE}") == 1,
            timeout=90,
        )
        kube.post(f"/api/v1/namespaces/{NS}/pods", pod("small", f"{proxy.host}/small:1"))
        # The real kubelet holds the second pull in its serial queue.
        wait_for(
            "queued = 1", lambda: prom.value(f"kubescale_image_pulls_queued{NODE}") == 1, timeout=60
        )
        assert prom.value(f"kubescale_kubelet_serialize_image_pulls{NODE}") == 1
        alert = wait_for(
            "KubeScaleImagePullBacklog firing",
            lambda: prom.firing("KubeScaleImagePullBacklog"),
            timeout=60,
        )
        assert alert[0]["labels"]["node"] == NODE_NAME
        alert = wait_for(
            "KubeScaleImagePullsSerializedWithBacklog firing",
            lambda: prom.firing("KubeScaleImagePullsSerializedWithBacklog"),
            timeout=60,
        )
        downloaded = prom.value(f"kubescale_image_pull_downloaded_bytes{NODE}")
        assert 0 < downloaded < BIG, downloaded
        TIMINGS["scenario_imagepull_queued"] = time.monotonic() - t
        # Freeze the download: the ingest stops growing; stalled after --image-pull.stall-after.
        proxy.proc.pause()
        frozen = time.monotonic()
        wait_for(
            "stalled = 1",
            lambda: prom.value(f"kubescale_image_pull_stalled{NODE}") == 1,
            timeout=200,
            interval=2,
        )
        stalled_after = time.monotonic() - frozen
        wait_for(
            "KubeScaleImagePullStalled firing",
            lambda: prom.firing("KubeScaleImagePullStalled"),
            timeout=60,
        )
        # The pull is still in progress, and pod B still queued behind it.
        assert prom.value(f"kubescale_image_pulls_in_progress{NODE}") == 1
        assert prom.value(f"kubescale_image_pulls_queued{NODE}") == 1
        TIMINGS["imagepull_stalled_after"] = stalled_after
    finally:
        kube.delete(f"/api/v1/namespaces/{NS}")
        proxy.proc.resume()
    wait_for(
        "namespace gone",
        lambda: kube.s.get(f"{kube.server}/api/v1/namespaces/{NS}", timeout=10).status_code == 404,
        timeout=120,
        interval=2,
    )
    TIMINGS["scenario_imagepull"] = time.monotonic() - t


def test_a_missing_tag_is_counted_from_the_real_kubelets_failed_events(prom, kube, registry):
    """The kubelet's own wording of a failed pull (its Failed event), classified by the
    cluster Deployment: a tag the local registry does not have is not_found, by registry."""
    _, proxy = registry
    kube.namespace(NS_FAILED)
    try:
        kube.post(f"/api/v1/namespaces/{NS_FAILED}/pods", pod("missing", f"{proxy.host}/app:nope"))
        failed = wait_for(
            "the kubelet's Failed event",
            lambda: [
                e["message"]
                for e in kube.get(f"/api/v1/namespaces/{NS_FAILED}/events")["items"]
                if e["reason"] == "Failed" and e["message"].startswith("Failed to pull image")
            ],
            timeout=90,
            interval=2,
        )
        registry_label = sanitize(proxy.host)
        assert parse_failed(failed[0]) == (registry_label, "not_found"), failed[0]
        labels = f'job="kube-scale-exporter-cluster",registry="{registry_label}"'
        wait_for(
            "the failure counted by registry and reason",
            lambda: (
                (
                    prom.value(
                        f'sum(kubescale_image_pull_failures_total{{{labels},reason="not_found"}})'
                    )
                    or 0
                )
                >= 1
            ),
            timeout=90,
        )
        assert not prom.query(
            f'kubescale_image_pull_failures_total{{{labels},reason!="not_found"}} > 0'
        )
    finally:
        kube.delete(f"/api/v1/namespaces/{NS_FAILED}")
    wait_for(
        "namespace gone",
        lambda: (
            kube.s.get(f"{kube.server}/api/v1/namespaces/{NS_FAILED}", timeout=10).status_code
            == 404
        ),
        timeout=120,
        interval=2,
    )
