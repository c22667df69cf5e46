"""Queued pulls from pods in a real kube-apiserver, with a real containerd and registry;
the kubelet's pull settings from a test kubelet config file.

No kubelet runs: the test binds pods to the node (spec.nodeName) and writes their
container statuses itself, as the kubelet would while it waits for images.
"""

import time
import uuid

import pytest

from kube_scale_exporter.collectors.imagepull import ImagePullCollector
from kube_scale_exporter.cli import make_scraper
from testbed.kube_apiserver import pod_manifest
from testbed.metrics import collect, sample

pytestmark = pytest.mark.integration

NODE = "node-a"
MiB = 1 << 20


def add_pod(
    api, ns, name, image, reason="ContainerCreating", node=NODE, init_image=None, message=None
):
    """A pod bound to `node` whose container waits with `reason` (as the kubelet reports)."""
    body = pod_manifest(name, node=node)
    body["spec"]["containers"][0]["image"] = image
    statuses = {"containerStatuses": [waiting_status("pause", image, reason, message)]}
    if init_image:
        body["spec"]["initContainers"] = [{"name": "init", "image": init_image}]
        statuses = {
            "initContainerStatuses": [waiting_status("init", init_image, "ContainerCreating")],
            "containerStatuses": [waiting_status("pause", image, "PodInitializing")],
        }
    base = f"/api/v1/namespaces/{ns}/pods"
    api.admin.create(base, body)
    api.admin.merge_patch(
        f"{base}/{name}/status",
        {
            "status": {
                "phase": "Pending",
                "startTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                **statuses,
            }
        },
    )


def waiting_status(name, image, reason, message=None):
    waiting = {"reason": reason} if message is None else {"reason": reason, "message": message}
    return {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"waiting": waiting},
    }


def three_images(containerd, registry, proxy):
    """(tag, present, slow, absent): an image containerd has, one pushed behind the
    throttling proxy (24 MiB: seconds to pull) and one never pushed."""
    tag = uuid.uuid4().hex[:8]
    present = f"{registry.host}/present-{tag}:v1"
    registry.push_image(f"present-{tag}", "v1", [MiB])
    containerd.ctr("content", "fetch", "--plain-http", present)
    registry.push_image(f"slow-{tag}", "v1", [24 * MiB])
    return tag, present, f"{proxy.host}/slow-{tag}:v1", f"{registry.host}/absent-{tag}:v1"


def scrape_until(c, name, want, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        families = collect(c)
        try:
            got = sample(families, name)
        except KeyError:
            got = None
        if got == want:
            return families
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} is {got}, not {want}, after {timeout}s")
        time.sleep(0.2)


def test_queued_counts_images_neither_present_nor_downloading(
    apiserver,
    namespace,
    containerd,
    registry,
    proxy,
    make_collector,
    workdir,
    tmp_path,
    kubeconfig_for,
):
    tag, present, slow, absent = three_images(containerd, registry, proxy)

    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
    c = make_collector(
        containerd.address,
        "--kube.kubeconfig",
        kubeconfig_for("imagepull", ImagePullCollector.needs_in("node").rbac_rules),
        "--kube.node-name",
        NODE,
        "--kubelet.config-file",
        str(kubelet),
    )

    scrape_until(c, "kubescale_image_pulls_queued", 0)
    add_pod(apiserver, namespace, "has-image", present)
    add_pod(apiserver, namespace, "needs-absent", absent)
    add_pod(apiserver, namespace, "needs-absent-too", absent)
    add_pod(apiserver, namespace, "other-node", f"{registry.host}/elsewhere:v1", node="node-b")
    add_pod(apiserver, namespace, "behind-init", f"{registry.host}/later:v1", init_image=present)
    add_pod(apiserver, namespace, "needs-slow", slow)
    # Two pods want one absent image; the slow image waits for its turn too.
    families = scrape_until(c, "kubescale_image_pulls_queued", 2)
    assert sample(families, "kubescale_kubelet_serialize_image_pulls") == 1
    assert sample(families, "kubescale_image_pull_oldest_seconds") >= 0
    assert (
        sample(make_scraper([c]).scrape(10).families, "kubescale_kube_watch_up", resource="pods")
        == 1
    )
    # Nothing downloads yet: no pull to wait behind.
    assert not [f for f in c.advise(c.observe()) if f.severity == "warning"]

    fetch = containerd.fetch(slow, f"{workdir}/slow-{tag}.log")
    try:
        # Downloading now: no longer queued, counted in progress.
        families = scrape_until(c, "kubescale_image_pulls_queued", 1)
        assert sample(families, "kubescale_image_pulls_in_progress") == 1
        advice = [f for f in c.advise(c.observe()) if f.severity == "warning"]
        assert advice and "1 image(s) wait for a pull slot behind 1 pull(s)" in advice[0].summary
        assert "serializeImagePulls: false" in advice[0].advice
        assert fetch.popen.wait(60) == 0, fetch.log_tail()
    finally:
        fetch.stop()
    families = scrape_until(c, "kubescale_image_pulls_queued", 1)  # present now
    assert sample(families, "kubescale_image_pulls_in_progress") == 0

    for name in ("needs-absent", "needs-absent-too"):
        apiserver.admin.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
    scrape_until(c, "kubescale_image_pulls_queued", 0)

    kubelet.write_text("serializeImagePulls: false\nmaxParallelImagePulls: 4\n")
    families = scrape_until(c, "kubescale_kubelet_serialize_image_pulls", 0)
    assert sample(families, "kubescale_kubelet_max_parallel_image_pulls") == 4


