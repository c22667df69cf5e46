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

Without the manifests (the ingest directory read with no socket,
containerd/ingestdir.py) `by_download_slots` estimates the pulls instead: a pull
downloads at most max_concurrent_downloads blobs at once (the CRI of 1.7 here: 3 of a
6-layer image), so the ingests make at least that many fewer pulls; a pull is stalled
only when none of its blobs moves, so idle ingests count as stalled pulls only while no
ingest moves (a client killed beside a live pull is not seen stalled); and the kubelet
runs at most its pull slots at once for at most the images its pods wait for. Exact
while each pull has as many blobs left as it may download at once, or under a kubelet
that pulls one image at a time; pulls near their end, or of images with fewer layers,
that run at the same time count as fewer. On containerd 2.x (2.1, 2.3, 2.4 here) the CRI
opens the ingests of all 6 layers of an image at once and writes 3 of them, through the
transfer service or pulling itself alike: an image with more layers than
max_concurrent_downloads counts as more than one unless the kubelet's slots bound it.
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
    ingests: list[Ingest],
    per_pull: int,
    now: float,
    stall_after: float,
    most_moving: int | None = None,
) -> list[Pull]:
    """Pulls in progress estimated from the ingests alone, `per_pull` blobs to a pull (0:
    no limit). While a blob moves, every blob is a moving pull's, in at most as many pulls
    as blobs move and `most_moving` (the kubelet's bound, when known), each holding one
    that moves; else all are stalled. Such a pull has no sources: its image is not known."""
    blobs = sorted(
        (i for i in ingests if i.digest is not None), key=lambda i: (i.started_at or 0.0, i.ref)
    )
    if not blobs:
        return []
    alive = [i for i in blobs if not Pull(i.ref, ingests=[i]).stalled(now, stall_after)]
    count = -(-len(blobs) // per_pull) if per_pull else 1
    if alive:
        count = min(count, len(alive), most_moving or count)
        moving = set(alive)
        idle = [i for i in blobs if i not in moving]
        order = [*alive, *idle]
    else:
        order = blobs
    parts: list[list[Ingest]] = [[] for _ in range(count)]
    for n, ingest in enumerate(order):
        parts[n % count].append(ingest)
    return sorted((Pull(key=p[0].digest, ingests=p) for p in parts), key=lambda p: p.key)


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
