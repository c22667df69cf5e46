"""Image pulls on this node: what is downloading, what waits for a pull slot, what is stuck.

Sources: containerd's content ingests and images (gRPC socket, namespace k8s.io), the
pods on this node (one watch filtered on spec.nodeName) and the kubelet's config file.
No series has a label, so a node costs at most nine series.

    # HELP kubescale_image_pulls_in_progress Images downloading now (containerd ingests grouped by manifest).
    # TYPE kubescale_image_pulls_in_progress gauge
    kubescale_image_pulls_in_progress 2.0
    # HELP kubescale_image_pulls_queued Images needed by waiting containers on this node, neither present nor downloading.
    # TYPE kubescale_image_pulls_queued gauge
    kubescale_image_pulls_queued 3.0
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
    # HELP kubescale_image_preload_missing Images listed in --image-pull.preload that are not present.
    # TYPE kubescale_image_preload_missing gauge
    kubescale_image_preload_missing 0.0

`queued` is absent until the pod watch has synced (or when the API is not configured);
the kubelet series are absent without a readable kubelet config file; `preload_missing`
is absent without --image-pull.preload. See docs/imagepull.md for how ingests are
mapped to images and the limits of that mapping.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from datetime import datetime

import yaml
from prometheus_client.core import GaugeMetricFamily

from kube_scale_exporter import kube
from kube_scale_exporter.containerd import pulls as pullmap
from kube_scale_exporter.containerd.client import (
    DEFAULT_ADDRESS,
    ContainerdClient,
    Ingest,
    socket_path,
)
from kube_scale_exporter.containerd.reference import Reference, parse
from kube_scale_exporter.files import KUBELET_CONFIG_BYTES, read_capped
from kube_scale_exporter.flagtypes import duration
from kube_scale_exporter.registry import Collector, Finding, HostPath, Needs, UsageError

log = logging.getLogger(__name__)

DEFAULT_KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
# Waiting reasons that do not mean "needs its image now": the container waits for the
# pod's init containers, and the kubelet has not asked for its image yet.
NOT_PULLING_YET = frozenset({"PodInitializing"})
def _rfc3339(value) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value).timestamp()


# ---- the kubelet's config file ------------------------------------------------------

@dataclass(frozen=True)
class KubeletPullSettings:
    serialize: bool
    max_parallel: int  # 0: no limit

    @classmethod
    def from_config(cls, doc) -> KubeletPullSettings:
        if not isinstance(doc, dict):
            raise TypeError("not a KubeletConfiguration mapping")
        serialize = doc.get("serializeImagePulls", True)
        limit = doc.get("maxParallelImagePulls")
        if not isinstance(serialize, bool):
            raise TypeError(f"serializeImagePulls is {serialize!r}, not true/false")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise ValueError(f"maxParallelImagePulls is {limit!r}, not a whole number >= 1")
        # The kubelet requires maxParallelImagePulls unset or 1 when pulls are serialized.
        return cls(serialize, 1 if serialize else (limit or 0))


class KubeletConfigFile:
    """The kubelet's config file, parsed again only when its stat changes."""

    def __init__(self, path: str):
        self.path = path
        self._stat = None
        self._settings: KubeletPullSettings | None = None
        self.error: str | None = None

    def read(self) -> KubeletPullSettings | None:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            self._stat, self._settings = None, None
            self.error = f"kubelet config {self.path}: {exc.strerror}"
            return None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._stat:
            self._stat = key
            try:
                data = read_capped(self.path, KUBELET_CONFIG_BYTES, "KUBELET_CONFIG_BYTES")
                self._settings = KubeletPullSettings.from_config(yaml.safe_load(data))
                self.error = None
            except (OSError, yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
                self._settings = None
                self.error = f"kubelet config {self.path}: {exc}"
                log.warning("%s", self.error)
        return self._settings


# ---- pods on this node ---------------------------------------------------------------

def _waiting_containers(pod: dict):
    """The specs of the pod's containers whose image is wanted now."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
        return
    spec = pod.get("spec") or {}
    for specs, statuses in (("initContainers", "initContainerStatuses"),
                            ("containers", "containerStatuses")):
        by_name = {s.get("name"): s for s in status.get(statuses) or ()}
        for container in spec.get(specs) or ():
            s = by_name.get(container.get("name"))
            if s is None:
                # Not reported by the kubelet yet: the pod was just bound to this node.
                if status.get("phase", "Pending") == "Pending":
                    yield container
                continue
            waiting = (s.get("state") or {}).get("waiting")
            if waiting is not None and waiting.get("reason") not in NOT_PULLING_YET:
                yield container


def images_wanted(pods) -> dict[str, tuple[Reference, float | None]]:
    """Image name -> (reference, since when a pod on this node waits for it)."""
    wanted: dict[str, tuple[Reference, float | None]] = {}
    for pod in pods:
        status = pod.get("status") or {}
        since = _rfc3339(status.get("startTime") or pod["metadata"].get("creationTimestamp"))
        for container in _waiting_containers(pod):
            try:
                ref = parse(container.get("image") or "")
            except ValueError:
                continue  # the kubelet reports InvalidImageName; no pull will happen
            known = wanted.get(ref.name)
            if known is None or (since is not None and (known[1] is None or since < known[1])):
                wanted[ref.name] = (ref, since)
    return wanted


def pod_summary(pod: dict) -> dict:
    """The fields this collector reads, so 300 cached pods stay small."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}

    def containers(key):
        return [{"name": c.get("name"), "image": c.get("image")} for c in spec.get(key) or ()]

    def statuses(key):
        out = []
        for s in status.get(key) or ():
            waiting = (s.get("state") or {}).get("waiting")
            out.append({"name": s.get("name"),
                        "state": {} if waiting is None else {"waiting": waiting}})
        return out

    return {
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                          "creationTimestamp", "deletionTimestamp") if k in meta},
        "spec": {"initContainers": containers("initContainers"),
                 "containers": containers("containers")},
        "status": {"phase": status.get("phase"), "startTime": status.get("startTime"),
                   "initContainerStatuses": statuses("initContainerStatuses"),
                   "containerStatuses": statuses("containerStatuses")},
    }


