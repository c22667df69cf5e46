"""node_exporter, the peer the node benches run beside ours: which binary, which version.

The binary is the one a bench is given, else $NODE_EXPORTER_BIN, else the one
.ci/bench.d/16-node-exporter.sh built from the Go module proxy (testbed/builds.py).
"""

from __future__ import annotations

import os
import subprocess

from . import builds


def binary(given: str | None = None) -> str:
    if given:
        if not os.access(given, os.X_OK):
            raise SystemExit(f"no node_exporter at {given}")
        return given
    try:
        return builds.node_exporter_binary()
    except FileNotFoundError as e:
        raise SystemExit(f"{e}, or give its path (--node-exporter or NODE_EXPORTER_BIN)") from e


def version(path: str) -> str:
    """The first line of `--version`, e.g. `node_exporter, version 1.11.1 (branch: ...)`."""
    done = subprocess.run([path, "--version"], capture_output=True, text=True, check=True)
    return (done.stdout or done.stderr).splitlines()[0].strip()


def argv(path: str, port: int, flags: list[str]) -> list[str]:
    return [path, *flags, f"--web.listen-address=127.0.0.1:{port}"]
