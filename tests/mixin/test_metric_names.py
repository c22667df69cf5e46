"""Every metric the mixin reads is one the exporter exports.

The source of truth is the collectors' golden expositions (tests/golden/*.prom). Until every
collector has landed, the names and labels fixed in the collector issues stand in for the
missing golden files; once a collector's golden file exists, it must match them too.
"""
import re

from tests.mixin.support import REPO, alert_rules, dashboard_queries, recording_rules

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


def areas_with_golden_files():
    return {area for area in FIXED_BY_ISSUES if any(GOLDEN.glob(f"{area}*.prom"))}


def mixin_metric_names(m):
    texts = [r["expr"] for r in alert_rules(m) + recording_rules(m)]
    texts += [expr for d in m["dashboards"].values() for _, expr in dashboard_queries(d)]
    return {name for text in texts for name in RAW_NAME.findall(text)}


def test_mixin_reads_only_metrics_fixed_by_the_issues(mixin):
    fixed = {name for names in FIXED_BY_ISSUES.values() for name in names}
    used = mixin_metric_names(mixin)
    assert len(used) >= 30
    assert used - fixed == set()


def test_every_metric_the_mixin_reads_is_in_its_collectors_golden_exposition(mixin):
    for area in areas_with_golden_files():
        exported = golden_samples(area)
        used = mixin_metric_names(mixin) & set(FIXED_BY_ISSUES[area])
        assert used - set(exported) == set(), f"tests/golden/{area}*.prom lacks them"


def test_golden_expositions_carry_the_labels_the_mixin_assumes():
    for area in areas_with_golden_files():
        exported = golden_samples(area)
        for name, labels in FIXED_BY_ISSUES[area].items():
            if name in exported:
                assert exported[name] == labels, f"{name} in tests/golden/{area}*.prom"


def test_node_mode_expositions_carry_no_node_identity():
    """Prometheus target labels identify the node; the exporter must not (cardinality)."""
    for area in areas_with_golden_files() & NODE_MODE_AREAS:
        for name, labels in golden_samples(area).items():
            assert not labels & {"node", "pod", "instance", "hostname"}, name


def test_golden_parser_reads_labels():
    """The checks above are only as good as this parser."""
    line = 'kubescale_etcd_keys{etcd_cluster="main",resource="pods"} 110000.0'
    match = SAMPLE.match(line)
    assert match.group(1) == "kubescale_etcd_keys"
    assert set(re.findall(r'(\w+)="', match.group(2))) == {"etcd_cluster", "resource"}