# ---- one observation -----------------------------------------------------------------

@dataclass
class PullState:
    """Everything one scrape found; `families()` and `findings()` only read it."""

    now: float
    stall_after: float
    pulls: list[pullmap.Pull]
    queued: list[tuple[Reference, float | None]] | None  # None: pods not known
    waiting_since: list[float]  # when pods began waiting for each image not present
    kubelet: KubeletPullSettings | None
    kubelet_error: str | None = None
    preload_missing: list[str] | None = None  # None: no --image-pull.preload
    preload_total: int = 0
    pods_error: str | None = None
    stalled: list[pullmap.Pull] = field(init=False)
    oldest_seconds: float = field(init=False)

    def __post_init__(self):
        self.stalled = [p for p in self.pulls if p.stalled(self.now, self.stall_after)]
        starts = [p.started_at for p in self.pulls if p.started_at] + self.waiting_since
        self.oldest_seconds = max(0.0, self.now - min(starts)) if starts else 0.0


def observe(now, stall_after, ingests: list[Ingest], owners, present: set[str] | None,
            wanted, kubelet, preload: list[Reference], kubelet_error=None, pods_error=None):
    """Combine the sources into a PullState (pure: the golden test feeds it fixed input).

    `wanted` is images_wanted(pods) or None when pods are not known; `present` is the
    set of image names containerd has (None when it was not needed)."""
    in_progress = pullmap.group(ingests, owners)
    present = present or set()
    queued, waiting_since = None, []
    if wanted is not None:
        downloading = set().union(*(p.sources for p in in_progress))
        missing = [(ref, since) for name, (ref, since) in wanted.items() if name not in present]
        queued = sorted(((ref, since) for ref, since in missing if ref.source not in downloading),
                        key=lambda item: item[0].name)
        # A pod's pull began when it started waiting, even if the download began later.
        waiting_since = [since for _ref, since in missing if since is not None]
    preload_missing = [r.name for r in preload if r.name not in present] if preload else None
    return PullState(now=now, stall_after=stall_after, pulls=in_progress, queued=queued,
                     waiting_since=waiting_since, kubelet=kubelet, kubelet_error=kubelet_error,
                     preload_missing=preload_missing, preload_total=len(preload),
                     pods_error=pods_error)


def families(state: PullState):
    def gauge(name, doc, value):
        g = GaugeMetricFamily(name, doc)
        g.add_metric([], value)
        return g

    out = [
        gauge("kubescale_image_pulls_in_progress",
              "Images downloading now (containerd ingests grouped by manifest).",
              len(state.pulls)),
    ]
    if state.queued is not None:
        out.append(gauge("kubescale_image_pulls_queued",
                         "Images needed by waiting containers on this node, neither present "
                         "nor downloading.", len(state.queued)))
    out += [
        gauge("kubescale_image_pull_oldest_seconds",
              "Age of the oldest unfinished pull, queued or in progress (0 when none).",
              state.oldest_seconds),
        gauge("kubescale_image_pull_downloaded_bytes",
              "Bytes written so far across the downloads in progress.",
              sum(p.downloaded_bytes for p in state.pulls)),
        gauge("kubescale_image_pull_expected_bytes",
              "Bytes expected in total across the downloads in progress.",
              sum(p.expected_bytes for p in state.pulls)),
        gauge("kubescale_image_pull_stalled",
              "Downloads in progress with no byte written for --image-pull.stall-after.",
              len(state.stalled)),
    ]
    if state.kubelet is not None:
        out += [
            gauge("kubescale_kubelet_serialize_image_pulls",
                  "1 when the kubelet pulls one image at a time (serializeImagePulls).",
                  1.0 if state.kubelet.serialize else 0.0),
            gauge("kubescale_kubelet_max_parallel_image_pulls",
                  "Pulls the kubelet runs at once (maxParallelImagePulls; 0 means no limit).",
                  state.kubelet.max_parallel),
        ]
    if state.preload_missing is not None:
        out.append(gauge("kubescale_image_preload_missing",
                         "Images listed in --image-pull.preload that are not present.",
                         len(state.preload_missing)))
    return out


