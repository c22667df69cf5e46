"""Scenario 2: image pulls waiting for a slot on the real kubelet 1.34 (serializeImagePulls:
false, maxParallelImagePulls: 2, testbed/node.py), then a pull frozen mid-download; and a
failed pull as the kubelet reports it.

A local registry (Debian's docker-registry) behind a throttling proxy serves images of
fresh random bytes, three layers each. The DaemonSet reads containerd's ingest directory
(deploy/'s default source, no socket). Pods A (big) and B (medium) take both pull slots; pod C (small) waits:
`queued` = 1 and the backlog alert (threshold 1 through the mixin's _config). When B's pull
ends C gets its slot and `queued` clears. Then the proxy is frozen (SIGSTOP): no byte
arrives, and after the exporter's default --image-pull.stall-after (2m) `stalled` = 1 and
its alert fires, the pull still in progress (containerd 2.1 would cancel it after its
image_pull_progress_timeout, 5m). Pulls go through containerd 2.1's transfer service.
"""

import time


from prometheus_client.parser import text_string_to_metric_families

from kube_scale_exporter.labels import sanitize
from kube_scale_exporter.pullfailures import parse_failed
from testbed.node import NODE_IP

from .conftest import NODE_NAME, TIMINGS, wait_for

NS = "e2e-pull"
NS_FAILED = "e2e-pull-failed"
# Three layers an image, as containerd downloads three blobs at once (its default
# max_concurrent_downloads): the DaemonSet's ingest source tells two pulls apart by that.
LAYERS = 3
BIG = 1800 * 1024 * 1024
# Long enough at conftest.RATE a layer (about 45 s) for the backlog alert's 15 s `for:` while C waits.
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


EVENTS_JOB = '{job="kube-scale-exporter-cluster"}'


def pull_histogram_from_prometheus(prom):
    """(count, sum) of our pull-time histogram, from the Pulled events."""
    return (
        prom.value(f"sum(kubescale_image_pull_duration_seconds_count{EVENTS_JOB})"),
        prom.value(f"sum(kubescale_image_pull_duration_seconds_sum{EVENTS_JOB})"),
    )


def kubelet_pull_histogram(cluster):
    """(count, sum) of the kubelet's own kubelet_image_pull_duration_seconds (all sizes),
    read from its /metrics (its serving certificate is self-signed: not verified)."""
    r = cluster.session().get(f"https://{NODE_IP}:10250/metrics", verify=False, timeout=10)
    r.raise_for_status()
    found = {"_count": 0.0, "_sum": 0.0}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            for suffix in found:
                if sample.name == "kubelet_image_pull_duration_seconds" + suffix:
                    found[suffix] += sample.value
    return found["_count"], found["_sum"]


def test_third_pull_waits_for_a_slot_then_clears_then_stalls(prom, kube, cluster, pull_registry):
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
        # The medium pull ends, the small one takes its slot: nothing waits any more.
        wait_for(
            # Its download, then its unpack, then the small pull: minutes on a loaded machine.
            "queued cleared",
            lambda: prom.value(queued) == 0,
            timeout=300,
        )
        # The big pull goes on (still downloading when it is frozen below).
        assert prom.value(in_progress) >= 1
        # The kubelet's own pull histogram beside ours (from its Pulled events), printed
        # with the timings: docs/imagepull.md says what each measures.
        kubelets = kubelet_pull_histogram(cluster)
        ours = pull_histogram_from_prometheus(prom)
        TIMINGS["pulls_kubelet_vs_events"] = {"kubelet": kubelets, "events": ours}
        downloaded = prom.value(f"kubescale_image_pull_downloaded_bytes{NODE}")
        assert 0 < downloaded < BIG, downloaded
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
        # The pull is still in progress.
        assert prom.value(in_progress) >= 1
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
