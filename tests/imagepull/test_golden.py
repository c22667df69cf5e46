"""Golden exposition of the imagepull collector from fixed containerd, pod and kubelet input."""

from datetime import UTC, datetime

import pytest

from kube_scale_exporter.collectors.imagepull.advice import advise
from kube_scale_exporter.collectors.imagepull.kubelet import KubeletPullSettings
from kube_scale_exporter.collectors.imagepull.pods import images_failing, images_wanted
from kube_scale_exporter.collectors.imagepull.state import combine, families
from kube_scale_exporter.containerd.client import ContentInfo, Ingest
from kube_scale_exporter.containerd.config import PullSettings
from kube_scale_exporter.containerd.hostsdir import DEFAULT_CONFIG_PATH, HostDirs, RegistryDir
from kube_scale_exporter.containerd.pulls import ManifestIndex, group
from kube_scale_exporter.containerd.reference import parse
from testbed.golden import assert_golden, series_count

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
GiB = 1 << 30
BIG = "sha256:" + "b" * 64
SMALL = "sha256:" + "5" * 64
BIG_L0, BIG_L1 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
STALE = "sha256:" + "3" * 64
EARLY = "sha256:" + "e" * 64


def info(digest, created, sources, layers):
    labels = {f"containerd.io/gc.ref.content.l.{i}": d for i, d in enumerate(layers)}
    labels["containerd.io/gc.ref.content.config"] = "sha256:" + digest[-1] * 64
    labels.update({f"containerd.io/distribution.source.{h}": r for h, r in sources})
    return ContentInfo(digest, 1000, created, labels)


INGESTS = [
    # A 17 GiB image: two layers moving, started 30 minutes ago.
    Ingest(f"layer-{BIG_L0}", 9 * GiB, 12 * GiB, NOW - 1800, NOW - 1),
    Ingest(f"layer-{BIG_L1}", 3 * GiB, 5 * GiB, NOW - 1790, NOW - 2),
    # A killed client's layer: no byte for 10 minutes.
    Ingest(f"layer-{STALE}", 100 << 20, 400 << 20, NOW - 900, NOW - 600),
    # A pull whose manifest is still being fetched: no manifest claims it yet.
    Ingest(f"manifest-{EARLY}", 0, 2000, NOW - 1, NOW - 1),
    # Not a pull (a hand-made ingest): ignored.
    Ingest("my-upload", 5, 10, NOW - 5000, NOW - 5000),
]
MANIFESTS = [
    info(BIG, NOW - 1805, [("registry.example", "team/big")], [BIG_L0, BIG_L1]),
    info(SMALL, NOW - 905, [("docker.io", "library/redis")], [STALE]),
]


def pod(
    name,
    containers,
    statuses=None,
    phase="Pending",
    start="2027-01-15T07:20:00Z",
    init=(),
    init_statuses=None,
):
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "creationTimestamp": "2027-01-15T07:10:00Z",
        },
        "spec": {
            "initContainers": [{"name": n, "image": i} for n, i in init],
            "containers": [{"name": n, "image": i} for n, i in containers],
        },
        "status": {
            "phase": phase,
            "startTime": start,
            "initContainerStatuses": init_statuses or [],
            "containerStatuses": statuses or [],
        },
    }


def waiting(name, reason):
    return {"name": name, "state": {"waiting": {"reason": reason}}}


