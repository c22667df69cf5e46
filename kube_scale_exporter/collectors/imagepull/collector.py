"""The `imagepull` collector: its flags, and one observation of containerd, pods and kubelet.

The exposition is in state.py's docstring, the `check` text in advice.py.
"""

from __future__ import annotations

import argparse
import os
import time

from kube_scale_exporter.collectors.imagepull.advice import advise
from kube_scale_exporter.collectors.imagepull.kubelet import (
    DEFAULT_KUBELET_CONFIG,
    KubeletConfigFile,
    UnknownKubeletConfig,
)
from kube_scale_exporter.collectors.imagepull.pods import (
    images_failing,
    images_in_use,
    images_wanted,
    start_pod_watch,
)
from kube_scale_exporter.collectors.imagepull.sources import SOURCES
from kube_scale_exporter.collectors.imagepull.state import (
    PullState,
    combine,
    families,
    most_pulls,
)
from kube_scale_exporter.containerd import config as containerd_config
from kube_scale_exporter.containerd import hostsdir
from kube_scale_exporter.containerd.buildinfo import BinaryVersionCache, BuildInfoError
from kube_scale_exporter.containerd.client import DEFAULT_ADDRESS, socket_path
from kube_scale_exporter.containerd.ingestdir import DEFAULT_INGEST_DIR
from kube_scale_exporter.containerd.reference import parse
from kube_scale_exporter.flagtypes import duration
from kube_scale_exporter.registry import Collector, HostPath, Needs, UsageError


