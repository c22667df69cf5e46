"""A read-only containerd client: content ingests, content labels and image names.

It speaks gRPC on containerd's socket through grpcio's generic calls, with the few
messages it needs encoded and decoded by `wire` from the field numbers of containerd's
public API (api/services/content/v1 and images/v1, stable since containerd 1.0). grpcio
is imported when a client is made, so the exporter only pays for it when the imagepull
collector runs.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from exporter.containerd import wire

DEFAULT_ADDRESS = "/run/containerd/containerd.sock"
LIST_STATUSES = "/containerd.services.content.v1.Content/ListStatuses"
LIST_CONTENT = "/containerd.services.content.v1.Content/List"
LIST_IMAGES = "/containerd.services.images.v1.Images/List"
# containerd reads the namespace of every call from this gRPC metadata key.
NAMESPACE_HEADER = "containerd-namespace"


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
    return Ingest(ref=wire.string(f[3]), offset=wire.int64(f[4]), total=wire.int64(f[5]),
                  started_at=wire.timestamp(f[1]), updated_at=wire.timestamp(f[2]))


def _content_info(buf: bytes) -> ContentInfo:
    f = wire.fields(buf)
    return ContentInfo(digest=wire.string(f[1]), size=wire.int64(f[2]),
                       created_at=wire.timestamp(f[3]), labels=wire.string_map(f[5]))


def socket_path(address: str) -> str:
    """The filesystem path of a containerd address given as PATH or unix://PATH."""
    return address.removeprefix("unix://")


class ContainerdClient:
    """Short, timed, read-only calls to one containerd namespace over one gRPC channel."""

    def __init__(self, address: str, namespace: str, timeout: float):
        import grpc  # noqa: PLC0415  (imported only when the imagepull collector runs)

        self._grpc = grpc
        self.path = socket_path(address)
        self.namespace = namespace
        self.timeout = timeout
        self._metadata = ((NAMESPACE_HEADER, namespace),)
        self._channel = grpc.insecure_channel(
            "unix:" + self.path,
            options=[
                # Recover within seconds when containerd restarts, not grpc's 2 minutes.
                ("grpc.initial_reconnect_backoff_ms", 500),
                ("grpc.min_reconnect_backoff_ms", 500),
                ("grpc.max_reconnect_backoff_ms", 5000),
                ("grpc.max_receive_message_length", 64 << 20),
                # No process-wide subchannel sharing: close() must really close.
                ("grpc.use_local_subchannel_pool", 1),
            ],
        )
        identity = lambda b: b  # noqa: E731  (bytes in, bytes out: wire does the work)
        self._list_statuses = self._channel.unary_unary(
            LIST_STATUSES, request_serializer=identity, response_deserializer=identity)
        self._list_images = self._channel.unary_unary(
            LIST_IMAGES, request_serializer=identity, response_deserializer=identity)
        self._list_content = self._channel.unary_stream(
            LIST_CONTENT, request_serializer=identity, response_deserializer=identity)

    def _check_socket(self) -> None:
        try:
            mode = os.stat(self.path).st_mode
        except FileNotFoundError:
            raise ContainerdError(f"containerd socket {self.path} does not exist "
                                  "(--containerd.address)") from None
        except OSError as exc:
            raise ContainerdError(f"containerd socket {self.path}: {exc.strerror}") from None
        if not stat.S_ISSOCK(mode):
            raise ContainerdError(f"{self.path} is not a socket (--containerd.address)")

    def _error(self, what: str, exc) -> ContainerdError:
        code = exc.code().name if hasattr(exc, "code") else "ERROR"
        details = exc.details() if hasattr(exc, "details") else str(exc)
        return ContainerdError(f"containerd at {self.path} {what}: {code}: {details}")

    def _call(self, what: str, method, request: bytes) -> bytes:
        self._check_socket()
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata)
        except self._grpc.RpcError as exc:
            raise self._error(what, exc) from None

    def ingests(self) -> list[Ingest]:
        """Content.ListStatuses: every unfinished write in the namespace."""
        reply = wire.fields(self._call("ListStatuses", self._list_statuses, b""))
        return [_ingest(s) for s in reply[1]]

    def image_names(self) -> list[str]:
        """Images.List: the names of the images present (tags, digests, CRI image ids)."""
        reply = wire.fields(self._call("Images.List", self._list_images, b""))
        return [wire.string(wire.fields(image)[1]) for image in reply[1]]

    def content(self, *filters: str) -> list[ContentInfo]:
        """Content.List with containerd filters (any may match): committed blobs' info."""
        self._check_socket()
        request = wire.encode_strings(1, filters)
        out = []
        try:
            for chunk in self._list_content(request, timeout=self.timeout,
                                            metadata=self._metadata):
                out.extend(_content_info(info) for info in wire.fields(chunk)[1])
        except self._grpc.RpcError as exc:
            raise self._error("Content.List", exc) from None
        return out

    def close(self) -> None:
        self._channel.close()
