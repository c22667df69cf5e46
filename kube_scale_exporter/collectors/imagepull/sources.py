"""Where the collector learns what downloads and what is present: --image-pull.source.

`socket`: containerd's gRPC API (ingests, the manifests that group them into images,
image names, containerd's version). Whoever holds the socket controls containerd.
`ingest`: containerd's ingest directory, mounted read-only, and the pods' statuses; no
socket, so pulls are estimated from download slots (containerd/pulls.py), images are
present when a container on this node uses them, and containerd's version is unknown.
"""

from __future__ import annotations

import time

from kube_scale_exporter.containerd import config as containerd_config
from kube_scale_exporter.containerd import pulls as pullmap
from kube_scale_exporter.containerd.client import ContainerdClient, ContainerdError, Ingest
from kube_scale_exporter.containerd.ingestdir import IngestDir

# containerd's version is asked again this often: it changes only with an upgrade.
VERSION_TTL = 600.0


class SocketSource:
    """containerd's gRPC socket."""

    by_count = False

    def __init__(self, args):
        self.args = args
        self.client = None
        self.manifests = None
        self._version: tuple = (None, float("-inf"))  # ((major, minor) or None, asked at)

    def _containerd(self) -> ContainerdClient:
        """The client, made on first use so h2 is imported only where this collector runs."""
        if self.client is None:
            client = ContainerdClient(
                self.args.containerd_address,
                self.args.containerd_namespace,
                self.args.containerd_timeout,
            )
            self.manifests = pullmap.ManifestIndex(lambda: client.content(pullmap.MANIFEST_FILTER))
            self.client = client
        return self.client

    def ingests(self) -> list[Ingest]:
        return self._containerd().ingests()

    def pulls(self, ingests, now, stall_after, settings, most=None) -> list[pullmap.Pull]:
        digests = {i.digest for i in ingests if i.digest}
        owners = self.manifests.lookup(digests) if digests else {}
        return pullmap.group(ingests, owners)

    def present(self, names, in_use) -> set[str]:
        return self._containerd().image_names(names)

    def version(self) -> tuple[int, int] | None:
        version, asked = self._version
        if time.monotonic() - asked > VERSION_TTL:
            try:
                version = containerd_config.parse_version(self._containerd().version())
            except ContainerdError:
                version = None  # decided by the config's version, see config.settings
            self._version = (version, time.monotonic())
        return version


class IngestSource:
    """containerd's ingest directory and the pods: nothing that can change containerd."""

    by_count = True

    def __init__(self, args):
        self.dir = IngestDir(args.containerd_ingest_dir, args.containerd_namespace)

    def ingests(self) -> list[Ingest]:
        return self.dir.ingests()

    def pulls(self, ingests, now, stall_after, settings, most=None) -> list[pullmap.Pull]:
        """`most`: state.most_pulls(...), the kubelet's bound on moving pulls."""
        # containerd's own default when its config cannot be read.
        per_pull = (
            settings.max_concurrent_downloads if settings else containerd_config.DEFAULT_DOWNLOADS
        )
        return pullmap.by_download_slots(ingests, per_pull, now, stall_after, most)

    def present(self, names, in_use) -> set[str]:
        return set(names) & in_use

    def version(self) -> None:
        return None


SOURCES = {"ingest": IngestSource, "socket": SocketSource}
