"""What the mixin tests share: the mixin rendered through tools/build_mixin.py, and walkers over it."""
import pathlib
import shutil

import pytest

from tools import build_mixin as build

REPO = pathlib.Path(__file__).resolve().parents[2]
PROMTOOL_TESTS = sorted((REPO / "tests" / "mixin" / "promtool").glob("*_test.yaml"))

# Every knob a test checks, changed at once: one more jsonnet evaluation instead of one per knob.
CUSTOM_CONFIG = {
    "clusterLabel": "k8s_cluster",
    "showMultiCluster": True,
    "nodeLabel": "kubernetes_node",
    "criticalSeverity": "warning",
    "runbookURLPattern": "https://runbooks.example/%s",
}




def binary(name: str) -> str:
    """A tool the tests need; missing fails the test (.ci/run installs it), never skips."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found on PATH: install it (apt-get install prometheus / jsonnet)")
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
