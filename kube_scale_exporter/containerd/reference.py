"""Image references as the kubelet writes them, in the full form containerd stores.

A pod says `nginx` or `registry:5000/team/app:v1@sha256:...`; containerd's CRI plugin
names the image record `docker.io/library/nginx:latest` (and `...@sha256:...` for its
repo digest). Comparing the two needs the same normalization the Docker reference
grammar gives: a first path component is a registry host only if it has a `.` or a `:`
or is `localhost`; Docker Hub's one-component names live under `library/`.
"""

from __future__ import annotations

from dataclasses import dataclass

DOCKER_HUB = "docker.io"


@dataclass(frozen=True)
class Reference:
    host: str  # registry host as written, with its port: "127.0.0.1:5000"
    repository: str  # path inside the registry: "library/nginx"
    tag: str | None
    digest: str | None

    @property
    def name(self) -> str:
        """The containerd image name for it: by digest when pinned, else by tag."""
        if self.digest:
            return f"{self.host}/{self.repository}@{self.digest}"
        return f"{self.host}/{self.repository}:{self.tag or 'latest'}"

    @property
    def source(self) -> tuple[str, str]:
        """(host without port, repository): the key containerd's pull records on content
        as the label containerd.io/distribution.source.HOST=REPOSITORY."""
        host = self.host
        if host.startswith("["):
            host = host[1 : host.index("]")]
        elif ":" in host:
            host = host.rpartition(":")[0]
        return host, self.repository


def parse(image: str) -> Reference:
    """Normalize an image reference; raises ValueError on an empty or malformed one."""
    rest, _, digest = image.strip().partition("@")
    if not rest:
        raise ValueError(f"empty image reference {image!r}")
    first, sep, remainder = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        host, path = first, remainder
    else:
        host, path = DOCKER_HUB, rest
    name, tag = path, None
    slash = path.rfind("/")
    colon = path.rfind(":")
    if colon > slash:
        name, tag = path[:colon], path[colon + 1 :]
    if not name or (tag is not None and not tag):
        raise ValueError(f"malformed image reference {image!r}")
    if host == DOCKER_HUB and "/" not in name:
        name = "library/" + name
    if digest and ":" not in digest:
        raise ValueError(f"malformed digest in image reference {image!r}")
    return Reference(host=host, repository=name, tag=tag, digest=digest or None)