def _age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def advise(state: PullState) -> list[Finding]:
    found = []
    waiting = len(state.queued or ())
    busy = len(state.pulls)
    if busy:
        found.append(Finding("info", f"{busy} image pull(s) in progress: "
                             f"{_size(sum(p.downloaded_bytes for p in state.pulls))} of "
                             f"{_size(sum(p.expected_bytes for p in state.pulls))} downloaded; "
                             f"oldest unfinished pull {_age(state.oldest_seconds)}"))
    kubelet = state.kubelet
    behind_serial = bool(kubelet and kubelet.serialize and waiting and busy)
    if kubelet is None:
        found.append(Finding("info", f"pull settings unknown: {state.kubelet_error}"))
    elif behind_serial:
        found.append(Finding(
            "warning",
            f"serializeImagePulls is true and {waiting} image(s) wait for a pull slot "
            f"behind {busy} pull(s): one large image blocks every pod on this node",
            "In the kubelet config file set\n"
            "  serializeImagePulls: false\n"
            "  maxParallelImagePulls: 5   # kubelet >= 1.27; size it to the node's bandwidth\n"
            "and restart the kubelet. Bake large images into the node image "
            "(--image-pull.preload lists them)."))
    elif kubelet.serialize:
        found.append(Finding("info", "serializeImagePulls is true (the default): pulls run one "
                             "at a time, so one large image delays every other pull"))
    elif kubelet.max_parallel == 0:
        found.append(Finding("info", "pulls are parallel with no maxParallelImagePulls limit: "
                             "a burst of pods pulls every image at once"))
    if state.queued is None:
        found.append(Finding("info", f"queued pulls unknown: {state.pods_error or 'pod watch not synced'}"))
    elif waiting and not behind_serial:
        found.append(Finding("info", f"{waiting} image(s) needed by waiting containers are "
                             f"neither present nor downloading (pull back-off, or about to "
                             f"start)"))
    if state.stalled:
        oldest = min(p.last_progress_at for p in state.stalled)
        found.append(Finding(
            "warning",
            f"{len(state.stalled)} image pull(s) made no progress for at least "
            f"{_age(state.stall_after)} (the longest for {_age(state.now - oldest)})",
            "containerd's CRI cancels a pull after image_pull_progress_timeout (default 5m) "
            "without progress and the kubelet retries with backoff. Check this node's path to "
            "the registry (`crictl pull` the image by hand). An ingest left by a killed "
            "client stays listed in `ctr -n k8s.io content active` until a pull of the same "
            "blob resumes it."))
    if state.preload_missing:
        names = "\n".join(f"  {n}" for n in state.preload_missing)
        found.append(Finding(
            "warning",
            f"{len(state.preload_missing)} of {state.preload_total} images that should be "
            f"baked into this node are missing",
            f"Missing:\n{names}\nRebuild the node image with them, or pre-pull them with a "
            f"DaemonSet before scheduling workloads here."))
    return found


# ---- the collector ------------------------------------------------------------------

