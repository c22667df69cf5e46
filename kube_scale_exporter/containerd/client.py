"""A read-only containerd client: content ingests, content labels and image names.

It speaks gRPC on containerd's socket (`grpc_h2`, over the pure-Python h2 library), with
the few messages it needs encoded and decoded by `wire` from the field numbers of
containerd's public API (api/services/content/v1 and images/v1, stable since containerd
1.0). h2 is imported when a client is made, so the exporter only pays for it when the
imagepull collector runs. docs/imagepull.md has the measurements behind this choice.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from kube_scale_exporter.containerd import wire

DEFAULT_ADDRESS = "/run/containerd/containerd.sock"
LIST_STATUSES = "/containerd.services.content.v1.Content/ListStatuses"
LIST_CONTENT = "/containerd.services.content.v1.Content/List"
LIST_IMAGES = "/containerd.services.images.v1.Images/List"
VERSION = "/containerd.services.version.v1.Version/Version"
HERE = "kube_scale_exporter/containerd/client.py"
# containerd reads the namespace of every call from this gRPC metadata key.
NAMESPACE_HEADER = "containerd-namespace"

# Response caps per call (bytes, all messages together), far above what a node holds.
# The list calls read items one at a time as they arrive (wire.RepeatedReader), keeping
# only the fields used, so these bound time and bytes read, not memory.
# ListStatuses: ~150 bytes an ingest (ref, sizes, times); a node has tens in flight.
STATUSES_BYTES = 1 << 20
# Images.List: ~0.5-1 KB an image (name, target descriptor, labels, times); a node with
# thousands of images (each under 2-3 names) stays under a few MiB.
IMAGES_BYTES = 16 << 20
# Content.List of manifests and indexes: 1-3 KB each with their gc.ref labels, ~2 per
# image present.
CONTENT_BYTES = 16 << 20
# One item, the most a list call holds undecoded: an image or an ingest is under 1 KB, a
# multi-platform index's info with a gc.ref label per platform a few KB.
MAX_ITEM_BYTES = 256 << 10
# Items decoded per call. Bytes alone do not bound the objects: 16 MiB of 5-byte items
# would make 3 million of them (hundreds of bytes each once decoded). Real lists hold
# hundreds to a few thousand.
MAX_ITEMS = 20_000
# Version.Version: two short strings (version, revision).
VERSION_BYTES = 4 << 10


class ContainerdError(Exception):
    """containerd could not be reached or answered with an error; the message says which."""


@dataclass(frozen=True)
class Ingest:
    """An unfinished content write: one blob being downloaded (or left behind)."""

    ref: str
    offset: int
    total: int
    started_at: float | None
    updated_at: float | None

    @property
    def digest(self) -> str | None:
        """The blob digest in a pull's ref ("layer-sha256:..."), None for other writers."""
        kind, sep, digest = self.ref.partition("-")
        return digest if sep and kind in PULL_REF_KINDS and ":" in digest else None

    @property
    def kind(self) -> str:
        return self.ref.partition("-")[0]


# containerd's remotes.MakeRefKey names a pull's ingests "<kind>-<digest>".
PULL_REF_KINDS = frozenset({"layer", "config", "manifest", "index", "attestation", "unknown"})


@dataclass(frozen=True)
class ContentInfo:
    digest: str
    size: int
    created_at: float | None
    labels: dict[str, str] = field(default_factory=dict)


def _ingest(buf: bytes) -> Ingest:
    f = wire.fields(buf)
    return Ingest(
        ref=wire.string(f[3]),
        offset=wire.int64(f[4]),
        total=wire.int64(f[5]),
        started_at=wire.timestamp(f[1]),
        updated_at=wire.timestamp(f[2]),
    )


def _content_info(buf: bytes) -> ContentInfo:
    f = wire.fields(buf)
    return ContentInfo(
        digest=wire.string(f[1]),
        size=wire.int64(f[2]),
        created_at=wire.timestamp(f[3]),
        labels=wire.string_map(f[5]),
    )


def socket_path(address: str) -> str:
    """The filesystem path of a containerd address given as PATH or unix://PATH."""
    return address.removeprefix("unix://")


