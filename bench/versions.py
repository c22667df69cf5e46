"""What ran in a bench: our commit and interpreter, the kernel, the peer's own version line."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

from kube_scale_exporter import __version__

REPO = Path(__file__).resolve().parent.parent


def ours() -> str:
    """kube-scale-exporter's version and commit (`+changes` when the code that ran, the
    package, bench/ or testbed/, differs from it; results and docs do not count)."""

    def git(*args):
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=False
        ).stdout.strip()

    code = ("kube_scale_exporter", "bench", "testbed", ":!bench/results")
    dirty = "+changes" if git("status", "--porcelain", "--", *code) else ""
    return f"kube-scale-exporter {__version__} ({git('rev-parse', '--short', 'HEAD')}{dirty})"


def interpreter() -> str:
    return f"Python {platform.python_version()} ({sys.executable})"


def host() -> str:
    return f"{platform.node()} ({platform.machine()}, kernel {platform.release()})"