CONTAINERD_CONFIG_DIR = os.path.dirname(containerd_config.DEFAULT_CONFIG)
# The pod watch is filtered to this node's pods, which RBAC cannot express.
POD_RULES = ({"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},)
SETTINGS_FILES = (
    HostPath("kubelet-config", DEFAULT_KUBELET_CONFIG, "File"),
    # The directory, not the file: drop-ins it imports live beside it, and the registry
    # host directories of /etc/containerd/certs.d, the first root of 2.2+'s default. A
    # containerd on its built-in defaults may have no directory at all: DirectoryOrCreate
    # starts the pod there (an empty directory: containerd reads no config from it, we
    # report the file missing) where Directory would keep it in ContainerCreating.
    HostPath("containerd-config", CONTAINERD_CONFIG_DIR, "DirectoryOrCreate"),
    # The second root of 2.2+'s default config_path (Docker's). Most nodes have none:
    # DirectoryOrCreate leaves an empty directory there, which containerd reads as no
    # registry configured, as it reads a missing one.
    HostPath("docker-certs", hostsdir.DEFAULT_ROOTS[1], "DirectoryOrCreate"),
)
# --image-pull.source=socket: containerd's socket is node root, so its group is all the pod
# joins (docs/deploy.md).
SOCKET_NEEDS = Needs(
    rbac_rules=POD_RULES,
    host_paths=(HostPath("containerd-socket", DEFAULT_ADDRESS, "Socket"), *SETTINGS_FILES),
    socket_group=True,
)
# --image-pull.source=ingest: the ingest directory read-only (0755 and 0644: no group).
INGEST_NEEDS = Needs(
    rbac_rules=POD_RULES,
    host_paths=(HostPath("containerd-ingest", DEFAULT_INGEST_DIR, "Directory"), *SETTINGS_FILES),
    args=("--image-pull.source=ingest",),
)


class ImagePullCollector(Collector):
    """Image pulls on this node; the exposition is in imagepull/state.py's docstring."""

    name = "imagepull"
    modes = frozenset({"node"})
    default_enabled = True
    default_condition = " where --containerd.address (or --containerd.ingest-dir) exists"
    help = (
        "Image pulls on this node from containerd (downloading, queued, failing, "
        "stalled), containerd's and the kubelet's pull settings and missing preloaded "
        "images."
    )
    # What the default source, the socket, needs; needs_for() gives the ingest source's.
    needs = {"node": SOCKET_NEEDS}

    @classmethod
    def needs_for(cls, args) -> Needs:
        if args.mode == "node" and args.image_pull_source == "ingest":
            return INGEST_NEEDS
        return super().needs_for(args)

    @classmethod
    def add_arguments(cls, group):
        group.add_argument(
            "--image-pull.source",
            dest="image_pull_source",
            choices=sorted(SOURCES),
            default="socket",
            help="Where downloads are read: 'socket', containerd's gRPC API (which grants "
            "control of containerd: node root), or 'ingest', its ingest directory "
            "mounted read-only plus the pods' statuses (no socket; pulls in progress are "
            "estimated, --image-pull.preload is not available). Default socket.",
        )
        group.add_argument(
            "--containerd.ingest-dir",
            dest="containerd_ingest_dir",
            default=DEFAULT_INGEST_DIR,
            metavar="PATH",
            help=f"containerd's content store ingest directory, read with "
            f"--image-pull.source=ingest (default {DEFAULT_INGEST_DIR}).",
        )
        group.add_argument(
            "--containerd.address",
            dest="containerd_address",
            default=DEFAULT_ADDRESS,
            metavar="PATH",
            help=f"containerd's gRPC socket (default {DEFAULT_ADDRESS}).",
        )
        group.add_argument(
            "--containerd.namespace",
            dest="containerd_namespace",
            default="k8s.io",
            metavar="NAME",
            help="containerd namespace the kubelet's images live in (default k8s.io).",
        )
        group.add_argument(
            "--containerd.timeout",
            dest="containerd_timeout",
            type=duration,
            default=3.0,
            metavar="DURATION",
            help="Longest one containerd call may take (default 3s).",
        )
        group.add_argument(
            "--containerd.config",
            dest="containerd_config",
            default=None,
            metavar="PATH",
            help=f"containerd's config file, with the files it imports mounted beside it "
            f"(default {containerd_config.DEFAULT_CONFIG}; its series are absent "
            f"while it is unreadable).",
        )
        group.add_argument(
            "--containerd.binary",
            dest="containerd_binary",
            default=None,
            metavar="PATH",
            help="containerd's binary, mounted read-only, for its version when the socket "
            "is not read (its Go build info: the major version always, the minor when built "
            "from a released module). Default none: the version comes from the socket, or "
            "from the config's version (3 and 4 are 2.x's).",
        )
        group.add_argument(
            "--kubelet.config-file",
            dest="kubelet_config_file",
            default=None,
            metavar="PATH",
            help=f"The kubelet's config file, mounted read-only (default "
            f"{DEFAULT_KUBELET_CONFIG}; its series are absent while it is missing or "
            f"unreadable).",
        )
        group.add_argument(
            "--image-pull.stall-after",
            dest="image_pull_stall_after",
            type=duration,
            default=120.0,
            metavar="DURATION",
            help="A download with no byte written for this long counts as stalled (default "
            "2m, inside containerd's 5m image_pull_progress_timeout).",
        )
        group.add_argument(
            "--image-pull.preload",
            dest="image_pull_preload",
            action="append",
            default=[],
            metavar="IMAGE[,IMAGE...]",
            help="Images this node should have baked in; repeat or separate with commas.",
        )

    @classmethod
    def enabled_by_default(cls, args):
        # A plain Linux host has no containerd: stay quiet there. The DaemonSet passes
        # --collector.imagepull, so a source left unmounted fails loudly instead.
        if args.image_pull_source == "ingest":
            return os.path.isdir(args.containerd_ingest_dir)
        return os.path.exists(socket_path(args.containerd_address))

    @classmethod
    def validate(cls, args):
        address = args.containerd_address
        if not socket_path(address).startswith("/"):
            raise UsageError(
                f"--containerd.address: expected an absolute socket path or "
                f"unix:///PATH, got {address!r}"
            )
        if not args.containerd_namespace:
            raise UsageError("--containerd.namespace: must not be empty")
        if not args.containerd_ingest_dir.startswith("/"):
            raise UsageError(
                f"--containerd.ingest-dir: expected an absolute path, got "
                f"{args.containerd_ingest_dir!r}"
            )
        if args.image_pull_source == "ingest" and cls._preload_items(args):
            raise UsageError(
                "--image-pull.preload: needs --image-pull.source=socket (the ingest "
                "source sees only the images this node's pods use)"
            )
        # A node without the kubelet's file (another node image, the chart's directory
        # mount of a path set for the fleet) runs without its series, as at the default
        # path, and `check` names it; a path that could never be the file is refused.
        path = args.kubelet_config_file
        if path is not None and not path.startswith("/"):
            raise UsageError(f"--kubelet.config-file: expected an absolute path, got {path!r}")
        if path is not None and os.path.exists(path) and not os.path.isfile(path):
            raise UsageError(f"--kubelet.config-file: not a regular file: {path!r}")
        path = args.containerd_config
        if path is not None and not os.path.isfile(path):
            raise UsageError(f"--containerd.config: no such file: {path!r}")
        path = args.containerd_binary
        if path is not None and not (path.startswith("/") and os.path.isfile(path)):
            raise UsageError(f"--containerd.binary: no such file (an absolute path): {path!r}")
        for item in cls._preload_items(args):
            try:
                parse(item)
            except ValueError as exc:
                raise UsageError(f"--image-pull.preload: {exc}") from None

    @staticmethod
    def _preload_items(args: argparse.Namespace) -> list[str]:
        return [i.strip() for v in args.image_pull_preload for i in v.split(",") if i.strip()]

    def __init__(self, args):
        super().__init__(args)
        self.stall_after = args.image_pull_stall_after
        self.preload = [parse(i) for i in self._preload_items(args)]
        self.kubelet = KubeletConfigFile(args.kubelet_config_file or DEFAULT_KUBELET_CONFIG)
        self.containerd_config = args.containerd_config or containerd_config.DEFAULT_CONFIG
        self.binary = BinaryVersionCache(args.containerd_binary) if args.containerd_binary else None
        self.binary_error = None
        self.source = SOURCES[args.image_pull_source](args)
        self.pods = None
        self.pods_error = None
        self._wanted_at: tuple = (None, None)

    def start(self):
        self.pods, self.pods_error = start_pod_watch(self.args)

    def observe(self) -> PullState:
        now = time.time()
        ingests = self.source.ingests()  # first: an unreachable source fails the scrape
        version, major = self._version()
        settings, settings_error = self._containerd_settings(version)
        if major is None and settings is not None and settings.major is not None:
            major = (settings.major, "config")
        dirs = None
        if settings is not None:
            dirs = hostsdir.read_host_dirs(
                settings.config_path, settings.config_path_set_by, settings.pull_path
            )
        wanted, failing, in_use = self._wanted()
        present = None
        if wanted or self.preload:
            names = [*(wanted or ()), *(r.name for r in self.preload)]
            present = self.source.present(names, in_use)
        kubelet = self.kubelet.read()
        if self.kubelet.unknown:  # a newer kubelet's file, maybe: fail, naming it
            raise UnknownKubeletConfig(self.kubelet.error)
        most = most_pulls(kubelet, wanted, present) if self.source.by_count else None
        pulls = self.source.pulls(ingests, now, self.stall_after, settings, most)
        return combine(
            now,
            self.stall_after,
            pulls,
            present,
            wanted,
            kubelet,
            self.preload,
            kubelet_error=self.kubelet.error,
            kubelet_refused=self.kubelet.refused,
            pods_error=self.pods_error,
            failing=failing,
            containerd=settings,
            containerd_error=settings_error,
            by_count=self.source.by_count,
            containerd_major=major,
            host_dirs=dirs,
        )

    def _version(self):
        """(containerd's (major, minor or None) for the config rules or None, (major,
        source) or None): from the socket, else from --containerd.binary's build info."""
        version = self.source.version()
        if version is not None:
            return version, (version[0], "socket")
        if self.binary is None:
            return None, None
        try:
            found = self.binary.get()
        except BuildInfoError as exc:
            self.binary_error = str(exc)
            return None, None
        self.binary_error = None
        return (found.major, found.minor), (found.major, "binary")

    def _containerd_settings(self, version):
        """(PullSettings or None, why not); a config that cannot be read costs its series,
        not the scrape, but one of a version no containerd this exporter knows reads fails
        the collector, naming it (UnknownConfigVersion). The files are read every scrape: a
        few KB, well under 1 ms."""
        try:
            return containerd_config.settings(self.containerd_config, version), None
        except containerd_config.UnknownConfigVersion:
            raise
        except containerd_config.ConfigError as exc:
            return None, f"containerd config {exc}"

    def _wanted(self):
        """(images_wanted, images_failing, images_in_use) of the cached pods, worked out
        again only when the cache moved; (None, None, set()) while the pods are not known."""
        if self.pods is None or not self.pods.has_synced:
            return None, None, set()
        version = self.pods.resource_version
        if version is None or version != self._wanted_at[0]:
            items = list(self.pods.items())
            found = (images_wanted(items), images_failing(items), images_in_use(items))
            self._wanted_at = (version, found)
        return self._wanted_at[1]

    families = staticmethod(families)
    advise = staticmethod(advise)

    def informers(self):
        return [self.pods] if self.pods is not None else []

    def close(self):
        if self.pods is not None:
            self.pods.stop()
