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

First, three pulls that finish: the third waits for one of the two slots, `queued` reads 1
while it waits and 0 once the first pull frees its slot, the third then downloading; then
the kubelet's own kubelet_image_pull_duration_seconds, read from its /metrics, against
the cluster exporter's histograms of the same pulls (tests/e2e/pull_histograms.py).
"""

import json
import time

from prometheus_client.parser import text_string_to_metric_families

from kube_scale_exporter.labels import sanitize
from kube_scale_exporter.pullfailures import parse_failed
from testbed import node

from . import pull_histograms as ph
from .conftest import NODE_METRICS, NODE_NAME, RATE, TIMINGS, metrics_text, wait_for

NS = "e2e-pull"
NS_FAILED = "e2e-pull-failed"
# Three layers an image, as containerd downloads three blobs at once (its default
# max_concurrent_downloads): the DaemonSet's ingest source tells two pulls apart by that.
LAYERS = 3
BIG = 600 * 1024 * 1024
MEDIUM = 270 * 1024 * 1024
NODE = '{job="kube-scale-exporter-node"}'


def pod(name, image, policy="Always"):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": image, "imagePullPolicy": policy}],
            "terminationGracePeriodSeconds": 0,
        },
    }


NS_SLOT = "e2e-pull-slot"
MIB = 1024 * 1024
# The first pull frees its slot while the long one still downloads; the third, as big as
# the first, then takes the slot. containerd 2.1's transfer service downloads 3 blobs at
# once for the whole daemon (one semaphore, max_concurrent_downloads): measured here, the
# long pull's layers start only once the first's are done, and the third's behind them.
FIRST = 150 * MIB
LONG = 3 * FIRST
THIRD = FIRST
POLL = 0.5  # seconds between reads of the node exporter


def least_seconds(nbytes):
    """The shortest time the throttle lets `nbytes` through containerd's 3 downloads at
    once (one connection a blob, each at RATE): one image alone, or several one after
    another."""
    return nbytes / (LAYERS * RATE)


def node_gauges():
    """(queued, in_progress) from one scrape of the node exporter."""
    wanted = ("kubescale_image_pulls_queued", "kubescale_image_pulls_in_progress")
    values = {
        f.name: f.samples[0].value
        for f in text_string_to_metric_families(metrics_text(NODE_METRICS))
        if f.name in wanted and f.samples
    }
    return tuple(values.get(name) for name in wanted)


def containerd_pulls():
    """(in progress, succeeded) from containerd's own CRI metrics: its in-progress gauge counts
    the pulls the kubelet has sent it, never one waiting in the kubelet's queue."""
    families = text_string_to_metric_families(
        metrics_text(f"http://{node.CONTAINERD_METRICS}/v1/metrics")
    )
    samples = {(s.name, s.labels.get("status")): s.value for f in families for s in f.samples}
    return (
        samples.get(("containerd_cri_sandboxed_in_progress_image_pulls_total", None)),
        samples.get(("containerd_cri_sandboxed_image_pulls_total", "success"), 0),
    )


def cluster_exporter_text(kube):
    cluster_pod = kube.pods(selector="app.kubernetes.io/component=cluster")[0]
    return metrics_text(f"http://{cluster_pod['status']['podIP']}:9867/metrics")


