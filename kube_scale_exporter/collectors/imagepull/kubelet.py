"""The kubelet's pull settings, read from its config file (mounted read-only).

What the kubelet 1.37 reads and defaults, from its source (k8s.io/kubelet v0.37.2
config/v1beta1/types.go; k8s.io/kubernetes v1.37.2 pkg/kubelet/apis/config/v1beta1/defaults.go
and validation/validation.go; pkg/kubelet/images/pullmanager/image_pull_policies.go):

- serializeImagePulls: unset, true unless maxParallelImagePulls is 2 or more;
  maxParallelImagePulls: 1 or more, at most 1 while pulls are serialized.
- imagePullCredentialsVerificationPolicy (KEP-2535, feature gate
  KubeletEnsureSecretPulledImages, beta and on by default since 1.35): NeverVerify,
  NeverVerifyPreloadedImages (the default), NeverVerifyAllowlistedImages or AlwaysVerify.
  With the gate off (`featureGates: {KubeletEnsureSecretPulledImages: false}`) the
  kubelet checks no credentials and refuses a policy or an allowlist in the file.
- preloadedImagesVerificationAllowlist: only with NeverVerifyAllowlistedImages; image
  names without tag or digest, or a prefix ending in `/*`.

Nothing is guessed at. A file of a version, kind or policy value the kubelet 1.37 does not
have may be a newer kubelet's: UnknownKubeletConfig, which fails the collector, naming it
(as containerd's config of an unknown version does). A file the kubelet 1.37 refuses (not
YAML, a field of the wrong type, a rule above broken) holds no settings the kubelet runs
with: its series are absent, as while the file is missing, and the error names the field.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass

from kube_scale_exporter.files import KUBELET_CONFIG_BYTES, read_capped

log = logging.getLogger(__name__)

DEFAULT_KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
# The config file versions whose pull fields are known here (1.37 reads v1beta1 only). A
# file of another version is reported, not guessed at: its fields may mean something else.
KNOWN_API_VERSIONS = ("kubelet.config.k8s.io/v1beta1",)
# imagePullCredentialsVerificationPolicy's values, in the order the kubelet's own error
# lists them, from the least to the most re-verification.
VERIFICATION_POLICIES = (
    "NeverVerify",
    "NeverVerifyPreloadedImages",
    "NeverVerifyAllowlistedImages",
    "AlwaysVerify",
)
DEFAULT_VERIFICATION_POLICY = "NeverVerifyPreloadedImages"
VERIFICATION_GATE = "KubeletEnsureSecretPulledImages"
# The policy label's fifth value: the file turns the feature gate off, nothing is verified.
VERIFICATION_DISABLED = "Disabled"
ALLOWLIST_FIELD = "preloadedImagesVerificationAllowlist"
POLICY_FIELD = "imagePullCredentialsVerificationPolicy"

# github.com/distribution/reference's grammar (what the kubelet parses an allowlist entry
# with): an optional registry host (with a port), then lower-case path components.
_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_NAME = re.compile(rf"(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*")


class UnknownKubeletConfig(ValueError):
    """A version, kind or value the kubelet 1.37 does not have, maybe a newer kubelet's:
    nothing is read from the file, and the collector fails, naming it."""


@dataclass(frozen=True)
class KubeletPullSettings:
    serialize: bool
    max_parallel: int  # 0: no limit
    # The credential re-verification policy in force: one of VERIFICATION_POLICIES, or
    # VERIFICATION_DISABLED.
    verification_policy: str = DEFAULT_VERIFICATION_POLICY
    allowlist: tuple[str, ...] = ()
    policy_set: bool = False  # written in the file, not the kubelet's default

    @classmethod
    def from_config(cls, doc) -> KubeletPullSettings:
        if not isinstance(doc, dict):
            raise TypeError("not a KubeletConfiguration mapping")
        api_version, kind = doc.get("apiVersion"), doc.get("kind")
        if kind not in (None, "KubeletConfiguration"):
            raise UnknownKubeletConfig(f"kind {str(kind)[:64]!r}, not KubeletConfiguration")
        if api_version is not None and api_version not in KNOWN_API_VERSIONS:
            raise UnknownKubeletConfig(
                f"apiVersion {str(api_version)[:64]!r} is not one this exporter knows "
                f"({', '.join(KNOWN_API_VERSIONS)})"
            )
        serialize, max_parallel = _pull_slots(doc)
        policy, allowlist, policy_set = _verification(doc)
        return cls(serialize, max_parallel, policy, allowlist, policy_set)


def _pull_slots(doc: dict) -> tuple[bool, int]:
    """(serializeImagePulls, pulls at once: 1 when serialized, else the limit or 0)."""
    serialize = doc.get("serializeImagePulls")
    limit = doc.get("maxParallelImagePulls")
    if serialize is not None and not isinstance(serialize, bool):
        raise TypeError(f"serializeImagePulls is {_shown(serialize)}, not true/false")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise ValueError(f"maxParallelImagePulls is {_shown(limit)}, not a whole number >= 1")
    if serialize is None:
        # The kubelet's default: serialized unless a limit of 2 or more is given.
        serialize = limit is None or limit < 2
    if serialize and limit is not None and limit > 1:
        raise ValueError(
            f"maxParallelImagePulls is {limit} with serializeImagePulls true: the kubelet "
            f"refuses this file (a limit above 1 needs serializeImagePulls: false)"
        )
    return serialize, 1 if serialize else (limit or 0)


def _verification(doc: dict) -> tuple[str, tuple[str, ...], bool]:
    """(policy in force, allowlist, policy written in the file)."""
    gates = doc.get("featureGates")
    if gates is not None and not isinstance(gates, dict):
        raise TypeError(f"featureGates is {_shown(gates)}, not a mapping")
    gate = (gates or {}).get(VERIFICATION_GATE)
    if gate is not None and not isinstance(gate, bool):
        raise TypeError(f"featureGates.{VERIFICATION_GATE} is {_shown(gate)}, not true/false")
    policy = doc.get(POLICY_FIELD)
    if policy is not None and not isinstance(policy, str):
        raise TypeError(f"{POLICY_FIELD} is {_shown(policy)}, not a string")
    allowlist = doc.get(ALLOWLIST_FIELD)
    if allowlist is not None and (
        not isinstance(allowlist, list) or not all(isinstance(p, str) for p in allowlist)
    ):
        raise TypeError(f"{ALLOWLIST_FIELD} is {_shown(allowlist)}, not a list of image names")
    allowlist = tuple(allowlist or ())
    if gate is False:
        if policy or allowlist:
            field = POLICY_FIELD if policy else ALLOWLIST_FIELD
            raise ValueError(
                f"{field} is set while featureGates.{VERIFICATION_GATE} is false: the "
                f"kubelet refuses this file"
            )
        return VERIFICATION_DISABLED, (), False
    if policy and policy not in VERIFICATION_POLICIES:
        # Not the kubelet 1.37's: a newer kubelet's, or a typo it refuses. Either way what
        # it re-verifies is not known here.
        raise UnknownKubeletConfig(
            f"{POLICY_FIELD} {policy[:64]!r} is not one this exporter knows "
            f"({', '.join(VERIFICATION_POLICIES)})"
        )
    if allowlist and policy != "NeverVerifyAllowlistedImages":
        raise ValueError(
            f"{ALLOWLIST_FIELD} is set while {POLICY_FIELD} is "
            f"{policy or DEFAULT_VERIFICATION_POLICY + ' (the default)'}: the kubelet "
            f"refuses this file (the list needs NeverVerifyAllowlistedImages)"
        )
    for pattern in allowlist:
        why = allowlist_pattern_error(pattern)
        if why:
            raise ValueError(
                f"{ALLOWLIST_FIELD} entry {pattern[:64]!r}: {why}; the kubelet refuses this file"
            )
    return policy or DEFAULT_VERIFICATION_POLICY, allowlist, bool(policy)


def allowlist_pattern_error(pattern: str) -> str | None:
    """Why the kubelet refuses `pattern` as an allowlist entry (getAllowlistImagePattern in
    image_pull_policies.go), or None."""
    if pattern != pattern.strip():
        return "leading or trailing spaces"
    wildcard = pattern.endswith("/*")
    name = pattern[:-1] if wildcard else pattern
    if not name:
        return "empty"
    if "*" in name:
        return "a wildcard only as a whole last path segment ('/*')"
    if wildcard:
        return "a registry host is needed before '/*'" if name == "/" else None
    if "@" in name or ":" in name.rpartition("/")[2]:
        return "neither a tag nor a digest is allowed"
    if len(name) > 255 or not _IMAGE_NAME.fullmatch(name):
        return "not an image name (lower-case path components, an optional registry host)"
    return None


def allowlisted(allowlist, name: str) -> bool:
    """Whether an image name without tag or digest (as a pod writes it) is in the
    allowlist, matched as the kubelet does: the whole name, or a `/*` entry's prefix."""
    return any(name.startswith(p[:-1]) if p.endswith("/*") else name == p for p in allowlist or ())


