"""What users switch when they vendor the mixin into a monitoring stack: the import path
jsonnet-bundler creates, the opt-in Prometheus group, the etcd-mixin overlap, and the
ranking of alerts that page."""

import json
import re

import pytest

from testbed.kustomize import render
from tests.mixin.support import REPO, alert_rules, build
import yaml

IMPORT_PATH = "github.com/kube-scale-exporter/kube-scale-exporter/mixin"
ETCD_MIXIN_OVERLAP = {
    "KubeScaleEtcdDatabaseNearQuota",
    "KubeScaleEtcdDatabaseQuotaPredictedFull",
    "KubeScaleEtcdHighFragmentation",
}


def names(m):
    return {r["alert"] for r in alert_rules(m)}


@pytest.mark.unit
def test_jsonnetfile_uses_absolute_imports_like_other_mixins():
    jsonnetfile = json.loads((REPO / "mixin" / "jsonnetfile.json").read_text())
    assert jsonnetfile["legacyImports"] is False
    assert jsonnetfile["dependencies"] == []


@pytest.mark.unit
def test_documented_import_path_is_the_one_jsonnet_bundler_creates():
    path = f"{IMPORT_PATH}/mixin.libsonnet"
    assert path in (REPO / "mixin" / "config.libsonnet").read_text()
    docs = (REPO / "docs" / "mixin.md").read_text()
    assert path in docs
    assert f"jb install {IMPORT_PATH}@main" in docs
    assert (
        "kube-scale-exporter-mixin/" not in docs + (REPO / "mixin" / "config.libsonnet").read_text()
    )


@pytest.mark.unit
def test_prometheus_self_protection_is_opt_in_with_kube_prometheus_job(mixin, everything):
    assert mixin["config"]["prometheusSelfProtection"] is False
    assert mixin["config"]["prometheusSelector"] == 'job="prometheus-k8s"'
    assert "kube-scale-exporter-prometheus" not in [g["name"] for g in mixin["alerts"]["groups"]]
    groups = {g["name"]: g for g in everything["alerts"]["groups"]}
    assert all(
        'job="prometheus-k8s"' in r["expr"] or "container=" in r["expr"]
        for r in groups["kube-scale-exporter-prometheus"]["rules"]
    )


@pytest.mark.unit
def test_opt_in_group_is_rendered_on_its_own(rendered, everything):
    """Users of the rendered files opt in by adding rules/prometheus_selfprotection_alerts.yaml."""

    alone = yaml.safe_load(rendered[build.GENERATED / "prometheus_selfprotection_alerts.yaml"])
    groups = {g["name"]: g for g in everything["alerts"]["groups"]}
    assert alone == {"groups": [groups["kube-scale-exporter-prometheus"]]}
    default = yaml.safe_load(rendered[build.GENERATED / "prometheus_alerts.yaml"])
    assert "kube-scale-exporter-prometheus" not in [g["name"] for g in default["groups"]]


@pytest.mark.unit
def test_query_error_alert_says_it_counts_every_422(everything):
    (rule,) = [
        r
        for r in alert_rules(everything)
        if r["alert"] == "KubeScalePrometheusQueriesHitSampleLimit"
    ]
    assert 'code="422"' in rule["expr"]
    assert "422" in rule["annotations"]["summary"]
    assert "all execution errors" in rule["annotations"]["description"]


@pytest.mark.unit
def test_etcd_mixin_overlap_can_be_switched_off(mixin):
    off = build.mixin_object({"etcdQuotaAlerts": False})
    assert names(mixin) - names(off) == ETCD_MIXIN_OVERLAP
    assert {"KubeScaleEtcdAlarmActive", "KubeScaleEtcdNotObserved"} <= names(off)
    docs = (REPO / "docs" / "mixin.md").read_text()
    for theirs in (
        "etcdDatabaseQuotaLowSpace",
        "etcdDatabaseHighFragmentationRatio",
        "etcdExcessiveDatabaseGrowth",
    ):
        assert theirs in docs


@pytest.mark.unit
def test_an_overflow_never_ranks_below_the_near_full_predictor(mixin):
    rules = alert_rules(mixin)
    overflow = {
        r["labels"]["severity"] for r in rules if r["alert"] == "KubeScaleNeighborTableOverflow"
    }
    near_full = {
        r["labels"]["severity"] for r in rules if r["alert"] == "KubeScaleNeighborTableNearFull"
    }
    assert overflow == {mixin["config"]["criticalSeverity"]}
    assert max(near_full, key=["info", "warning", "critical"].index) in overflow


@pytest.mark.integration
def test_targets_down_threshold_sits_below_the_daemonset_max_unavailable(mixin):
    unavailable = {
        d["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]
        for d in render(REPO / "deploy")
        if d.get("kind") == "DaemonSet"
    }
    assert unavailable == {"10%"}
    assert mixin["config"]["exporterDownRatio"] < 0.10
    (rule,) = [r for r in alert_rules(mixin) if r["alert"] == "KubeScaleExporterTargetsDown"]
    assert ">=" in rule["expr"] and "1 -" not in rule["expr"]


def _go_printf(template: str, *args: str) -> str:
    """What Go's printf makes of `template` with string args: %[N]s takes arg N, %% is a `%`,
    and any other `%` is a bad verb (Go writes `%!` and the verb into the text)."""

    def verb(m):
        if m[1]:
            return args[int(m[1]) - 1]
        return "%" if m[0] == "%%" else "%!" + m[0][1:] + "(BADVERB)"

    return re.sub(r"%\[(\d)\]s|%%|%.?", verb, template)


@pytest.mark.unit
@pytest.mark.parametrize(
    "alert, labels",
    [
        ("KubeScaleRegistryMirrorsDiffer", ("prod", "docker.io")),
        ("KubeScaleNeighborThresholdsAtKernelDefault", ("prod", "ipv6")),
    ],
)
def test_alert_examples_read_their_own_alerts_series_whatever_the_selector_holds(alert, labels):
    """Each fleet-level alert's examples query is a printf format filled with the alert's own
    labels; a `%` in the user's matchers stays literal through it."""
    m = build.mixin_object({"exporterMatchers": 'namespace=~"mon%"', "clusterLabel": "k8s_cluster"})
    (rule,) = [r for r in alert_rules(m) if r["alert"] == alert]
    (fmt, argv) = re.search(
        r"query \(printf `([^`]*)` ([^)]*)\)", rule["annotations"]["description"]
    ).groups()
    assert argv.split() == [
        "$labels.k8s_cluster",
        "$labels." + ("registry" if "Mirror" in alert else "family"),
    ]
    query = _go_printf(fmt, *labels)
    selectors = re.findall(r"\{([^}]*)\}", query)
    assert selectors and all(f"k8s_cluster='{labels[0]}'" in s for s in selectors), selectors
    assert all('namespace=~"mon%"' in s for s in selectors if "job=" in s), selectors
    assert any(f"='{labels[1]}'" in s for s in selectors), selectors