class ImagePullCollector(Collector):
    """The `imagepull` collector; its exposition is in this module's docstring."""

    name = "imagepull"
    modes = frozenset({"node"})
    default_enabled = True
    default_condition = " where --containerd.address exists"
    help = ("Image pulls on this node from containerd (downloading, queued, stalled), the "
            "kubelet's pull settings and missing preloaded images.")
    # The pod watch is filtered to this node's pods, which RBAC cannot express; containerd's
    # socket is node root, so its group is all the pod joins (docs/deploy.md).
    needs = {"node": Needs(
        rbac_rules=({"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},),
        host_paths=(HostPath("containerd-socket", DEFAULT_ADDRESS, "Socket"),
                    HostPath("kubelet-config", DEFAULT_KUBELET_CONFIG, "File")),
        socket_group=True)}

    @classmethod
    def add_arguments(cls, group):
        group.add_argument(
            "--containerd.address", dest="containerd_address", default=DEFAULT_ADDRESS,
            metavar="PATH", help=f"containerd's gRPC socket (default {DEFAULT_ADDRESS}).")
        group.add_argument(
            "--containerd.namespace", dest="containerd_namespace", default="k8s.io",
            metavar="NAME", help="containerd namespace the kubelet's images live in (default k8s.io).")
        group.add_argument(
            "--containerd.timeout", dest="containerd_timeout", type=duration, default=3.0,
            metavar="DURATION", help="Longest one containerd call may take (default 3s).")
        group.add_argument(
            "--kubelet.config-file", dest="kubelet_config_file", default=None, metavar="PATH",
            help=f"The kubelet's config file, mounted read-only (default "
                 f"{DEFAULT_KUBELET_CONFIG}; its series are absent while it is unreadable).")
        group.add_argument(
            "--image-pull.stall-after", dest="image_pull_stall_after", type=duration,
            default=120.0, metavar="DURATION",
            help="A download with no byte written for this long counts as stalled (default "
                 "2m, inside containerd's 5m image_pull_progress_timeout).")
        group.add_argument(
            "--image-pull.preload", dest="image_pull_preload", action="append", default=[],
            metavar="IMAGE[,IMAGE...]",
            help="Images this node should have baked in; repeat or separate with commas.")

    @classmethod
    def enabled_by_default(cls, args):
        # A plain Linux host has no containerd: stay quiet there. The DaemonSet passes
        # --collector.imagepull, so a socket left unmounted fails loudly instead.
        return os.path.exists(socket_path(args.containerd_address))

    @classmethod
    def validate(cls, args):
        address = args.containerd_address
        if not socket_path(address).startswith("/"):
            raise UsageError(f"--containerd.address: expected an absolute socket path or "
                             f"unix:///PATH, got {address!r}")
        if not args.containerd_namespace:
            raise UsageError("--containerd.namespace: must not be empty")
        path = args.kubelet_config_file
        if path is not None and not os.path.isfile(path):
            raise UsageError(f"--kubelet.config-file: no such file: {path!r}")
        for item in cls._preload_items(args):
            try:
                parse(item)
            except ValueError as exc:
                raise UsageError(f"--image-pull.preload: {exc}") from None

    @staticmethod
    def _preload_items(args) -> list[str]:
        return [i.strip() for v in args.image_pull_preload for i in v.split(",") if i.strip()]

    def __init__(self, args):
        super().__init__(args)
        self.stall_after = args.image_pull_stall_after
        self.preload = [parse(i) for i in self._preload_items(args)]
        self.kubelet = KubeletConfigFile(args.kubelet_config_file or DEFAULT_KUBELET_CONFIG)
        self.client = None
        self.manifests = None
        self.pods = None
        self.pods_error = None
        self._wanted_at: tuple = (None, None)

    def start(self):
        self.pods, self.pods_error = start_pod_watch(self.args)

    def _containerd(self):
        """The client, made on first use so h2 is imported only where this collector runs."""
        if self.client is None:
            client = ContainerdClient(self.args.containerd_address,
                                      self.args.containerd_namespace,
                                      self.args.containerd_timeout)
            self.manifests = pullmap.ManifestIndex(
                lambda: client.content(pullmap.MANIFEST_FILTER))
            self.client = client
        return self.client

    def observe(self) -> PullState:
        client = self._containerd()
        ingests = client.ingests()
        digests = {i.digest for i in ingests if i.digest}
        owners = self.manifests.lookup(digests) if digests else {}
        wanted = self._wanted()
        present = None
        if wanted or self.preload:
            present = set(client.image_names())
        return observe(time.time(), self.stall_after, ingests, owners, present, wanted,
                       self.kubelet.read(), self.preload, kubelet_error=self.kubelet.error,
                       pods_error=self.pods_error)

    def _wanted(self):
        """images_wanted of the cached pods, worked out again only when the cache moved."""
        if self.pods is None or not self.pods.has_synced:
            return None
        version = self.pods.resource_version
        if version is None or version != self._wanted_at[0]:
            self._wanted_at = (version, images_wanted(self.pods.items()))
        return self._wanted_at[1]

    families = staticmethod(families)
    advise = staticmethod(advise)

    def informers(self):
        return [self.pods] if self.pods is not None else []

    def close(self):
        if self.pods is not None:
            self.pods.stop()


def start_pod_watch(args):
    """This node's pods from the API (one watch on spec.nodeName); (informer, error)."""
    node = getattr(args, "kube_node_name", "")
    if not node:
        why = "no node name (--kube.node-name or NODE_NAME)"
        log.warning("imagepull: no pod watch, kubescale_image_pulls_queued is absent: %s", why)
        return None, why
    try:
        informer = kube.for_node(kube.client_from_args(args), kube.PODS, node,
                                 transform=pod_summary)
    except kube.ConfigError as exc:
        log.warning("imagepull: no pod watch, kubescale_image_pulls_queued is absent: %s", exc)
        return None, f"no Kubernetes API access: {exc}"
    return informer.start(), None
