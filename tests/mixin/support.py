"""What the mixin tests share: the mixin rendered through tools/build_mixin.py, and walkers over it."""

import os
import pathlib
import re
import shutil
import subprocess

import pytest

from testbed import prometheus
from tools import build_mixin as build  # noqa: F401  (re-exported: the mixin tests import it from here)

REPO = pathlib.Path(__file__).resolve().parents[2]
# The Prometheus releases every rule test runs on (3.13, the LTS, and 3.16).
PROMETHEUS_RELEASES = prometheus.RELEASES
PROMTOOL_TESTS = sorted((REPO / "tests" / "mixin" / "promtool").glob("*_test.yaml"))

# Every knob a test checks, changed at once: one more jsonnet evaluation instead of one per knob.
CUSTOM_CONFIG = {
    "prometheusSelfProtection": True,
    "clusterLabel": "k8s_cluster",
    "showMultiCluster": True,
    "nodeLabel": "kubernetes_node",
    "criticalSeverity": "warning",
    "runbookURLPattern": "https://runbooks.example/%s",
}
# Every alert group, the opt-in ones included.
EVERYTHING = {"prometheusSelfProtection": True}

_versions = {}


def prometheus_binary(release: str, name: str) -> str:
    """`name` (promtool or prometheus) of a release, checked to run and to be the version its
    go.mod pins; missing or another version fails the test (.ci/run builds both), never skips."""
    try:
        path = prometheus.binary(release, name)
    except FileNotFoundError as e:
        pytest.fail(f"{name} {release} not found: {e}")
    if path not in _versions:
        out = subprocess.run([path, "--version"], capture_output=True, text=True)
        match = re.search(r"version (\S+)", out.stdout + out.stderr)
        _versions[path] = match.group(1) if match else "?"
    found, pinned = _versions[path], prometheus.version(release)
    if found != pinned:
        pytest.fail(f"{path} is {name} {found}, not {pinned} (.ci/go/prometheus-{release})")
    return path


def prometheus_version(path: str) -> str:
    """The version string of a binary prometheus_binary() checked."""
    return _versions[path]


def binary(name: str) -> str:
    """A tool the tests need; missing fails the test (.ci/run installs it), never skips."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found on PATH: install it (apt-get install jsonnet)")
    return path


def alert_rules(m):
    return [r for g in m["alerts"]["groups"] for r in g["rules"]]


def recording_rules(m):
    return [r for g in m["rules"]["groups"] for r in g["rules"]]


def panels(dashboard):
    """Every panel, rows' nested panels included."""
    for p in dashboard["panels"]:
        yield p
        yield from p.get("panels", [])


def dashboard_queries(dashboard):
    """(panel title, expr) of every panel target and every query variable."""
    for p in panels(dashboard):
        for t in p.get("targets", []):
            yield p.get("title", ""), t["expr"]
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            yield f"variable {v['name']}", v["query"]["query"]


# VictoriaMetrics single-node, vmalert and vmalert-tool: Debian sid's, unpacked into a cache by
# .ci/setup.d/17-victoria-metrics-sid.sh (the same variables override them). Debian's build
# prints no version: the package's is in the cache's `version` file.
VM_CACHE = "/var/cache/kube-scale-exporter/victoria-metrics-sid"
VM_BINARIES = {
    "victoria-metrics": "VICTORIA_METRICS_BIN",
    "vmalert": "VMALERT_BIN",
    "vmalert-tool": "VMALERT_TOOL_BIN",
}


def victoria_metrics_binary(name: str) -> str:
    """victoria-metrics, vmalert or vmalert-tool; missing fails the test, never skips."""
    path = os.environ.get(VM_BINARIES[name], f"{VM_CACHE}/root/usr/bin/{name}")
    if not os.access(path, os.X_OK):
        pytest.fail(f"{name} not found ({path}): run .ci/setup.d/17-victoria-metrics-sid.sh")
    return path


def victoria_metrics_version() -> str:
    """The Debian package version of the cached VictoriaMetrics (e.g. 1.145.0+ds1-2)."""
    version = pathlib.Path(VM_CACHE, "version")
    return version.read_text().strip() if version.exists() else "unknown (binaries overridden)"
