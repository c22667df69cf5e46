"""The balloon exposition for fixed objects, byte for byte (tests/golden/balloon.prom)."""

from datetime import UTC, datetime

import pytest

from kube_scale_exporter import kube
from kube_scale_exporter.collectors.balloon.selector import valid_selector
from kube_scale_exporter.collectors.balloon.state import BalloonState, families, resource_label
from kube_scale_exporter.collectors.balloon.summary import REASONS, summarize
from testbed.golden import GOLDEN_DIR, assert_golden

pytestmark = pytest.mark.unit

DOCS = GOLDEN_DIR.parent.parent / "docs"

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
CLASSES = [
    {"metadata": {"name": "overprovisioning"}, "value": -1},
    {"metadata": {"name": "too-low"}, "value": -100},
]


def balloon(
    name,
    phase,
    node=None,
    created="2026-01-01T11:58:25Z",
    cls="overprovisioning",
    requests=None,
    **extra,
):
    spec = {
        "containers": [
            {"name": "pause", "resources": {"requests": requests or {"cpu": "2", "memory": "4Gi"}}}
        ]
    }
    if cls:
        spec["priorityClassName"] = cls
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "balloons",
            "uid": name,
            "creationTimestamp": created,
            **extra,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


PODS = [
    balloon("a", "Running", node="n1"),
    balloon(
        "b",
        "Running",
        node="n2",
        requests={"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "8", "hugepages-2Mi": "1Gi"},
    ),
    balloon("c", "Running", node="n2", requests={"cpu": "500m", "memory": "512Mi"}),
    balloon("d", "Pending"),  # waits 95 s
    balloon("e", "Pending", created="2026-01-01T11:59:50Z"),  # waits 10 s
    balloon("f", "Pending", node="n3"),  # bound, starting: not waiting for a node
    balloon("g", "Running", node="n3", deletionTimestamp="2026-01-01T11:59:59Z"),  # leaving
    balloon("h", "Failed", node="n1"),
    balloon("i", "Pending", cls="too-low", created="2026-01-01T11:59:00Z"),
    balloon("j", "Pending", cls="gone", created="2026-01-01T11:59:00Z"),
    balloon("k", "Pending", cls=None, requests={"cpu": "64"}, created="2026-01-01T11:59:00Z"),
    balloon("l", "Running", node="n1", requests={"cpu": "0"}),
]
NODES = [
    {
        "cpu": kube.parse_quantity("16"),
        "memory": kube.parse_quantity("64Gi"),
        "nvidia.com/gpu": kube.parse_quantity("8"),
        "hugepages-2Mi": kube.parse_quantity("2Gi"),
    },
    {"cpu": kube.parse_quantity("8"), "memory": kube.parse_quantity("32Gi")},
]


def test_golden_exposition():
    s = summarize(PODS, CLASSES, NODES, NOW, cutoff=-10)
    text = assert_golden(
        "balloon", families(BalloonState(s, preemptions=7, selector="run=balloon", cutoff=-10))
    )
    assert 'kubescale_balloon_pods{phase="Running"} 5.0' in text


def test_summary_values():
    s = summarize(PODS, CLASSES, NODES, NOW, cutoff=-10)
    assert s.phases == {"Pending": 6, "Running": 5, "Succeeded": 0, "Failed": 1, "Unknown": 0}
    assert s.pending_oldest == 95.0
    assert s.nodes == 2  # n1 and n2; n3's only Running balloon is being deleted
    assert float(s.reserved["cpu"]) == 4.5
    assert s.reserved["memory"] == 4 * 2**30 + 4 * 2**30 + 512 * 2**20
    assert s.reserved["nvidia.com/gpu"] == 8
    assert s.misconfigured == {
        "priority_below_autoscaler_cutoff": 1,
        "priority_not_negative": 2,
        "priority_class_missing": 1,
        "requests_fit_no_node": 1,
        "no_requests": 1,
    }


def test_a_pod_that_fits_only_by_combining_two_nodes_does_not_fit():
    pod = balloon("x", "Pending", requests={"cpu": "12", "nvidia.com/gpu": "8"})
    nodes = [
        {"cpu": kube.parse_quantity("16")},
        {"cpu": kube.parse_quantity("8"), "nvidia.com/gpu": kube.parse_quantity("8")},
    ]
    assert summarize([pod], CLASSES, nodes, NOW, -10).misconfigured["requests_fit_no_node"] == 1
    nodes.append({"cpu": kube.parse_quantity("12"), "nvidia.com/gpu": kube.parse_quantity("8")})
    assert summarize([pod], CLASSES, nodes, NOW, -10).misconfigured["requests_fit_no_node"] == 0


def test_resource_labels_follow_kube_state_metrics():
    assert resource_label("cpu") == ("cpu", "core")
    assert resource_label("memory") == ("memory", "byte")
    assert resource_label("hugepages-2Mi") == ("hugepages_2Mi", "byte")
    assert resource_label("nvidia.com/gpu") == ("nvidia_com_gpu", "integer")


def test_selector_syntax():
    for ok in (
        "run=overprovisioning",
        "app.kubernetes.io/name=cluster-overprovisioner",
        "a=b,c!=d",
        "tier in (a, b),!legacy",
        "env notin (x)",
        "exists",
        "a==b",
    ):
        assert valid_selector(ok), ok
    for bad in ("", "a=b,", "=b", "a in b", "a=b c", "a in (b"):
        assert not valid_selector(bad), bad


def test_every_misconfiguration_reason_is_documented():
    for doc in ("balloon.md", "runbooks.md"):
        text = (DOCS / doc).read_text()
        missing = [reason for reason in REASONS if f"`{reason}`" not in text]
        assert not missing, f"docs/{doc} does not explain {missing}"
