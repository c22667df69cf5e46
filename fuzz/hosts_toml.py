"""A registry's hosts.toml through containerd/hostsdir.py, as the imagepull collector reads
a host directory on each scrape.

An input is the file's bytes. The harness writes it to <root>/docker.io/hosts.toml in a
directory of its own process and reads the root as containerd's config_path in force on
each pull path. Nothing is documented to raise: every bad file is a verdict. Invariants:
one directory found, its verdict and reason from the fixed sets, its mirror count within
MAX_HOSTS, and an unparsable file `hosts_toml_invalid` with its error named.
"""

from __future__ import annotations

import os

from fuzz import InvariantBroken, scratch
from kube_scale_exporter.containerd import hostsdir

TARGETS = ("kube_scale_exporter.containerd.hostsdir",)
INSTRUMENT = ("tomllib",)
_own = ""


def prepare() -> None:
    global _own
    _own = scratch("hosts-toml")
    os.makedirs(f"{_own}/certs.d/docker.io", exist_ok=True)


def check(data: bytes) -> None:
    root = f"{_own}/certs.d"
    with open(f"{root}/docker.io/hosts.toml", "wb") as f:
        f.write(data)
    for path in ("transfer", "local", "unknown"):
        found = [d for d in hostsdir.read_host_dirs(root, "config", path).dirs if d.root == root]
        if len(found) != 1:
            raise InvariantBroken(f"{path}: {len(found)} directories for one")
        (d,) = found
        if d.verdict not in hostsdir.VERDICTS or d.reason not in hostsdir.REASONS:
            raise InvariantBroken(f"{path}: verdict {d.verdict!r}, reason {d.reason!r}")
        if d.writer not in hostsdir.WRITERS or not 0 <= d.mirrors <= hostsdir.MAX_HOSTS:
            raise InvariantBroken(f"{path}: writer {d.writer!r}, {d.mirrors} mirrors")
        if d.reason == "hosts_toml_invalid" and not d.error:
            raise InvariantBroken(f"{path}: unparsable without an error")
