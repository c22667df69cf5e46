"""The thresholds fleet (bench.scale --fleet thresholds): every node's inputs to every per-node
alert sit at or past the threshold rules/ holds, at every scrape, so each such expression
selects every node; the realistic fleet stays a few nodes in trouble."""

import io
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from bench.scale import synth, template
from bench.scale.target import Fleet

pytestmark = pytest.mark.unit

ALERTS = Path(__file__).resolve().parents[2] / "rules/prometheus_alerts.yaml"
NODES = 12
T = np.arange(0, 1200 + 1, synth.SCRAPE_SECONDS, dtype=float)  # 20 min of scrapes
WINDOW = 300 // synth.SCRAPE_SECONDS  # the 5 min windows the rules read, in scrapes


def threshold(alert: str, pattern: str) -> float:
    """The largest number `pattern` captures in the expressions of `alert` in rules/."""
    exprs = [
        r["expr"]
        for g in yaml.safe_load(ALERTS.read_text())["groups"]
        for r in g["rules"]
        if r.get("alert") == alert
    ]
    found = [float(x) for e in exprs for x in re.findall(pattern, e)]
    assert found, f"{alert}: {pattern!r} not in {exprs}"
    return max(found)


def values(fleet: str, name: str, nodes: int = NODES, **labels) -> np.ndarray:
    """One series of every node of a tiny fleet: an array of nodes x scrapes."""
    (s,) = [
        s
        for s in template.load("node").series
        if s.name == name and labels.items() <= dict(s.labels).items()
    ]
    return np.array([synth.node_values(s, synth.Roles(i, fleet), T) for i in range(nodes)])


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_every_neighbor_table_full_and_overflowing_on_kernel_defaults(family):
    eligible = values(synth.THRESHOLDS, "kubescale_neighbor_gc_eligible_entries", family=family)
    thresh3 = values(synth.THRESHOLDS, "kubescale_neighbor_gc_thresh3", family=family)
    overflows = values(synth.THRESHOLDS, "kubescale_neighbor_table_overflows_total", family=family)
    usage = eligible / thresh3
    critical = threshold("KubeScaleNeighborTableNearFull", r"usage_high:ratio > ([\d.]+)")
    assert (usage > critical).all() and (usage <= 1).all()
    assert (np.diff(overflows) > 0).all()  # increase(...[5m]) > 0 at every evaluation
    # KubeScaleNeighborThresholdsAtKernelDefault counts every node too.
    assert (thresh3 <= threshold("KubeScaleNeighborThresholdsAtKernelDefault", r"<= (\d+)")).all()
    assert (
        usage > threshold("KubeScaleNeighborThresholdsAtKernelDefault", r"ratio > ([\d.]+)")
    ).all()


def test_every_node_pulls_queued_stalled_too_old_serialized_and_missing_preloads():
    f = synth.THRESHOLDS
    queued = values(f, "kubescale_image_pulls_queued")
    assert (queued >= threshold("KubeScaleImagePullBacklog", r"queued:nonzero >= (\d+)")).all()
    assert (values(f, "kubescale_image_pulls_in_progress") > 0).all()
    assert (values(f, "kubescale_image_pull_stalled") > 0).all()
    oldest = values(f, "kubescale_image_pull_oldest_seconds")
    assert (oldest > threshold("KubeScaleImagePullTakingTooLong", r"> (\d+)")).all()
    assert (values(f, "kubescale_kubelet_serialize_image_pulls") == 1).all()
    assert (values(f, "kubescale_image_preload_missing") > 0).all()
    assert (values(f, "kubescale_image_pulls_failing") > 0).all()
    for registry in ("docker.io", "ghcr.io"):
        ignored = values(f, "kubescale_containerd_registry_mirror_hosts", registry=registry)
        assert (ignored > 0).all()
    # A stalled download does not move.
    assert (np.diff(values(f, "kubescale_image_pull_downloaded_bytes")) == 0).all()


