"""Image pulls on this node: what is downloading, what waits for a pull slot, what is stuck.

Sources: containerd's content ingests, images and version (gRPC socket, namespace
k8s.io; or, with --image-pull.source=ingest, its ingest directory alone) and its config
file (containerd/config.py), the pods on this node (one watch filtered on spec.nodeName)
and the kubelet's config file. One series has a label, the kubelet's re-verification
policy from a fixed set of five values, so these cost a node at most fourteen series; the
registry mirror series (mirror_families: containerd's version, pull path, config_path and
one series a registry host directory, containerd/hostsdir.py) at most fifteen more.

    # HELP kubescale_image_pulls_in_progress Images downloading now (containerd ingests grouped by manifest; estimated from download slots with --image-pull.source=ingest).
    # TYPE kubescale_image_pulls_in_progress gauge
    kubescale_image_pulls_in_progress 2.0
    # HELP kubescale_image_pulls_queued Images waiting for a pull slot on this node: needed by waiting containers, neither present nor downloading, not in pull back-off or failed.
    # TYPE kubescale_image_pulls_queued gauge
    kubescale_image_pulls_queued 3.0
    # HELP kubescale_image_pulls_failing Images of waiting containers on this node whose pull failed or is in back-off (ErrImagePull, ImagePullBackOff and the like).
    # TYPE kubescale_image_pulls_failing gauge
    kubescale_image_pulls_failing 1.0
    # HELP kubescale_image_pull_oldest_seconds Age of the oldest unfinished pull, queued or in progress (0 when none).
    # TYPE kubescale_image_pull_oldest_seconds gauge
    kubescale_image_pull_oldest_seconds 1805.0
    # HELP kubescale_image_pull_downloaded_bytes Bytes written so far across the downloads in progress.
    # TYPE kubescale_image_pull_downloaded_bytes gauge
    kubescale_image_pull_downloaded_bytes 1.2e+10
    # HELP kubescale_image_pull_expected_bytes Bytes expected in total across the downloads in progress.
    # TYPE kubescale_image_pull_expected_bytes gauge
    kubescale_image_pull_expected_bytes 1.7e+10
    # HELP kubescale_image_pull_stalled Downloads in progress with no byte written for --image-pull.stall-after.
    # TYPE kubescale_image_pull_stalled gauge
    kubescale_image_pull_stalled 1.0
    # HELP kubescale_kubelet_serialize_image_pulls 1 when the kubelet pulls one image at a time (serializeImagePulls).
    # TYPE kubescale_kubelet_serialize_image_pulls gauge
    kubescale_kubelet_serialize_image_pulls 1.0
    # HELP kubescale_kubelet_max_parallel_image_pulls Pulls the kubelet runs at once (maxParallelImagePulls; 0 means no limit).
    # TYPE kubescale_kubelet_max_parallel_image_pulls gauge
    kubescale_kubelet_max_parallel_image_pulls 1.0
    # HELP kubescale_kubelet_image_pull_credentials_verification_policy The kubelet's imagePullCredentialsVerificationPolicy in force (KEP-2535; NeverVerifyPreloadedImages when unset; Disabled when its config turns KubeletEnsureSecretPulledImages off); always 1.
    # TYPE kubescale_kubelet_image_pull_credentials_verification_policy gauge
    kubescale_kubelet_image_pull_credentials_verification_policy{policy="NeverVerifyAllowlistedImages"} 1.0
    # HELP kubescale_kubelet_preloaded_images_verification_allowlist_patterns Entries in the kubelet's preloadedImagesVerificationAllowlist, the images used without credential re-verification (NeverVerifyAllowlistedImages only; 0: every image present is re-verified).
    # TYPE kubescale_kubelet_preloaded_images_verification_allowlist_patterns gauge
    kubescale_kubelet_preloaded_images_verification_allowlist_patterns 2.0
    # HELP kubescale_containerd_max_concurrent_downloads Layers one containerd pull downloads at once (the setting in force: CRI, or the transfer service on 2.x; 0 means no limit).
    # TYPE kubescale_containerd_max_concurrent_downloads gauge
    kubescale_containerd_max_concurrent_downloads 3.0
    # HELP kubescale_containerd_image_pull_progress_timeout_seconds containerd's CRI image_pull_progress_timeout: a pull with no progress for this long is cancelled (0: never).
    # TYPE kubescale_containerd_image_pull_progress_timeout_seconds gauge
    kubescale_containerd_image_pull_progress_timeout_seconds 300.0
    # HELP kubescale_image_preload_missing Images listed in --image-pull.preload that are not present.
    # TYPE kubescale_image_preload_missing gauge
    kubescale_image_preload_missing 0.0

`queued` and `failing` are absent until the pod watch has synced (or when the API is
not configured); the kubelet series are absent without a readable kubelet config file or
with one the kubelet refuses (a version, kind or policy the kubelet 1.37 does not have
fails the collector, naming it: kubelet.UnknownKubeletConfig); the containerd ones without
a readable containerd config (the progress timeout also when containerd's version cannot
be asked and a version 2 file could be 1.6 or 1.7; 1.6 has none: 0); `preload_missing`
is absent without --image-pull.preload, the allowlist's size under any other policy than
NeverVerifyAllowlistedImages. See docs/imagepull.md for how ingests are mapped to images
and the limits of that mapping.
"""

