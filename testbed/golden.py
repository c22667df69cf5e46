"""Golden exposition files: a collector's output for fixed input, compared byte for byte.

Set UPDATE_GOLDEN=1 to rewrite the files after a deliberate change, then review the diff.
Every golden file is also linted by `promtool check metrics` of each Prometheus release the
tests run, as Prometheus would see it: tests/test_golden_lint.py, apart, so the comparison
needs no binary.
"""

import os
import subprocess
from pathlib import Path

from kube_scale_exporter.web.exposition import encode_text

from . import prometheus

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "tests" / "golden"


def render(families) -> str:
    return encode_text(families).decode()


def promtool_check(text: str) -> None:
    """Fail on any lint problem the promtool of any Prometheus release the tests run reports
    (naming, units, HELP, counters)."""
    for release in prometheus.RELEASES:
        result = subprocess.run(
            [prometheus.binary(release, "promtool"), "check", "metrics"],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
        )
        problems = (result.stdout + result.stderr).strip()
        assert result.returncode == 0 and not problems, (
            f"promtool {release} check metrics:\n{problems}"
        )


def assert_golden(name: str, families) -> str:
    """Compare the exposition of `families` with tests/golden/NAME.prom; returns the text."""
    text = render(families)
    path = GOLDEN_DIR / f"{name}.prom"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"exposition differs from {path}; UPDATE_GOLDEN=1 rewrites it"
    return text


def series_count(text: str) -> int:
    """Series in an exposition: sample lines, not comments."""
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))
