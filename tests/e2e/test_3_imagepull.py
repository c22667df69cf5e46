"""Scenario 2: image pulls waiting for a slot on the real kubelet 1.34 (serializeImagePulls:
false, maxParallelImagePulls: 2, testbed/node.py), then a pull frozen mid-download; and a
failed pull as the kubelet reports it.

A local registry (Debian's docker-registry) behind a throttling proxy serves images of
fresh random bytes, three layers each. The DaemonSet reads containerd's ingest directory
(deploy/'s default source, no socket). Pods A (big) and B (medium) take both pull slots; pod C (small) waits:
`queued` = 1 and the backlog alert (threshold 1 through the mixin's _config). Then the
proxy is frozen (SIGSTOP): no byte arrives, and after the exporter's default
--image-pull.stall-after (2m) `stalled` and its alert fire, the pulls still in progress
and C still queued (containerd 2.1 would cancel them after its
image_pull_progress_timeout, 5m); with C's pod gone nothing is queued. Pulls go through containerd 2.1's transfer service.
"""

import time


from kube_scale_exporter.labels import sanitize
from kube_scale_exporter.pullfailures import parse_failed

from .conftest import NODE_NAME, TIMINGS, wait_for

NS = "e2e-pull"
NS_FAILED = "e2e-pull-failed"
# Three layers an image, as containerd downloads three blobs at once (its default
# max_concurrent_downloads): the DaemonSet's ingest source tells two pulls apart by that.
LAYERS = 3
BIG = 600 * 1024 * 1024
MEDIUM = 270 * 1024 * 1024
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


def test_third_pull_waits_for_a_slot_then_both_stall(prom, kube, pull_registry):
    reg, proxy = pull_registry
    t = time.monotonic()
    reg.push_image("big", "1", [BIG // LAYERS] * LAYERS)
    reg.push_image("medium", "1", [MEDIUM // LAYERS] * LAYERS)
    reg.push_image("small", "1", [64 * 1024])
    kube.namespace(NS)
    in_progress = f"kubescale_image_pulls_in_progress{NODE}"
    queued = f"kubescale_image_pulls_queued{NODE}"
    try:
        assert prom.value(f"kubescale_kubelet_serialize_image_pulls{NODE}") == 0
        assert prom.value(f"kubescale_kubelet_max_parallel_image_pulls{NODE}") == 2
        kube.post(f"/api/v1/namespaces/{NS}/pods", pod("big", f"{proxy.host}/big:1"))
        wait_for("big image downloading", lambda: prom.value(in_progress) == 1, timeout=90)
        kube.post(f"/api/v1/namespaces/{NS}/pods", pod("medium", f"{proxy.host}/medium:1"))
        wait_for("both slots downloading", lambda: prom.value(in_progress) == 2, timeout=60)
        kube.post(f"/api/v1/namespaces/{NS}/pods", pod("small", f"{proxy.host}/small:1"))
        # The real kubelet holds the third pull until a slot frees.
        wait_for("queued = 1", lambda: prom.value(queued) == 1, timeout=60)
        alert = wait_for(
            "KubeScaleImagePullBacklog firing",
            lambda: prom.firing("KubeScaleImagePullBacklog"),
            timeout=60,
        )
        assert alert[0]["labels"]["node"] == NODE_NAME
        # Parallel pulls: the serialized-backlog alert is not this node's problem.
        assert not prom.alerts("KubeScaleImagePullsSerializedWithBacklog")
        TIMINGS["scenario_imagepull_queued"] = time.monotonic() - t
        downloaded = prom.value(f"kubescale_image_pull_downloaded_bytes{NODE}")
        assert 0 < downloaded < BIG, downloaded
        # Freeze both downloads: their ingests stop growing; stalled after
        # --image-pull.stall-after, the third pull still waiting behind them.
        proxy.proc.pause()
        frozen = time.monotonic()
        wait_for(
            "stalled",
            lambda: (prom.value(f"kubescale_image_pull_stalled{NODE}") or 0) >= 1,
            timeout=200,
            interval=2,
        )
        stalled_after = time.monotonic() - frozen
        wait_for(
            "KubeScaleImagePullStalled firing",
            lambda: prom.firing("KubeScaleImagePullStalled"),
            timeout=60,
        )
        # The pulls are still in progress, the third still queued.
        assert prom.value(in_progress) >= 1
        assert prom.value(queued) == 1
        TIMINGS["imagepull_stalled_after"] = stalled_after
    finally:
        kube.delete(f"/api/v1/namespaces/{NS}")
        proxy.proc.resume()
    # The waiting pod gone, nothing is queued any more.
    wait_for("queued cleared", lambda: prom.value(queued) == 0, timeout=120)
    wait_for(
        "namespace gone",
        lambda: kube.s.get(f"{kube.server}/api/v1/namespaces/{NS}", timeout=10).status_code == 404,
        timeout=120,
        interval=2,
    )
    TIMINGS["scenario_imagepull"] = time.monotonic() - t


def test_a_missing_tag_is_counted_from_the_real_kubelets_failed_events(prom, kube, pull_registry):
    """The kubelet's own wording of a failed pull (its Failed event), classified by the
    cluster Deployment: a tag the local registry does not have is not_found, by registry."""
    _, proxy = pull_registry
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