# The exposition above is quoted as served, its HELP lines whole.
from __future__ import annotations

from dataclasses import dataclass, field

from kube_scale_exporter.collectors.imagepull.kubelet import KubeletPullSettings
from kube_scale_exporter.containerd import pulls as pullmap
from kube_scale_exporter.containerd.config import PullSettings
from kube_scale_exporter.containerd.hostsdir import MAX_ROOTS, HostDirs
from kube_scale_exporter.containerd.reference import Reference
from kube_scale_exporter.labels import sanitize
from kube_scale_exporter.metrics import Family, GaugeFamily


@dataclass
class PullState:
    """Everything one scrape found; `families()` and `advise()` only read it."""

    now: float
    stall_after: float
    pulls: list[pullmap.Pull]
    queued: list[tuple[Reference, float | None]] | None  # None: pods not known
    failing: int | None  # images in pull back-off or failed; None: pods not known
    waiting_since: list[float]  # when pods began waiting for each image not present
    kubelet: KubeletPullSettings | None
    kubelet_error: str | None = None
    kubelet_refused: bool = False  # the error is the file's content, which the kubelet refuses
    preload_missing: list[str] | None = None  # None: no --image-pull.preload
    preload_total: int = 0
    # --image-pull.preload's images as HOST/REPOSITORY, no tag: what the kubelet's
    # re-verification allowlist is matched against.
    preload_repositories: list[str] = field(default_factory=list)
    pods_error: str | None = None
    containerd: PullSettings | None = None
    containerd_error: str | None = None
    # containerd's major version and how it is known: socket, binary or config (its
    # version 3 and 4 are 2.x's alone); None: not known.
    containerd_major: tuple[int, str] | None = None
    host_dirs: HostDirs | None = None  # the registry host directories, with containerd's config
    stalled: list[pullmap.Pull] = field(init=False)
    oldest_seconds: float = field(init=False)

    def __post_init__(self):
        self.stalled = [p for p in self.pulls if p.stalled(self.now, self.stall_after)]
        starts = [p.started_at for p in self.pulls if p.started_at] + self.waiting_since
        self.oldest_seconds = max(0.0, self.now - min(starts)) if starts else 0.0


def most_pulls(kubelet, wanted, present) -> int | None:
    """The most pulls that can be downloading for the kubelet: its pull slots (1 when it
    serializes them) and the images its pods wait for that are not present; None when
    neither is known."""
    bounds = []
    if kubelet is not None and (kubelet.serialize or kubelet.max_parallel):
        bounds.append(1 if kubelet.serialize else kubelet.max_parallel)
    if wanted is not None:
        bounds.append(sum(1 for name in wanted if name not in (present or ())))
    return max(1, min(bounds)) if bounds else None