def _shown(value) -> str:
    return repr(value)[:64]


class KubeletConfigFile:
    """The kubelet's config file, parsed again only when its stat changes."""

    def __init__(self, path: str):
        self.path = path
        self._stat = None
        self._settings: KubeletPullSettings | None = None
        self.error: str | None = None
        # The error is an UnknownKubeletConfig: the collector fails rather than go without.
        self.unknown = False
        # The error is the file's content, which the kubelet refuses (not YAML, a wrong
        # type, a rule broken), not its absence or its mount.
        self.refused = False

    def read(self) -> KubeletPullSettings | None:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            self._stat, self._settings, self.unknown, self.refused = None, None, False, False
            error = f"kubelet config {self.path}: {exc.strerror}"
            if error != self.error:  # once, not every scrape
                log.warning("%s: the kubelet's pull series are absent", error)
            self.error = error
            return None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._stat:
            import yaml  # noqa: PLC0415  (only where the kubelet's config is there to read)

            self._stat = key
            try:
                data = read_capped(self.path, KUBELET_CONFIG_BYTES, "KUBELET_CONFIG_BYTES")
                self._settings = KubeletPullSettings.from_config(yaml.safe_load(data))
                self.error, self.unknown, self.refused = None, False, False
            except (OSError, yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
                self._settings = None
                self.error = f"kubelet config {self.path}: {exc}"
                self.unknown = isinstance(exc, UnknownKubeletConfig)
                self.refused = not self.unknown and not isinstance(exc, OSError)
                log.warning("%s", self.error)
        return self._settings
