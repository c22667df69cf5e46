"""The kubelet's config file through collectors/imagepull/kubelet.py.

Documented behaviour: read() never raises for a bad file; it returns None and keeps the
error (the kubelet series are then absent), marked either unknown (a version, kind or
policy not met: the collector fails) or refused (the kubelet refuses it), never both.
Invariants: settings, when read, are a boolean and a limit of 1 when pulls are serialized,
>= 0 otherwise; a re-verification policy from the fixed set (a label value) and an
allowlist of valid patterns only under NeverVerifyAllowlistedImages; a bad file leaves no
settings of an earlier good one.
"""

from __future__ import annotations

import os

from fuzz import InvariantBroken, scratch
from kube_scale_exporter.collectors.imagepull.kubelet import (
    VERIFICATION_DISABLED,
    VERIFICATION_POLICIES,
    KubeletConfigFile,
    allowlist_pattern_error,
)

TARGETS = ("kube_scale_exporter.collectors.imagepull.kubelet",)
INSTRUMENT = ("yaml",)
_path = ""
GOOD = b"serializeImagePulls: false\nmaxParallelImagePulls: 5\n"


def prepare() -> None:
    global _path
    _path = f"{scratch('kubelet')}/config.yaml"
    os.makedirs(os.path.dirname(_path), exist_ok=True)


def check(data: bytes) -> None:
    reader = KubeletConfigFile(_path)
    _write(GOOD, 1)
    if reader.read() is None:
        raise InvariantBroken(f"the good file did not read: {reader.error}")
    _write(data, 2)  # another mtime: read again
    got = reader.read()
    if got is None:
        if not reader.error:
            raise InvariantBroken("no settings and no error")
        if reader.unknown and reader.refused:
            raise InvariantBroken(f"both unknown and refused: {reader.error}")
        return
    if got.verification_policy not in (*VERIFICATION_POLICIES, VERIFICATION_DISABLED):
        raise InvariantBroken(f"policy {got.verification_policy!r}")
    if got.allowlist and (
        got.verification_policy != "NeverVerifyAllowlistedImages"
        or any(allowlist_pattern_error(p) for p in got.allowlist)
    ):
        raise InvariantBroken(f"allowlist {got.allowlist!r} under {got.verification_policy}")
    if reader.error is not None or not isinstance(got.serialize, bool):
        raise InvariantBroken(f"{got} with error {reader.error!r}")
    if got.serialize and got.max_parallel != 1:
        raise InvariantBroken(f"serialized with a limit of {got.max_parallel}")
    if not isinstance(got.max_parallel, int) or got.max_parallel < 0:
        raise InvariantBroken(f"limit {got.max_parallel!r}")


def _write(data: bytes, mtime: int) -> None:
    with open(_path, "wb") as f:
        f.write(data)
    os.utime(_path, ns=(mtime, mtime))
