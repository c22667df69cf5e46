"""From containerd's active ingests to image pulls.

An ingest is one blob being written; its ref names the blob ("layer-sha256:..."), never
the image. A pull fetches the image's manifest first, commits it, and labels it with
its children (containerd.io/gc.ref.content.config, ...l.0, l.1, ...) and with where it
came from (containerd.io/distribution.source.HOST=REPOSITORY) before it downloads
them. So the committed manifests that have a config label map every layer or config
being downloaded to one pull, and that pull to a registry repository.

Limits, by construction:
- An ingest no committed manifest claims (the manifest or index being fetched itself,
  or a manifest deleted since) counts as a pull of its own.
- A blob shared by two images pulled at once is downloaded once; it counts for the
  first manifest (by digest).
- Ingests whose ref is not a pull's "<kind>-<digest>" (e.g. `ctr content ingest`, image
  imports) are not pulls and are ignored.
- The source label names a repository, not a tag: two tags of one repository being
  pulled at once are told apart only by count.

Without the manifests (the ingest directory read with no socket, containerd/ingestdir.py)
`by_download_slots` estimates the pulls instead: a pull downloads at most
max_concurrent_downloads blobs at once, so the moving ingests make at least that many
fewer pulls, and so do the stalled ones. Exact while each pull has as many blobs left as
it may download at once; pulls near their end, or of images with fewer layers, that run
at the same time count as fewer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kube_scale_exporter.containerd.client import ContentInfo, Ingest

CONFIG_LABEL = "containerd.io/gc.ref.content.config"
LAYER_LABEL_PREFIX = "containerd.io/gc.ref.content.l."
SOURCE_LABEL_PREFIX = "containerd.io/distribution.source."
# containerd filter for committed manifests: the presence of their config label.
MANIFEST_FILTER = f'labels."{CONFIG_LABEL}"'


@dataclass(frozen=True)
class Manifest:
    digest: str
    created_at: float | None
    children: frozenset[str]
    sources: frozenset[tuple[str, str]]  # (host without port, repository)


def manifest(info: ContentInfo) -> Manifest:
    children = {
        v for k, v in info.labels.items() if k == CONFIG_LABEL or k.startswith(LAYER_LABEL_PREFIX)
    }
    sources = set()
    for key, value in info.labels.items():
        if key.startswith(SOURCE_LABEL_PREFIX):
            host = key[len(SOURCE_LABEL_PREFIX) :]
            # One label per host; several repositories of it are comma-separated.
            sources.update((host, repo) for repo in value.split(",") if repo)
    return Manifest(info.digest, info.created_at, frozenset(children), frozenset(sources))


@dataclass
class Pull:
    """One image being downloaded: the ingests of one manifest, or one lone ingest."""

    key: str
    sources: frozenset[tuple[str, str]] = frozenset()
    ingests: list[Ingest] = field(default_factory=list)
    manifest_created_at: float | None = None

    @property
    def downloaded_bytes(self) -> int:
        return sum(max(0, i.offset) for i in self.ingests)

    @property
    def expected_bytes(self) -> int:
        return sum(max(0, i.total) for i in self.ingests)

    @property
    def started_at(self) -> float | None:
        times = [i.started_at for i in self.ingests if i.started_at]
        if self.manifest_created_at:
            times.append(self.manifest_created_at)
        return min(times, default=None)

    @property
    def last_progress_at(self) -> float | None:
        times = [i.updated_at or i.started_at for i in self.ingests]
        return max((t for t in times if t), default=None)

    def stalled(self, now: float, stall_after: float) -> bool:
        """No byte written to any of its blobs for stall_after seconds."""
        last = self.last_progress_at
        return last is not None and now - last >= stall_after


class ManifestIndex:
    """Which committed manifest claims each blob digest; relisted only on a new digest.

    `lookup` calls `list_manifests` (one Content.List) when an ingest's digest is
    neither claimed by a known manifest nor known to be unclaimed, so a scrape during
    a long pull costs one listing when the pull starts and none after that.
    """

    def __init__(self, list_manifests):
        self._list = list_manifests
        self._owner: dict[str, Manifest] = {}
        self._unclaimed: set[str] = set()

    def _refresh(self) -> None:
        owner: dict[str, Manifest] = {}
        for m in sorted((manifest(i) for i in self._list()), key=lambda m: m.digest):
            for child in m.children:
                owner.setdefault(child, m)
        self._owner = owner

    def lookup(self, digests: set[str]) -> dict[str, Manifest]:
        unknown = digests - self._owner.keys() - self._unclaimed
        if unknown:
            self._refresh()
        self._unclaimed = {d for d in digests if d not in self._owner}
        # Keep the manifests of the pulls in progress (all their children: the next blob
        # of a pull is then known), forget the rest so the map never outgrows the pulls.
        live = {m.digest for d, m in self._owner.items() if d in digests}
        self._owner = {d: m for d, m in self._owner.items() if m.digest in live}
        return {d: m for d, m in self._owner.items() if d in digests}


def by_download_slots(
    ingests: list[Ingest], per_pull: int, now: float, stall_after: float
) -> list[Pull]:
    """Pulls in progress estimated from the ingests alone: the moving ones, then the
    stalled ones, in the order they started, `per_pull` to a pull (0: no limit, one pull).
    Such a pull has no sources: its image is not known."""
    pulls = []
    blobs = [i for i in ingests if i.digest is not None]
    stalled = [i for i in blobs if Pull(i.ref, ingests=[i]).stalled(now, stall_after)]
    stuck = set(stalled)
    moving = [i for i in blobs if i not in stuck]
    for part in (moving, stalled):
        part.sort(key=lambda i: (i.started_at or 0.0, i.ref))
        size = per_pull or len(part) or 1
        for first in range(0, len(part), size):
            chunk = part[first : first + size]
            pulls.append(Pull(key=chunk[0].digest, ingests=chunk))
    return sorted(pulls, key=lambda p: p.key)


def group(ingests: list[Ingest], owners: dict[str, Manifest]) -> list[Pull]:
    """Pulls in progress from the active ingests and the manifests that claim them."""
    pulls: dict[str, Pull] = {}
    for ingest in ingests:
        digest = ingest.digest
        if digest is None:
            continue
        owner = owners.get(digest)
        if owner is None:
            key = digest
            pull = pulls.setdefault(key, Pull(key=key))
        else:
            key = owner.digest
            pull = pulls.setdefault(
                key, Pull(key=key, sources=owner.sources, manifest_created_at=owner.created_at)
            )
        pull.ingests.append(ingest)
    return sorted(pulls.values(), key=lambda p: p.key)