class ContainerdClient:
    """Short, timed, read-only calls to one containerd namespace, one connection each."""

    def __init__(self, address: str, namespace: str, timeout: float):
        # Here, not at the top: only a node running the imagepull collector pays for
        # importing h2 (hpack, hyperframe).
        from kube_scale_exporter.containerd import grpc_h2  # noqa: PLC0415  (h2 is imported only where imagepull runs)

        self._grpc = grpc_h2
        self.path = socket_path(address)
        self.namespace = namespace
        self.timeout = timeout
        self._metadata = ((NAMESPACE_HEADER, namespace),)

    def _check_socket(self) -> None:
        try:
            mode = os.stat(self.path).st_mode
        except FileNotFoundError:
            raise ContainerdError(
                f"containerd socket {self.path} does not exist (--containerd.address)"
            ) from None
        except OSError as exc:
            raise ContainerdError(f"containerd socket {self.path}: {exc.strerror}") from None
        if not stat.S_ISSOCK(mode):
            raise ContainerdError(f"{self.path} is not a socket (--containerd.address)")

    def _list(self, what: str, method: str, request: bytes, max_bytes: int, cap: str, decode):
        """decode(item) for the items (field 1) of every response message, read as they
        arrive, those that are not None kept: at most MAX_ITEMS items, MAX_ITEM_BYTES an
        item and max_bytes of response."""
        self._check_socket()
        where = f"containerd at {self.path} {what}"
        kept, seen = [], 0

        def keep(item):
            nonlocal seen
            seen += 1
            if seen > MAX_ITEMS:
                raise ContainerdError(f"{where}: more than {MAX_ITEMS} items (MAX_ITEMS in {HERE})")
            value = decode(item)
            if value is not None:
                kept.append(value)

        try:
            self._grpc.call(
                self.path,
                method,
                request,
                self.timeout,
                self._metadata,
                max_bytes=max_bytes,
                stream=lambda: wire.RepeatedReader(1, keep, MAX_ITEM_BYTES),
            )
        except BaseException as exc:
            # The traceback keeps `keep` in a reference cycle until a full collection: it
            # must not keep the items decoded too, on every failing call.
            kept.clear()
            if isinstance(exc, self._grpc.GrpcError):
                named = f" ({cap} in {HERE})" if exc.code == "RESOURCE_EXHAUSTED" else ""
                raise ContainerdError(f"{where}: {exc}{named}") from None
            if isinstance(exc, wire.ItemTooLarge):
                raise ContainerdError(f"{where}: {exc} (MAX_ITEM_BYTES in {HERE})") from None
            if isinstance(exc, wire.WireError):
                raise ContainerdError(f"{where}: not a protobuf reply: {exc}") from None
            raise
        return kept

    def ingests(self) -> list[Ingest]:
        """Content.ListStatuses: every unfinished write in the namespace."""
        return self._list(
            "ListStatuses", LIST_STATUSES, b"", STATUSES_BYTES, "STATUSES_BYTES", _ingest
        )

    def image_names(self, among) -> set[str]:
        """Images.List: which of the names `among` are images present (tags, digests, CRI
        image ids); only those are kept, however many images the node has."""
        among = frozenset(among)

        def name(image):
            found = wire.string(wire.fields(image)[1])
            return found if found in among else None

        return set(self._list("Images.List", LIST_IMAGES, b"", IMAGES_BYTES, "IMAGES_BYTES", name))

    def content(self, *filters: str) -> list[ContentInfo]:
        """Content.List with containerd filters (any may match): committed blobs' info."""
        return self._list(
            "Content.List",
            LIST_CONTENT,
            wire.encode_strings(1, filters),
            CONTENT_BYTES,
            "CONTENT_BYTES",
            _content_info,
        )

    def version(self) -> str:
        """Version.Version: containerd's version string ("1.7.24~ds1", "v2.3.7")."""
        self._check_socket()
        try:
            (reply,) = self._grpc.call(
                self.path, VERSION, b"", self.timeout, self._metadata, max_bytes=VERSION_BYTES
            )
        except (self._grpc.GrpcError, ValueError) as exc:
            raise ContainerdError(f"containerd at {self.path} Version: {exc}") from None
        return wire.string(wire.fields(reply).get(1, []))