def combine(
    now,
    stall_after,
    pulls: list[pullmap.Pull],
    present: set[str] | None,
    wanted,
    kubelet,
    preload: list[Reference],
    kubelet_error=None,
    pods_error=None,
    failing: set[str] | None = None,
    containerd=None,
    containerd_error=None,
    by_count: bool = False,
    kubelet_refused: bool = False,
    containerd_major=None,
    host_dirs=None,
) -> PullState:
    """Combine the sources into a PullState (pure: the golden test feeds it fixed input).

    `pulls` are pullmap.group(...) of the ingests (or pullmap.by_download_slots without
    manifests); `wanted` is images_wanted(pods) or None when pods are not known, `failing`
    images_failing(pods); `present` is the set of image names present (None when it was
    not needed); `containerd` its pull settings (config.PullSettings) or None. A missing
    image is downloading when a pull came from its repository; with `by_count` (pulls
    whose image is not known) each such pull takes the longest-waiting missing image, as
    the kubelet pulls in the order pods asked."""
    present = present or set()
    queued, waiting_since = None, []
    if wanted is not None:
        downloading = set().union(*(p.sources for p in pulls))
        missing = [(ref, since) for name, (ref, since) in wanted.items() if name not in present]
        waiting = [(ref, since) for ref, since in missing if ref.source not in downloading]
        if by_count:
            waiting.sort(key=lambda item: (item[1] is None, item[1] or 0.0, item[0].name))
            waiting = waiting[sum(1 for p in pulls if not p.sources) :]
        queued = sorted(waiting, key=lambda item: item[0].name)
        # A pod's pull began when it started waiting, even if the download began later.
        waiting_since = [since for _ref, since in missing if since is not None]
    preload_missing = [r.name for r in preload if r.name not in present] if preload else None
    return PullState(
        now=now,
        stall_after=stall_after,
        pulls=pulls,
        queued=queued,
        failing=None if wanted is None else len(failing or ()),
        containerd=containerd,
        containerd_error=containerd_error,
        containerd_major=containerd_major,
        host_dirs=host_dirs,
        waiting_since=waiting_since,
        kubelet=kubelet,
        kubelet_error=kubelet_error,
        kubelet_refused=kubelet_refused,
        preload_missing=preload_missing,
        preload_total=len(preload),
        preload_repositories=[f"{r.host}/{r.repository}" for r in preload],
        pods_error=pods_error,
    )


def families(state: PullState) -> list[Family]:
    def gauge(name, doc, value):
        g = GaugeFamily(name, doc)
        g.add_metric([], value)
        return g

    out = [
        gauge(
            "kubescale_image_pulls_in_progress",
            "Images downloading now (containerd ingests grouped by manifest; estimated from "
            "download slots with --image-pull.source=ingest).",
            len(state.pulls),
        ),
    ]
    if state.queued is not None:
        out.append(
            gauge(
                "kubescale_image_pulls_queued",
                "Images waiting for a pull slot on this node: needed by waiting "
                "containers, neither present nor downloading, not in pull back-off "
                "or failed.",
                len(state.queued),
            )
        )
    if state.failing is not None:
        out.append(
            gauge(
                "kubescale_image_pulls_failing",
                "Images of waiting containers on this node whose pull failed or is "
                "in back-off (ErrImagePull, ImagePullBackOff and the like).",
                state.failing,
            )
        )
    out += [
        gauge(
            "kubescale_image_pull_oldest_seconds",
            "Age of the oldest unfinished pull, queued or in progress (0 when none).",
            state.oldest_seconds,
        ),
        gauge(
            "kubescale_image_pull_downloaded_bytes",
            "Bytes written so far across the downloads in progress.",
            sum(p.downloaded_bytes for p in state.pulls),
        ),
        gauge(
            "kubescale_image_pull_expected_bytes",
            "Bytes expected in total across the downloads in progress.",
            sum(p.expected_bytes for p in state.pulls),
        ),
        gauge(
            "kubescale_image_pull_stalled",
            "Downloads in progress with no byte written for --image-pull.stall-after.",
            len(state.stalled),
        ),
    ]
    if state.kubelet is not None:
        out += [
            gauge(
                "kubescale_kubelet_serialize_image_pulls",
                "1 when the kubelet pulls one image at a time (serializeImagePulls).",
                1.0 if state.kubelet.serialize else 0.0,
            ),
            gauge(
                "kubescale_kubelet_max_parallel_image_pulls",
                "Pulls the kubelet runs at once (maxParallelImagePulls; 0 means no limit).",
                state.kubelet.max_parallel,
            ),
        ]
        policy = GaugeFamily(
            "kubescale_kubelet_image_pull_credentials_verification_policy",
            "The kubelet's imagePullCredentialsVerificationPolicy in force (KEP-2535; "
            "NeverVerifyPreloadedImages when unset; Disabled when its config turns "
            "KubeletEnsureSecretPulledImages off); always 1.",
            labels=["policy"],
        )
        policy.add_metric([state.kubelet.verification_policy], 1.0)
        out.append(policy)
        if state.kubelet.verification_policy == "NeverVerifyAllowlistedImages":
            out.append(
                gauge(
                    "kubescale_kubelet_preloaded_images_verification_allowlist_patterns",
                    "Entries in the kubelet's preloadedImagesVerificationAllowlist, the images "
                    "used without credential re-verification (NeverVerifyAllowlistedImages "
                    "only; 0: every image present is re-verified).",
                    len(state.kubelet.allowlist),
                )
            )
    if state.containerd is not None:
        out.append(
            gauge(
                "kubescale_containerd_max_concurrent_downloads",
                "Layers one containerd pull downloads at once (the setting in force: "
                "CRI, or the transfer service on 2.x; 0 means no limit).",
                state.containerd.max_concurrent_downloads,
            )
        )
        if state.containerd.progress_timeout is not None:
            out.append(
                gauge(
                    "kubescale_containerd_image_pull_progress_timeout_seconds",
                    "containerd's CRI image_pull_progress_timeout: a pull with no "
                    "progress for this long is cancelled (0: never).",
                    state.containerd.progress_timeout,
                )
            )
    out += mirror_families(state)
    if state.preload_missing is not None:
        out.append(
            gauge(
                "kubescale_image_preload_missing",
                "Images listed in --image-pull.preload that are not present.",
                len(state.preload_missing),
            )
        )
    return out