PODS = [
    # Waits for the big image, which is downloading: not queued. It has waited longest
    # (since 2027-01-15T07:00:00Z = NOW - 3600), so the oldest unfinished pull is its.
    pod(
        "trainer",
        [("main", "registry.example:5000/team/big:v3")],
        [waiting("main", "ContainerCreating")],
        start="2027-01-15T07:00:00Z",
    ),
    # Waits behind it for two images neither present nor downloading: queued.
    pod(
        "web",
        [("nginx", "nginx:1.25"), ("sidecar", "quay.io/org/proxy:2")],
        [waiting("nginx", "ContainerCreating"), waiting("sidecar", "ContainerCreating")],
    ),
    # Pulls that failed or back off wait for no slot: failing, not queued. The same image
    # twice counts once; a typo'd reference counts as written.
    pod(
        "typo",
        [("a", "docker.io/library/ngnix:1.25"), ("b", "ngnix:1.25"), ("c", "Bad Name")],
        [
            waiting("a", "ImagePullBackOff"),
            waiting("b", "ErrImagePull"),
            waiting("c", "InvalidImageName"),
        ],
    ),
    # Just bound to the node, no status yet; wants an image that is present.
    pod("fresh", [("c", "busybox")], None, start=None),
    # Its init container pulls; the main container waits for it, not for a pull.
    pod(
        "init",
        [("main", "ghcr.io/x/app:1")],
        [waiting("main", "PodInitializing")],
        init=[("setup", "nginx:1.25")],
        init_statuses=[waiting("setup", "ContainerCreating")],
    ),
    # Running or finished pods need nothing.
    pod(
        "running",
        [("c", "ghcr.io/x/other:1")],
        [{"name": "c", "state": {"running": {}}}],
        phase="Running",
    ),
    pod(
        "done", [("c", "ghcr.io/x/done:1")], [waiting("c", "ContainerCreating")], phase="Succeeded"
    ),
]
PRESENT = {"docker.io/library/busybox:latest", "registry.k8s.io/pause:3.9", "sha256:" + "9" * 64}
PRELOAD = [parse("registry.k8s.io/pause:3.9"), parse("nvcr.io/nvidia/cuda:12.4.0")]


CONTAINERD = PullSettings(
    max_concurrent_downloads=3,
    progress_timeout=300.0,
    downloads_key="plugins.'io.containerd.transfer.v1.local'.max_concurrent_downloads",
    transfer=True,
    files=("/etc/containerd/config.toml",),
    pull_path="transfer",
    pull_reason="default",
    config_path=DEFAULT_CONFIG_PATH,
    config_path_set_by="default",
    major=2,
    config_version=4,
)
# containerd 2.4 with a stock config (config_path unset: 2.2+'s default list) and Spegel's
# mirrors for two registries in /etc/containerd/certs.d: the transfer service ignores both.
SPEGEL = {
    "mirrors": 2,
    "writer": "spegel",
    "verdict": "ignored",
    "reason": "transfer_path_colon_list",
}
HOST_DIRS = HostDirs(
    DEFAULT_CONFIG_PATH,
    "default",
    ("/etc/containerd/certs.d", "/etc/docker/certs.d"),
    [
        RegistryDir("/etc/containerd/certs.d", "docker.io", "docker.io", **SPEGEL),
        RegistryDir("/etc/containerd/certs.d", "ghcr.io", "ghcr.io", **SPEGEL),
    ],
)


# The kubelet's defaults for pull slots; its re-verification allowlist covers both images
# this node should have baked in (tests/imagepull/test_kubelet_verification.py reads it).
KUBELET = KubeletPullSettings(
    serialize=True,
    max_parallel=1,
    verification_policy="NeverVerifyAllowlistedImages",
    allowlist=("registry.k8s.io/pause", "nvcr.io/nvidia/*"),
    policy_set=True,
)


def state():
    owners = ManifestIndex(lambda: MANIFESTS).lookup({i.digest for i in INGESTS if i.digest})
    return combine(
        NOW,
        120.0,
        group(INGESTS, owners),
        PRESENT,
        images_wanted(PODS),
        KUBELET,
        PRELOAD,
        failing=images_failing(PODS),
        containerd=CONTAINERD,
        containerd_major=(2, "config"),
        host_dirs=HOST_DIRS,
    )


def test_golden_exposition():
    assert datetime.fromtimestamp(NOW - 3600, UTC).isoformat() == "2027-01-15T07:00:00+00:00"
    text = assert_golden("imagepull", families(state()))
    assert series_count(text) == 21
    assert (
        'kubescale_containerd_registry_mirror_hosts{reason="transfer_path_colon_list",'
        'registry="docker.io",root="/etc/containerd/certs.d",upstream_last="true",'
        'verdict="ignored",writer="spegel"} 2.0'
    ) in text
    assert 'verification_policy{policy="NeverVerifyAllowlistedImages"} 1.0' in text


