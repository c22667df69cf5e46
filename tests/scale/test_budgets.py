"""The series and query budgets (docs/sizing.md), asserted on a real Prometheus at CI size and projected to 7,500 nodes.

Samples and series of a query grow linearly with the fleet (bench/scale/budget.py), so the
costs measured at two small fleet sizes give each query's cost at 7,500 nodes; the budgets
are asserted on that projection. bench/results/scale.md checks the projection against a
run at the full 7,500.
"""

from collections import Counter

import pytest

from bench.scale import budget, template
from tests.scale.conftest import LARGE_FLEET, SMALL_FLEET

# One worker runs them all: scale_run (a fleet, Prometheus and its history: 3 min) is made
# once per worker that needs it.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("scale-run")]


def _large(scale_run):
    return scale_run.segments[1]


def _by_collector(mode):
    counts = Counter(template.owner(s.family) for s in template.load(mode).series)
    return ", ".join(f"{name} {n}" for name, n in counts.most_common())


def test_node_mode_series_per_node_within_budget(scale_run):
    seg = _large(scale_run)
    # Counted in Prometheus' TSDB per node target, so it is what a fleet really stores.
    assert seg.node_series_max == scale_run.template_series["node"]
    opt_in = template.opt_in_count("node")
    defaults = seg.node_series_max - opt_in
    assert defaults <= budget.NODE_SERIES, (
        f"node mode exports {defaults} series per node with the default collectors (budget "
        f"{budget.NODE_SERIES}; {opt_in} more opt-in): {_by_collector('node')}; "
        f"sources {scale_run.template_sources['node']}"
    )


def test_cluster_mode_series_within_budget(scale_run):
    seg = _large(scale_run)
    assert seg.cluster_series == scale_run.template_series["cluster"]
    assert seg.cluster_series <= budget.CLUSTER_SERIES, (
        f"cluster mode exports {seg.cluster_series} series (budget {budget.CLUSTER_SERIES}): "
        f"{_by_collector('cluster')}"
    )


def test_every_query_runs(scale_run):
    errors = [
        f"{m.query.group} / {m.query.name}: {m.result.error}"
        for seg in scale_run.segments
        for m in seg.measured
        if m.result.error
    ]
    assert not errors, "\n".join(errors)


def test_history_feeds_every_recording_rule_and_panel(scale_run):
    """A budget on zero samples proves nothing: every recording rule and every panel that
    does not read ALERTS (alerts are not backfilled) must find data in the history."""
    empty = [
        f"{m.query.kind} {m.query.group} / {m.query.name}"
        for m in _large(scale_run).measured
        if m.query.kind != "alert" and "ALERTS" not in m.query.expr and m.result.samples == 0
    ]
    assert not empty, "no data for:\n" + "\n".join(empty)


def test_fleet_queries_grow_with_the_fleet(projections):
    """The projection's premise: queries over per-node series touch more samples at the
    larger fleet, fleet-level panels over recorded series do not."""
    per_node = [p for p in projections if p.kind == "record" and p.group.endswith("neighbor.rules")]
    assert per_node and all(p.samples[1] > p.samples[0] for p in per_node)
    fleet_panels = [
        p
        for p in projections
        if p.kind == "panel"
        and p.group == "kubescale-overview.json"
        and "ALERTS" not in p.expr
        and ":topk" not in p.expr
    ]
    assert fleet_panels and all(p.samples[0] == p.samples[1] for p in fleet_panels), [
        (p.name, p.samples) for p in fleet_panels if p.samples[0] != p.samples[1]
    ]


def test_dashboard_panels_within_sample_budget_at_7500_nodes(projections):
    over = [
        f"{p.group} / {p.name}: {p.samples_target:,.0f} samples at {budget.TARGET_NODES} nodes "
        f"(measured {p.samples[0]:,} at {SMALL_FLEET}, {p.samples[1]:,} at {LARGE_FLEET}): {p.expr}"
        for p in projections
        if p.kind == "panel" and p.samples_target > budget.PANEL_SAMPLES
    ]
    assert not over, "\n".join(over)


def test_dashboard_panels_within_series_budget_at_7500_nodes(projections):
    over = [
        f"{p.group} / {p.name}: {p.series_target:,.0f} series at {budget.TARGET_NODES} nodes: {p.expr}"
        for p in projections
        if p.kind == "panel" and not p.capped and p.series_target > budget.PANEL_SERIES
    ]
    assert not over, "\n".join(over)


def test_capped_tables_stay_capped(scale_run):
    """A topk-capped table shows a bounded number of rows from its rule's latest evaluation
    (older rows are stale in a live Prometheus; see SegmentReport.capped_fresh_series)."""
    small, large = (seg.capped_fresh_series for seg in scale_run.segments)
    assert large, "no topk-capped tables found in the dashboards"
    over = {name: (small[name], rows) for name, rows in large.items() if rows > budget.PANEL_SERIES}
    assert not over, over
    assert all(rows > 0 for rows in large.values()), large


def test_rule_groups_within_sample_budget_at_7500_nodes(scale_run, projections):
    """Samples per evaluation stand in for "< 1 s" (see budget.GROUP_SAMPLES), projected to
    7,500 nodes on the fleet the bound is defined on, the realistic one: with every node at
    the thresholds a group reads more (bench/results/scale-thresholds.md says how much, and
    checks its CPU instead)."""
    assert scale_run.fleet == budget.GROUP_SAMPLES_FLEET
    heavy = [
        f"{group}: {samples:,.0f} samples per evaluation at {budget.TARGET_NODES} nodes on the "
        f"{scale_run.fleet} fleet (x{samples / budget.GROUP_SAMPLES:.2f} the "
        f"{budget.GROUP_SAMPLES:,} that 1 CPU-second covers)"
        for group, samples in budget.group_samples(projections).items()
        if samples > budget.GROUP_SAMPLES
    ]
    assert not heavy, "\n".join(heavy)


def test_rule_groups_evaluate_quickly_at_ci_size(scale_run):
    slow = {
        g: v["wall"]
        for g, v in _large(scale_run).groups().items()
        if v["wall"] >= budget.GROUP_SECONDS
    }
    assert not slow, slow
