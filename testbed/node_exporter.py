"""node_exporter, the peer the node benches run beside ours: which binary, which version.

The binary is the one a bench is given, else $NODE_EXPORTER_BIN, else the one
.ci/setup.d/16-node-exporter-sid.sh unpacked (Debian sid's: the current upstream release).
"""

from __future__ import annotations

import os
import subprocess

CACHED = "/var/cache/kube-scale-exporter/node-exporter-sid/root/usr/bin/prometheus-node-exporter"


def binary(given: str | None = None) -> str:
    path = given or os.environ.get("NODE_EXPORTER_BIN") or CACHED
    if not os.access(path, os.X_OK):
        raise SystemExit(
            f"no node_exporter at {path}: run .ci/setup.d/16-node-exporter-sid.sh, or give "
            "its path (--node-exporter or NODE_EXPORTER_BIN)"
        )
    return path


def version(path: str) -> str:
    """The first line of `--version`, e.g. `node_exporter, version 1.11.1 (branch: ...)`."""
    done = subprocess.run([path, "--version"], capture_output=True, text=True, check=True)
    return (done.stdout or done.stderr).splitlines()[0].strip()


def argv(path: str, port: int, flags: list[str]) -> list[str]:
    return [path, *flags, f"--web.listen-address=127.0.0.1:{port}"]