def test_queued_clears_when_a_slot_frees_and_the_kubelets_histogram_agrees(
    kube, deployed, pull_registry
):
    reg, proxy = pull_registry
    t = time.monotonic()
    sizes = {"first": FIRST, "long": LONG, "third": THIRD}
    for name, size in sizes.items():
        reg.push_image(f"slot-{name}", "1", [size // LAYERS] * LAYERS)
    kube.namespace(NS_SLOT)
    token = kube.cluster.admin_token
    kubelet_before = ph.histograms(ph.kubelet_metrics(token), ph.KUBELET, by=ph.SIZE_LABEL)
    ours_before = cluster_exporter_text(kube)
    _, containerd_succeeded_before = containerd_pulls()

    def start(name):
        # IfNotPresent: the image is new to the node, so pulled once; the container then
        # fails to be created (the image has no command) and its retries find it present.
        image = f"{proxy.host}/slot-{name}:1"
        kube.post(f"/api/v1/namespaces/{NS_SLOT}/pods", pod(name, image, "IfNotPresent"))

    try:
        start("first")
        wait_for("first pull downloading", lambda: node_gauges()[1] == 1, 90, POLL)
        start("long")
        wait_for("both slots downloading", lambda: node_gauges()[1] == 2, 60, POLL)
        start("third")
        wait_for("third pull queued", lambda: node_gauges()[0] == 1, 60, POLL)
        queued_at = time.monotonic()
        # containerd sees the two pulls the kubelet let through, and nothing of the third.
        assert containerd_pulls()[0] == 2
        assert not ph.pulls(kube, NS_SLOT), "a pull finished before the third was queued"
        # The first pull's slot frees; the third takes it. The first's bytes and at worst
        # the long one's before them pass containerd's 3 downloads at RATE each; twice
        # that for a loaded machine.
        seen = []

        def slot_freed():
            queued, in_progress = node_gauges()
            seen.append((round(time.monotonic() - queued_at, 1), queued, in_progress))
            return (queued, in_progress) if queued == 0 else None

        _, in_progress = wait_for(
            "queued back to 0", slot_freed, 2 * least_seconds(FIRST + LONG) + 30, POLL
        )
        finished = ph.pulls(kube, NS_SLOT)
        # In the same scrape: nothing waits for a kubelet slot, and two pulls are in
        # progress: the long one and the third, whose Pulled event has not come (its
        # ingest is open, its bytes wait for one of containerd's downloads). Before, the
        # third waited throughout: 1, or 2 for the moment between the first's last blob
        # and its pod showing the image present (the ingest source's estimate).
        assert in_progress == 2, seen
        assert "third" not in finished and "long" not in finished, (finished, seen)
        assert all(queued >= 1 for _, queued, _ in seen[:-1]), seen
        wait_for("first pull's Pulled event", lambda: "first" in ph.pulls(kube, NS_SLOT), 10)
        TIMINGS["imagepull_queued_seconds"] = time.monotonic() - queued_at
        TIMINGS["imagepull_queued_polls"] = seen

        def all_pulled():
            finished = ph.pulls(kube, NS_SLOT)
            return finished if len(finished) == len(sizes) else None

        done = wait_for(
            "three Pulled events",
            all_pulled,
            2 * least_seconds(LONG + THIRD) + 30,  # the rest of both, one after another
            POLL,
        )
        # Only the third waited for a kubelet slot (its wait for containerd's downloads
        # is inside its pull time, as the long one's).
        assert done["third"].waited > max(done["first"].waited, done["long"].waited), done
        # containerd counted the same three pulls, and has none in progress.
        assert containerd_pulls() == (0, containerd_succeeded_before + len(sizes))

        # Both histograms of the same three pulls. The kubelet observed each before it
        # sent the event; the cluster exporter counts once it has watched the events.
        def ours_counted():
            text = cluster_exporter_text(kube)
            moved = [
                ph.increase(ph.histograms(text, name), ph.histograms(ours_before, name))
                for name in (ph.OURS, ph.OURS_WAIT)
            ]
            return moved if all(m.get("", ph.EMPTY).count >= len(done) for m in moved) else None

        ours, ours_wait = wait_for("the cluster exporter counted them", ours_counted, 60, POLL)
        kubelet_after = ph.histograms(ph.kubelet_metrics(token), ph.KUBELET, by=ph.SIZE_LABEL)
        figures = ph.compare(
            ph.increase(kubelet_after, kubelet_before), ours[""], ours_wait[""], done.values()
        )
        figures["least_seconds"] = {name: least_seconds(size) for name, size in sizes.items()}
        TIMINGS["imagepull_histograms"] = json.dumps(figures)
    finally:
        kube.delete(f"/api/v1/namespaces/{NS_SLOT}")
    wait_for(
        "namespace gone",
        lambda: (
            kube.s.get(f"{kube.server}/api/v1/namespaces/{NS_SLOT}", timeout=10).status_code == 404
        ),
        timeout=120,
        interval=2,
    )
    wait_for("nothing queued or downloading", lambda: node_gauges() == (0, 0), 60, POLL)
    TIMINGS["scenario_imagepull_slot"] = time.monotonic() - t


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