def test_a_minority_of_nodes_on_other_containerd_pull_settings():
    for name in (
        "kubescale_containerd_max_concurrent_downloads",
        "kubescale_containerd_image_pull_progress_timeout_seconds",
    ):
        latest = values(synth.THRESHOLDS, name)[:, -1]
        majority = max(np.unique(latest, return_counts=True)[1]) / NODES
        assert 0.5 < majority < 1, (name, latest)


def test_every_collector_failing_the_watch_down_and_every_target_over_its_budget():
    for collector in ("imagepull", "neighbor", "neighbor_gc"):
        success = values(
            synth.THRESHOLDS, "kubescale_scrape_collector_success", collector=collector
        )
        failing = 1 - np.lib.stride_tricks.sliding_window_view(success, WINDOW + 1, axis=1).mean(-1)
        assert (failing > threshold("KubeScaleCollectorFailing", r"> ([\d.]+)")).all()
    assert (values(synth.THRESHOLDS, "kubescale_kube_watch_up") == 0).all()
    node, cluster = template.load("node"), template.load("cluster")
    out = io.StringIO()
    synth.write(out, node, cluster, [synth.Segment(NODES, 0, 600, 30, synth.THRESHOLDS)])
    scraped = {
        float(line.split()[1])
        for line in out.getvalue().splitlines()
        if line.startswith("scrape_samples_scraped{") and synth.NODE_JOB in line
    }
    # The node pods' budget, on targets without etcd (the unless branch).
    budget = threshold("KubeScaleExporterSeriesOverBudget", r"unless on [^>]*\]\)\) > (\d+)")
    assert scraped == {budget + 1}


def test_the_realistic_fleet_keeps_most_nodes_out_of_trouble():
    nodes = 400
    roles = [synth.Roles(i) for i in range(nodes)]
    assert sum(r.pull_backlog or r.pull_stalled or r.neighbor_hot for r in roles) < nodes // 20
    assert not any(r.pull_settings_differ for r in roles)
    failing = values(synth.REALISTIC, "kubescale_image_pulls_failing", nodes=nodes)[:, -1]
    assert 0 < (failing > 0).sum() < nodes // 20
    mirrors = [
        s
        for s in template.load("node").series
        if s.name == "kubescale_containerd_registry_mirror_hosts"
    ]
    verdicts = [{synth.node_series_labels(s, r)["verdict"] for s in mirrors} for r in roles]
    ignored = sum(v == {"ignored"} for v in verdicts)
    assert 0 < ignored < nodes // 20
    assert ignored + sum(v == {"used"} for v in verdicts) == nodes


def test_the_live_target_tells_the_thresholds_story():
    body = Fleet(3, origin=0, story=synth.THRESHOLDS).body("/node/2").decode()
    assert "\nkubescale_image_pull_stalled 1\n" in body
    assert "\nkubescale_image_pull_stalled 0\n" in Fleet(3, origin=0).body("/node/2").decode()


def test_the_live_target_and_the_backfill_give_a_node_the_same_mirror_verdicts():
    realistic = Fleet(50, origin=0)
    out = io.StringIO()
    synth.write(out, realistic.node_t, realistic.cluster_t, [synth.Segment(50, 0, 30, 30)])
    for i in (0, 23):  # a node whose containerd reads its mirrors, and one that ignores them
        node = synth.node_name(i)
        live = {
            line.split(" ")[0]
            for line in realistic.body(f"/node/{i}").decode().splitlines()
            if line.startswith("kubescale_containerd_registry_mirror_hosts{")
        }
        stored = {
            line.split(" ")[0]
            for line in out.getvalue().splitlines()
            if line.startswith("kubescale_containerd_registry_mirror_hosts{") and node in line
        }
        verdict = "ignored" if synth.Roles(i).mirrors_ignored else "used"
        assert len(live) == len(stored) == 2
        for series in live | stored:
            assert f'verdict="{verdict}"' in series, series
