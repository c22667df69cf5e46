"""The series budgets (kube_scale_exporter/budgets.py): written without drift where jsonnet
and YAML read them, and each collector's entry covers what it exports and fits the budget
of every target it runs in."""

import json
from collections import Counter

import _gojsonnet
import pytest
import yaml

from bench.scale import template
from kube_scale_exporter.budgets import (
    CLUSTER_SERIES,
    COLLECTOR_SERIES,
    ETCD_NODE_SERIES,
    NODE_SERIES,
)
from tools import budget_files

pytestmark = pytest.mark.unit


def test_the_budget_files_have_not_drifted():
    assert budget_files.drift(budget_files.render()) == [], "run `make generate` and commit"


def test_the_mixin_s_budgets_are_these():
    config = json.loads(
        _gojsonnet.evaluate_snippet(
            "budgets",
            "(import 'config.libsonnet')._config",
            jpathdir=[str(budget_files.MIXIN_BUDGETS.parent)],
        )
    )
    assert (
        config["nodeSeriesBudget"],
        config["etcdNodeSeriesBudget"],
        config["clusterSeriesBudget"],
    ) == (NODE_SERIES, ETCD_NODE_SERIES, CLUSTER_SERIES)


def test_every_sample_limit_in_deploy_is_its_jobs():
    """Read as YAML, apart from the rewriting: each ServiceMonitor and each plain scrape job
    has the limit of its name, and every name with a budget has one."""
    monitors, plain = budget_files.LIMIT_FILES
    limits = {
        m["metadata"]["name"]: m["spec"]["sampleLimit"]
        for m in yaml.safe_load_all(monitors.read_text())
    }
    assert limits == budget_files.SAMPLE_LIMITS
    jobs = yaml.safe_load(plain.read_text())["scrape_configs"]
    assert {j["job_name"]: j["sample_limit"] for j in jobs} == budget_files.SAMPLE_LIMITS


def test_a_limit_is_set_by_the_name_above_it_and_a_name_without_a_budget_is_an_error():
    text = "- job_name: a\n  sample_limit: 1\n- job_name: b\n  scheme: http\n  sample_limit: 1\n"
    assert budget_files.with_limits(text, {"a": 86, "b": 1000}, "f.yml") == (
        "- job_name: a\n  sample_limit: 86\n- job_name: b\n  scheme: http\n  sample_limit: 1000\n"
    )
    with pytest.raises(ValueError, match=r"f\.yml:5: a sample limit for c, which has no budget"):
        budget_files.with_limits(text.replace(": b", ": c"), {"a": 86}, "f.yml")


def counts(mode: str) -> Counter:
    """Series of the mode's template per owner, the defaults' only."""
    return Counter(
        template.owner(s.family)
        for s in template.load(mode).series
        if s.family not in template.OPT_IN_FAMILIES
    )


@pytest.mark.parametrize("mode", ["node", "cluster"])
def test_each_collector_exports_no_more_than_its_entry(mode):
    found = counts(mode)
    over = {
        name: (found[name], COLLECTOR_SERIES[name][mode])
        for name in template.registry_collectors(mode)
        if found[name] > COLLECTOR_SERIES[name][mode]
    }
    assert not over, f"{mode}: series exported, entry: {over}"


def test_the_entries_fit_each_target_s_budget():
    """The default node collectors' entries plus the pod watch's health and the exporter's
    own series fit the node budget; the node's budget, etcd's node entry and its own two
    series fit the etcd node's; every cluster collector's entry and the cluster's watches
    and own series fit the cluster's."""
    node, cluster = counts("node"), counts("cluster")
    own_per_collector = sum(
        dict(s.labels).get("collector") == "neighbor" for s in template.load("node").series
    )
    assert own_per_collector == 2
    defaults = template.registry_collectors("node")
    in_node = sum(COLLECTOR_SERIES[c]["node"] for c in defaults)
    assert in_node + node["kube"] + node["exporter"] <= NODE_SERIES
    assert NODE_SERIES + COLLECTOR_SERIES["etcd"]["node"] + own_per_collector <= ETCD_NODE_SERIES
    in_cluster = sum(
        COLLECTOR_SERIES[c]["cluster"] for c in template.registry_collectors("cluster")
    )
    assert in_cluster + cluster["kube"] + cluster["exporter"] <= CLUSTER_SERIES