def _config_path_label(config_path: str | None) -> str:
    if config_path is None:
        return ""
    entries = [sanitize(e) for e in config_path.split(":") if e]
    return ":".join(entries[:MAX_ROOTS] + (["..."] if len(entries) > MAX_ROOTS else []))


def mirror_families(state: PullState) -> list[Family]:
    """containerd's version, its pull path and registry host directories: whether the
    mirrors written there (by hand, Spegel, Dragonfly) are used. Absent with the
    containerd series (an unreadable config)."""
    out: list[Family] = []
    if state.containerd_major is not None:
        major = GaugeFamily(
            "kubescale_containerd_major_version",
            "containerd's major version (1 or 2), known from its socket, its binary's Go "
            "build info, or its config's version (3 and 4 are 2.x's alone).",
            labels=["source"],
        )
        major.add_metric([state.containerd_major[1]], state.containerd_major[0])
        out.append(major)
    settings, dirs = state.containerd, state.host_dirs
    if settings is None or dirs is None:
        return out
    path = GaugeFamily(
        "kubescale_containerd_image_pull_path",
        "The pull the CRI takes: transfer (2.x's transfer service) or local (1.x; 2.x with "
        "use_local_image_pull or a fallback), unknown when it depends on a version not "
        "known; reason: default, use_local_image_pull, the fallback setting, containerd_1 "
        "or version_unknown. Always 1.",
        labels=["path", "reason"],
    )
    path.add_metric([settings.pull_path, settings.pull_reason], 1.0)
    config_path = GaugeFamily(
        "kubescale_containerd_registry_config_path",
        "The CRI's registry config_path in force (set_by: config, default: 2.2+'s built-in "
        "/etc/containerd/certs.d:/etc/docker/certs.d, none: empty, unknown: depends on a "
        "version not known). Always 1.",
        labels=["config_path", "set_by"],
    )
    config_path.add_metric([_config_path_label(dirs.config_path), dirs.set_by], 1.0)
    mirrors = GaugeFamily(
        "kubescale_containerd_registry_mirror_hosts",
        "Mirror hosts (pull or resolve) in a registry host directory's hosts.toml, per "
        "directory found (at most 10); verdict: used, ignored or unknown, with its reason; "
        "writer: spegel, dragonfly or other; upstream_last: the registry itself stays the "
        "last host tried.",
        labels=["root", "registry", "verdict", "reason", "writer", "upstream_last"],
    )
    for d in dirs.dirs:
        mirrors.add_metric(
            [
                sanitize(d.root),
                sanitize(d.name),
                d.verdict,
                d.reason,
                d.writer,
                "true" if d.upstream_last else "false",
            ],
            d.mirrors,
        )
    unlisted = GaugeFamily(
        "kubescale_containerd_registry_host_dirs_unlisted",
        "Registry host directories found past the 10 listed (counted up to 1,000 a root).",
    )
    unlisted.add_metric([], dirs.unlisted)
    unreadable = GaugeFamily(
        "kubescale_containerd_registry_host_dirs_unreadable",
        "Host directory roots and registry directories this exporter could not read "
        "(a FIFO, a symlink loop, a file over its cap, no permission); `check` names them.",
    )
    unreadable.add_metric(
        [], len(dirs.problems) + sum(1 for d in dirs.dirs if d.reason == "unreadable")
    )
    return [*out, path, config_path, mirrors, unlisted, unreadable]
