"""A binary's Go build info through containerd/buildinfo.py, as `--containerd.binary` is
read: the ELF header, its section headers and the .go.buildinfo section.

An input is the file's bytes (seeds: the first 64 KiB-bounded parts of real containerd
binaries are too big to keep, so the seeds are small ELF files made the way the Go linker
lays the section out, with the build info text of trixie's 1.7.24 and the module proxy's
2.4.2). Documented error: BuildInfoError. Invariants: a major of 1 or 2, a minor that is
a count or None, and a version text only with a minor.
"""

from __future__ import annotations

from fuzz import InvariantBroken, scratch
from kube_scale_exporter.containerd import buildinfo

TARGETS = ("kube_scale_exporter.containerd.buildinfo",)
_own = ""


def prepare() -> None:
    global _own
    _own = scratch("buildinfo")


def check(data: bytes) -> None:
    path = f"{_own}.bin"
    with open(path, "wb") as f:
        f.write(data)
    try:
        got = buildinfo.read_version(path)
    except buildinfo.BuildInfoError:
        return
    if got.major not in (1, 2):
        raise InvariantBroken(f"major {got.major!r}")
    if got.minor is not None and (not isinstance(got.minor, int) or got.minor < 0):
        raise InvariantBroken(f"minor {got.minor!r}")
    if bool(got.text) != (got.minor is not None):
        raise InvariantBroken(f"text {got.text!r} with minor {got.minor!r}")
