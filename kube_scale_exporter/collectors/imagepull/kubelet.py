"""The kubelet's pull settings, read from its config file (mounted read-only)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from kube_scale_exporter.files import KUBELET_CONFIG_BYTES, read_capped

log = logging.getLogger(__name__)

DEFAULT_KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
# The config file versions whose pull fields are known here (1.34 reads v1beta1 only). A
# file of another version is reported, not guessed at: its fields may mean something else.
KNOWN_API_VERSIONS = ("kubelet.config.k8s.io/v1beta1",)


@dataclass(frozen=True)
class KubeletPullSettings:
    serialize: bool
    max_parallel: int  # 0: no limit

    @classmethod
    def from_config(cls, doc) -> KubeletPullSettings:
        if not isinstance(doc, dict):
            raise TypeError("not a KubeletConfiguration mapping")
        api_version, kind = doc.get("apiVersion"), doc.get("kind")
        if kind not in (None, "KubeletConfiguration"):
            raise ValueError(f"kind {str(kind)[:64]!r}, not KubeletConfiguration")
        if api_version is not None and api_version not in KNOWN_API_VERSIONS:
            raise ValueError(
                f"apiVersion {str(api_version)[:64]!r} is not one this exporter knows "
                f"({', '.join(KNOWN_API_VERSIONS)})"
            )
        serialize = doc.get("serializeImagePulls", True)
        limit = doc.get("maxParallelImagePulls")
        if not isinstance(serialize, bool):
            raise TypeError(f"serializeImagePulls is {serialize!r}, not true/false")
        if limit is not None and (
            not isinstance(limit, int) or isinstance(limit, bool) or limit < 1
        ):
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
            import yaml  # noqa: PLC0415  (only where the kubelet's config is there to read)

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
