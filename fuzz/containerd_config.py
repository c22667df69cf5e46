"""containerd's config.toml and its imports through containerd/config.py, as each
containerd version reads them.

An input is the main file, then the drop-ins FILES/conf.d/01.toml, 02.toml, ... in order,
separated by NUL bytes. The harness writes them to a directory of its own process, FILES
in the input read as that directory (so a seed's absolute import holds in every replay,
and a replay beside a fuzzing run does not share its files), and reads them as
containerd 1.6, 1.7, 2.1 (2.0-2.2's rules), 2.3, 2.4 and an unknown version would.

Documented error: ConfigError (UnknownConfigVersion among them). Invariants: the settings
are a count >= 0, a finite timeout >= 0 (None only for an unknown 1.x), the files read
start with the main file and are no more than MAX_FILES, and the key in force is the
transfer service's exactly when the CRI pulls through it (never with a fallback), the pull
path and its reason from their fixed sets, and a config_path unknown exactly when its
setter is.
"""

from __future__ import annotations

import math
import os

from fuzz import SCRATCH, InvariantBroken, scratch
from kube_scale_exporter.containerd import config

TARGETS = ("kube_scale_exporter.containerd.config", "kube_scale_exporter.durations")
INSTRUMENT = ("tomllib",)
FILES = f"{SCRATCH}/containerd"
VERSIONS = (None, (1, 6), (1, 7), (2, 1), (2, 3), (2, 4))


def join(files: list[bytes]) -> bytes:
    return b"\0".join(files)


_own = ""


def prepare() -> None:
    global _own
    _own = scratch("containerd")
    os.makedirs(f"{_own}/conf.d", exist_ok=True)


def check(data: bytes) -> None:
    own = _own
    main, *drop_ins = data.replace(FILES.encode(), own.encode()).split(b"\0")[
        : config.MAX_FILES + 2
    ]
    path = f"{own}/config.toml"
    with open(path, "wb") as f:
        f.write(main)
    names = {f"{i:02}.toml" for i in range(1, len(drop_ins) + 1)}
    for old in set(os.listdir(f"{own}/conf.d")) - names:
        os.unlink(f"{own}/conf.d/{old}")
    for i, text in enumerate(drop_ins, 1):
        with open(f"{own}/conf.d/{i:02}.toml", "wb") as f:
            f.write(text)
    for version in VERSIONS:
        try:
            got = config.settings(path, version)
        except config.ConfigError:
            continue
        _valid(got, version, path)


def _valid(got: config.PullSettings, version, path: str) -> None:
    if not isinstance(got.max_concurrent_downloads, int) or got.max_concurrent_downloads < 0:
        raise InvariantBroken(
            f"{version}: max_concurrent_downloads {got.max_concurrent_downloads!r}"
        )
    timeout = got.progress_timeout
    if timeout is None:
        if version is not None:
            raise InvariantBroken(f"{version}: no timeout for a known version")
    elif not (isinstance(timeout, float) and math.isfinite(timeout) and timeout >= 0):
        raise InvariantBroken(f"{version}: progress_timeout {timeout!r}")
    if not got.files or got.files[0] != path or len(got.files) > config.MAX_FILES:
        raise InvariantBroken(f"{version}: files {got.files[:3]}")
    if got.transfer != (config.TRANSFER in got.downloads_key) or (got.transfer and got.fallback):
        raise InvariantBroken(f"{version}: transfer {got.transfer}, {got.downloads_key}")
    if (
        got.pull_path not in ("transfer", "local", "unknown")
        or (got.pull_path == "transfer") != got.transfer
    ):
        raise InvariantBroken(f"{version}: pull path {got.pull_path!r}, transfer {got.transfer}")
    if got.pull_reason not in config.PULL_REASONS:
        raise InvariantBroken(f"{version}: pull reason {got.pull_reason!r}")
    if got.config_path_set_by not in ("config", "default", "none", "unknown") or (
        got.config_path is None
    ) != (got.config_path_set_by == "unknown"):
        raise InvariantBroken(
            f"{version}: config_path {got.config_path!r}, {got.config_path_set_by}"
        )
