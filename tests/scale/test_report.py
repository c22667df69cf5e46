"""bench.scale.report: what it says sets the fit run's segments, and which fleet the rule
groups' samples bound (budget.GROUP_SAMPLES) is checked on."""

import pytest

from bench.scale import budget, queries, report
from bench.scale.measure import Measured, Run, SegmentReport
from bench.scale.prom import Result
from bench.scale.synth import REALISTIC, THRESHOLDS

pytestmark = pytest.mark.unit

GROUP = "kube-scale-exporter-imagepull-views.rules"


def _run(fleet, nodes=(budget.TARGET_NODES,), length=4500, samples=480_027, cpu=0.5):
    segments = [
        SegmentReport(
            nodes=n,
            start=0,
            end=length,
            measured=[
                Measured(
                    queries.Query("record", GROUP, "cluster:x:sum", "sum(x)"),
                    Result(
                        series=1, samples=samples, peak=1, wall=0.1, engine=0.1, max_step_samples=1
                    ),
                )
            ],
            node_series_max=50,
            node_series_prometheus=55,
            cluster_series=100,
            variables={},
            group_cost={GROUP: {"cpu": cpu, "wall": cpu, "interval": 240.0}},
        )
        for n in nodes
    ]
    return Run(
        segments=segments,
        samples_written=1_000,
        synth_seconds=1.0,
        openmetrics_bytes=1_000,
        backfill_seconds=1.0,
        rule_passes=[],
        tsdb_bytes=1_000,
        template_sources={"node": {}, "cluster": {}},
        template_series={"node": 50, "cluster": 100},
        fleet=fleet,
    )


def test_a_group_over_group_samples_on_the_thresholds_fleet_is_said_not_to_be_its_budget():
    text = report.render({}, None, _run(THRESHOLDS), None)
    assert "**OVER**" not in text
    assert f"{GROUP} touches 480,027 samples per evaluation on this fleet" in text
    assert "not a budget of this fleet" in text
    assert f"on the {REALISTIC} fleet only" in text
    assert "0.50 CPU-seconds per evaluation, measured: holds" in text


def test_a_group_over_group_samples_on_the_realistic_fleet_is_over():
    assert budget.GROUP_SAMPLES_FLEET == REALISTIC
    text = report.render({}, None, _run(REALISTIC), None)
    assert f"- **OVER**: rule group {GROUP} touches 480,027 samples per evaluation" in text


def test_the_fit_run_says_what_sets_its_segments():
    h = queries.history(queries.load_rule_groups(), queries.dashboards())
    fit = _run(REALISTIC, nodes=(250, 1000), length=h.seconds, samples=1_000, cpu=0.01)
    text = report.render({}, fit, None, None)
    assert f"each {report._h(h.seconds)} at 30 s" in text
    for name in (h.alert, h.record):
        assert f"`{name}` reads" in text
    assert f"{report._h(h.lookback)} lookback" in text
    # Another length came from --fit-window, and says so.
    other = _run(REALISTIC, nodes=(250, 1000), length=7200, samples=1_000, cpu=0.01)
    assert "(--fit-window;" in report.render({}, other, None, None)