def test_golden_input_reads_as_documented():
    s = state()
    assert [p.key for p in s.pulls] == [SMALL, BIG, EARLY]  # by key
    assert [r.name for r, _ in s.queued] == ["docker.io/library/nginx:1.25", "quay.io/org/proxy:2"]
    assert [p.key for p in s.stalled] == [SMALL]
    assert s.oldest_seconds == 3600
    assert s.preload_missing == ["nvcr.io/nvidia/cuda:12.4.0"]
    assert s.failing == 2


def test_findings_advise_parallel_pulls_for_a_serialized_backlog():
    advice = advise(state())
    warnings = [f for f in advice if f.severity == "warning"]
    assert [f.summary.split(" ")[0] for f in warnings] == [
        "serializeImagePulls",
        "1",
        "/etc/containerd/certs.d/docker.io:",
        "/etc/containerd/certs.d/ghcr.io:",
        "1",
    ]
    serialized = warnings[0]
    assert "2 image(s) wait for a pull slot behind 3 pull(s)" in serialized.summary
    assert "serializeImagePulls: false" in serialized.advice
    assert "maxParallelImagePulls" in serialized.advice
    assert "nvcr.io/nvidia/cuda:12.4.0" in warnings[4].advice
    mirror = warnings[2]
    assert mirror.summary == (
        "/etc/containerd/certs.d/docker.io: 2 mirror(s), written by spegel, that containerd "
        "ignores (transfer_path_colon_list)"
    )
    assert "[plugins.'io.containerd.cri.v1.images'.registry]\n" in mirror.advice
    assert 'config_path = "/etc/containerd/certs.d"' in mirror.advice
    assert "use_local_image_pull = true" in mirror.advice
    assert "since 2.2 containerd's built-in default" in mirror.advice


def test_no_serialized_backlog_warning_without_a_pull_in_progress():
    s = state()
    idle = combine(
        NOW,
        120.0,
        [],
        PRESENT,
        images_wanted(PODS),
        KubeletPullSettings(serialize=True, max_parallel=1),
        [],
    )
    assert s.queued and idle.queued and not idle.pulls
    summaries = [f.summary for f in advise(idle)]
    assert not any(f.severity == "warning" for f in advise(idle)), summaries
    assert any("neither present nor downloading" in m for m in summaries)


def test_containerd_settings_advice():
    def warnings(settings, stall_after=120.0):
        s = combine(NOW, stall_after, [], PRESENT, {}, None, [], containerd=settings)
        return [f.summary for f in advise(s) if f.severity == "warning"]

    key = "plugins.'io.containerd.transfer.v1.local'.max_concurrent_downloads"
    assert warnings(PullSettings(3, 300.0, key)) == []
    assert warnings(PullSettings(3, 0.0, key)) == []  # no timeout: nothing to be inside
    short = warnings(PullSettings(3, 60.0, key))
    assert [w.split(":")[0] for w in short] == [
        "image_pull_progress_timeout is 1m00s",
        "--image-pull.stall-after (2m00s) is not well inside containerd's progress timeout (1m00s)",
    ]
    assert len(warnings(PullSettings(3, 1800.0, key), stall_after=1000.0)) == 1

    def said(settings):
        s = combine(NOW, 120.0, [], PRESENT, {}, None, [], containerd=settings)
        return next(f.summary for f in advise(s) if f.summary.startswith("containerd pulls"))

    assert "through its transfer service" in said(PullSettings(3, 300.0, key, transfer=True))
    images = "plugins.'io.containerd.cri.v1.images'.max_concurrent_downloads"
    fallback = said(PullSettings(10, 300.0, images, fallback="max_concurrent_downloads = 10"))
    assert fallback.startswith(f"containerd pulls 10 layer(s) at once ({images}, the CRI's own")
    assert "max_concurrent_downloads = 10 in the CRI images plugin is a setting" in fallback
    unknown = combine(NOW, 120.0, [], PRESENT, {}, None, [], containerd_error="x: nope")
    assert any("containerd pull settings unknown: x: nope" in f.summary for f in advise(unknown))
