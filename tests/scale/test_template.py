"""The series template the scale bench and budgets rest on is what the exporter exports."""

import pytest
import requests

from bench.scale import template
from bench.scale.target import Fleet
from testbed.exporter import start_exporter
from testbed.golden import promtool_check
from testbed.metrics import parse_exposition


@pytest.mark.integration
def test_real_node_mode_exporter_emits_nothing_the_template_lacks(tmp_path):
    """Run the exporter in node mode with its default collectors and scrape it: every
    series name it emits must be in the node template, or the budget would undercount."""
    exporter = start_exporter(["--mode", "node"], tmp_path)
    try:
        text = requests.get(exporter.url + "/metrics", timeout=30).text
    finally:
        exporter.proc.stop()
    emitted = {s.name for fam in parse_exposition(text) for s in fam.samples}
    known = {s.name for s in template.load("node").series}
    assert emitted, text
    assert emitted <= known, (
        f"exporter emits series the scale template lacks: {sorted(emitted - known)}"
    )


@pytest.mark.unit
def test_template_sources_cover_default_collectors():
    node = template.load("node")
    cluster = template.load("cluster")
    for t in (node, cluster):
        owners = {template.owner(s.family) for s in t.series}
        assert "unknown" not in owners
        for collector, source in t.sources.items():
            # The exporter's own series are documented by the module that makes them.
            assert source == "builtin" or source.startswith(("golden:", "kube_scale_exporter/")), (
                collector,
                source,
            )
            if collector not in ("exporter",):
                assert collector in owners, f"{t.mode}: no series for {collector}"
    # Node mode never carries node/pod/instance labels: Prometheus adds the target labels.
    assert not any({"node", "pod", "instance"} & dict(s.labels).keys() for s in node.series)


@pytest.mark.integration
def test_synthetic_target_serves_lint_clean_expositions():
    fleet = Fleet(nodes=3, origin=0)
    for path in ("/node/0", "/node/2", "/cluster"):
        promtool_check(fleet.body(path).decode())
    assert fleet.body("/node/3") is None
    node_body = fleet.body("/node/1").decode()
    assert sum(1 for line in node_body.splitlines() if not line.startswith("#")) == len(
        template.load("node")
    )