# Waiting states as a kubelet writes them for pulls that failed or will never happen
# (kubelet 1.20's pkg/kubelet/images and kuberuntime messages).
FAILED_STATES = [
    (
        "ErrImagePull",
        "rpc error: code = NotFound desc = failed to pull and unpack image "
        '"{image}": failed to resolve reference "{image}": {image}: not found',
    ),
    ("ImagePullBackOff", 'Back-off pulling image "{image}"'),
    ("ErrImageNeverPull", 'Container image "{image}" is not present with pull policy of Never'),
    (
        "InvalidImageName",
        'Failed to apply default image tag "{image}": couldn\'t parse image '
        'reference "{image}": invalid reference format',
    ),
    ("RegistryUnavailable", None),
    ("SignatureValidationFailed", None),
]


def test_pulls_in_back_off_or_failed_are_not_queued(
    apiserver, namespace, containerd, registry, make_collector, kubeconfig_for
):
    tag = uuid.uuid4().hex[:8]
    node = f"node-{tag}"  # its own node: other tests' pods wait for their own containerd
    c = make_collector(
        containerd.address,
        "--kube.kubeconfig",
        kubeconfig_for("imagepull", ImagePullCollector.needs_in("node").rbac_rules),
        "--kube.node-name",
        node,
    )
    scrape_until(c, "kubescale_image_pulls_queued", 0)
    for i, (reason, message) in enumerate(FAILED_STATES):
        image = f"{registry.host}/failed-{tag}-{i}:v1"
        add_pod(
            apiserver,
            namespace,
            f"failed-{i}",
            image,
            reason=reason,
            node=node,
            message=message and message.format(image=image),
        )
    # One container really waits for a slot, for an image another pod's pull failed on:
    # the image is queued once (for the waiter) and failing once (for the failed one).
    add_pod(apiserver, namespace, "waiter", f"{registry.host}/failed-{tag}-0:v1", node=node)
    families = scrape_until(c, "kubescale_image_pulls_failing", len(FAILED_STATES))
    assert sample(families, "kubescale_image_pulls_queued") == 1
    apiserver.admin.delete(f"/api/v1/namespaces/{namespace}/pods/waiter")
    families = scrape_until(c, "kubescale_image_pulls_queued", 0)
    assert sample(families, "kubescale_image_pulls_failing") == len(FAILED_STATES)
    # Back-off over: the kubelet pulls again and reports ContainerCreating.
    base = f"/api/v1/namespaces/{namespace}/pods"
    image = f"{registry.host}/failed-{tag}-1:v1"
    apiserver.admin.merge_patch(
        f"{base}/failed-1/status",
        {"status": {"containerStatuses": [waiting_status("pause", image, "ContainerCreating")]}},
    )
    families = scrape_until(c, "kubescale_image_pulls_queued", 1)
    assert sample(families, "kubescale_image_pulls_failing") == len(FAILED_STATES) - 1


def running_status(name, image, image_id):
    return {
        "name": name,
        "image": image,
        "imageID": image_id,
        "ready": True,
        "restartCount": 0,
        "state": {"running": {"startedAt": "2027-01-01T00:00:00Z"}},
    }


def test_both_sources_queue_the_same_images(
    apiserver, namespace, containerd, registry, proxy, make_collector, workdir, kubeconfig_for
):
    """The same pods and pulls seen from the socket and from the ingest directory. The
    ingest source knows an image is present from a container created from it, as the
    kubelet reports it: so the pod using the present image runs here, with its imageID."""
    tag, present, slow, absent = three_images(containerd, registry, proxy)
    node = f"node-{tag}"
    api = kubeconfig_for("imagepull", ImagePullCollector.needs_in("node").rbac_rules)
    common = ("--kube.kubeconfig", api, "--kube.node-name", node)
    socket = make_collector(containerd.address, *common)
    ingest_dir = f"{containerd.workdir}/root/io.containerd.content.v1.content/ingest"
    ingest = make_collector(
        containerd.address,
        "--image-pull.source=ingest",
        "--containerd.ingest-dir",
        ingest_dir,
        *common,
    )
    for c in (socket, ingest):
        scrape_until(c, "kubescale_image_pulls_queued", 0)
    base = f"/api/v1/namespaces/{namespace}/pods"
    add_pod(apiserver, namespace, "uses-present", present, node=node)
    apiserver.admin.merge_patch(
        f"{base}/uses-present/status",
        {
            "status": {
                "phase": "Running",
                "containerStatuses": [running_status("pause", present, f"sha256:{tag:0>64}")],
            }
        },
    )
    add_pod(apiserver, namespace, "needs-absent", absent, node=node)
    add_pod(apiserver, namespace, "needs-absent-too", absent, node=node)
    add_pod(apiserver, namespace, "needs-slow", slow, node=node)
    for c in (socket, ingest):
        scrape_until(c, "kubescale_image_pulls_queued", 2)  # absent and slow, not present

    fetch = containerd.fetch(slow, f"{workdir}/slow-{tag}.log")
    try:
        for c in (socket, ingest):
            families = scrape_until(c, "kubescale_image_pulls_queued", 1)
            assert sample(families, "kubescale_image_pulls_in_progress") == 1
        assert fetch.popen.wait(60) == 0, fetch.log_tail()
    finally:
        fetch.stop()
    # The kubelet starts the container once its image is in.
    apiserver.admin.merge_patch(
        f"{base}/needs-slow/status",
        {
            "status": {
                "phase": "Running",
                "containerStatuses": [running_status("pause", slow, f"sha256:{tag:1>64}")],
            }
        },
    )
    for c in (socket, ingest):
        families = scrape_until(c, "kubescale_image_pulls_queued", 1)  # absent still
        assert sample(families, "kubescale_image_pulls_in_progress") == 0
