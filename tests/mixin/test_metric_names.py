"""Every metric the mixin reads is one the exporter exports.

The source of truth is the collectors' golden expositions (tests/golden/*.prom); the names
and labels the collector issues fixed (the public API) must all be in them, unchanged.
"""

import re

import pytest

from tests.mixin.support import REPO, alert_rules, dashboard_queries, recording_rules

pytestmark = pytest.mark.unit

GOLDEN = REPO / "tests" / "golden"

# Collector area -> {sample name: label names}, as fixed by the issues (the public API).
FIXED_BY_ISSUES = {
    "neighbor": {
        "kubescale_neighbor_entries": {"family"},
        "kubescale_neighbor_gc_thresh1": {"family"},
        "kubescale_neighbor_gc_thresh2": {"family"},
        "kubescale_neighbor_gc_thresh3": {"family"},
        "kubescale_neighbor_table_overflows_total": {"family"},
        "kubescale_neighbor_forced_gc_runs_total": {"family"},
        "kubescale_neighbor_gc_eligible_entries": {"family"},
    },
    "etcd": {
        "kubescale_etcd_db_size_bytes": {"etcd_cluster", "member"},
        "kubescale_etcd_db_size_in_use_bytes": {"etcd_cluster", "member"},
        "kubescale_etcd_quota_bytes": {"etcd_cluster", "member"},
        "kubescale_etcd_quota_info": {"etcd_cluster", "member", "source"},
        "kubescale_etcd_alarm_active": {"etcd_cluster", "member", "alarm"},
        "kubescale_etcd_is_leader": {"etcd_cluster", "member"},
        "kubescale_etcd_keys": {"etcd_cluster", "resource"},
    },
    "balloon": {
        "kubescale_balloon_pods": {"phase"},
        "kubescale_balloon_pending_oldest_seconds": set(),
        "kubescale_balloon_reserved": {"resource", "unit"},
        "kubescale_balloon_nodes": set(),
        "kubescale_balloon_preemptions_total": set(),
        "kubescale_balloon_misconfigured": {"reason"},
    },
    "imagepull": {
        "kubescale_image_pulls_in_progress": set(),
        "kubescale_image_pulls_queued": set(),
        "kubescale_image_pull_oldest_seconds": set(),
        "kubescale_image_pull_downloaded_bytes": set(),
        "kubescale_image_pull_expected_bytes": set(),
        "kubescale_image_pull_stalled": set(),
        "kubescale_kubelet_serialize_image_pulls": set(),
        "kubescale_kubelet_max_parallel_image_pulls": set(),
        "kubescale_image_preload_missing": set(),
    },
    "exporter": {
        "kubescale_scrape_collector_success": {"collector"},
        "kubescale_scrape_collector_duration_seconds": {"collector"},
        "kubescale_build_info": {"version", "python_version"},
    },
    "kube": {
        "kubescale_kube_watch_up": {"resource"},
    },
}
NODE_MODE_AREAS = {"neighbor", "imagepull"}
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s")
RAW_NAME = re.compile(r"(?<![\w:])kubescale_[a-z0-9_]+(?![\w:])")


def golden_samples(area):
    """{sample name: label names} from the area's golden files (an area may have several)."""
    samples = {}
    for path in sorted(GOLDEN.glob(f"{area}*.prom")):
        for line in path.read_text().splitlines():
            match = SAMPLE.match(line)
            if match:
                labels = set(re.findall(r'(\w+)="', match.group(2) or ""))
                samples.setdefault(match.group(1), set()).update(labels)
    return samples


def all_golden_samples():
    merged = {}
    for name, labels in golden_samples("").items():
        merged.setdefault(name, set()).update(labels)
    return merged


def mixin_metric_names(m):
    texts = [r["expr"] for r in alert_rules(m) + recording_rules(m)]
    texts += [expr for d in m["dashboards"].values() for _, expr in dashboard_queries(d)]
    return {name for text in texts for name in RAW_NAME.findall(text)}


def test_every_metric_the_mixin_reads_is_exported(mixin):
    used = mixin_metric_names(mixin)
    assert len(used) >= 30
    assert used - set(all_golden_samples()) == set(), "no tests/golden/*.prom exports them"


def test_the_public_api_is_exported_with_its_labels():
    exported = all_golden_samples()
    for area, fixed in FIXED_BY_ISSUES.items():
        for name, labels in fixed.items():
            assert exported.get(name) == labels, f"{name} ({area}) in tests/golden/*.prom"


def test_node_mode_expositions_carry_no_node_identity():
    """Prometheus target labels identify the node; the exporter must not (cardinality)."""
    for area in NODE_MODE_AREAS:
        for name, labels in golden_samples(area).items():
            assert not labels & {"node", "pod", "instance", "hostname"}, name


def test_golden_parser_reads_labels():
    """The checks above are only as good as this parser."""
    line = 'kubescale_etcd_keys{etcd_cluster="main",resource="pods"} 110000.0'
    match = SAMPLE.match(line)
    assert match.group(1) == "kubescale_etcd_keys"
    assert set(re.findall(r'(\w+)="', match.group(2))) == {"etcd_cluster", "resource"}
