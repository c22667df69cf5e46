"""Checks in the spirit of mixtool lint and Grafana's dashboard linter, for our conventions."""

import json
import re
import subprocess

import _gojsonnet
import pytest
import yaml

from kube_scale_exporter.durations import go_duration

from tests.mixin.support import (
    REPO,
    alert_rules,
    build,
    dashboard_queries,
    panels,
    recording_rules,
)

SEVERITIES = {"critical", "warning", "info"}
RECORD_NAME = re.compile(r"^[a-z][a-z_]*:kubescale_[a-z0-9_]+:[a-z0-9_]+$")
# A metric name used raw (not part of a level:metric:operation recording rule name).
RAW_METRIC = re.compile(
    r"(?<![\w:])((?:kubescale|scrape|prometheus|container)_[a-z0-9_]*|up|ALERTS)(?![\w:])"
)
RECORDING_NAME = re.compile(r"\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b")


def all_exprs(m):
    return [r["expr"] for r in alert_rules(m) + recording_rules(m)]


# --- alerts ---------------------------------------------------------------------------------


@pytest.mark.unit
def test_alert_names_are_camel_case_with_our_prefix(everything):
    for rule in alert_rules(everything):
        assert re.fullmatch(r"KubeScale(?:[A-Z][a-z0-9]*|[A-Z]+(?=[A-Z]|$))+", rule["alert"]), rule[
            "alert"
        ]


@pytest.mark.unit
def test_alerts_have_a_known_severity_once_per_name(everything):
    seen = set()
    for rule in alert_rules(everything):
        severity = rule["labels"]["severity"]
        assert severity in SEVERITIES, rule["alert"]
        assert (rule["alert"], severity) not in seen, f"{rule['alert']} twice with {severity}"
        seen.add((rule["alert"], severity))


@pytest.mark.unit
def test_paging_can_be_turned_off(mixin, customised):
    assert "critical" in {r["labels"]["severity"] for r in alert_rules(mixin)}
    assert {r["labels"]["severity"] for r in alert_rules(customised)} <= {"warning", "info"}


@pytest.mark.unit
def test_alert_annotations(everything):
    pattern = everything["config"]["runbookURLPattern"]
    for rule in alert_rules(everything):
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}, rule["alert"]
        assert "{{" not in annotations["summary"], f"{rule['alert']}: summary must be static"
        assert annotations["summary"].endswith("."), rule["alert"]
        assert "{{" in annotations["description"], f"{rule['alert']}: description must say which"
        assert annotations["runbook_url"] == pattern % rule["alert"].lower()


@pytest.mark.unit
def test_runbook_url_pattern_is_a_knob(customised):
    for rule in alert_rules(customised):
        assert (
            rule["annotations"]["runbook_url"]
            == "https://runbooks.example/" + rule["alert"].lower()
        )


RUNBOOK_LAYERS = """
local mixin = import 'mixin.libsonnet';
local runbooks = import 'lib/runbooks.libsonnet';
// A stack's own alerts, one with its own runbook, and its own runbook for one of ours; then
// the pass again, as a stack adding alerts mixes it in after them.
local stack = mixin + {
  prometheusAlerts+:: {
    groups: [
      g { rules: [
        if r.alert == 'KubeScaleNeighborTableOverflow'
        then r { annotations+: { runbook_url: 'https://wiki.example/overflow' } } else r
        for r in g.rules
      ] }
      for g in super.groups
    ] + [{ name: 'theirs', rules: [
      { alert: 'TheirsWithRunbook', expr: 'vector(1)', annotations: { runbook_url: 'https://wiki.example/theirs' } },
      { alert: 'TheirsWithout', expr: 'vector(1)' },
    ] }],
  },
} + runbooks;
[[r.alert, std.get(std.get(r, 'annotations', {}), 'runbook_url', null)]
 for g in stack.prometheusAlerts.groups for r in g.rules]
"""


@pytest.mark.unit
def test_runbook_links_are_added_only_where_an_alert_has_none(mixin):
    pairs = json.loads(
        _gojsonnet.evaluate_snippet(
            str(REPO / "mixin" / "stack.jsonnet"), RUNBOOK_LAYERS, jpathdir=[str(REPO / "mixin")]
        )
    )
    urls = dict(pairs)
    assert len(pairs) == len(alert_rules(mixin)) + 2
    pattern = mixin["config"]["runbookURLPattern"]
    assert urls.pop("TheirsWithRunbook") == "https://wiki.example/theirs"
    assert urls.pop("KubeScaleNeighborTableOverflow") == "https://wiki.example/overflow"
    assert urls.pop("TheirsWithout") == pattern % "theirswithout"
    ours = {r["alert"] for r in alert_rules(mixin)} - {"KubeScaleNeighborTableOverflow"}
    assert urls == {name: pattern % name.lower() for name in ours}


def runbook_sections():
    """`## Name` headings of docs/runbooks.md with the text under each."""
    text = (REPO / "docs" / "runbooks.md").read_text()
    parts = re.split(r"^## (\S+)\s*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.unit
def test_every_alert_has_a_runbook_section(everything):
    sections = runbook_sections()
    for name in {r["alert"] for r in alert_rules(everything)}:
        assert name in sections, f"docs/runbooks.md has no '## {name}'"
        body = sections[name]
        for part in ("Meaning", "Confirm", "Fix"):
            assert re.search(rf"^\*\*{part}", body, re.M), f"{name}: runbook lacks **{part}**"


@pytest.mark.unit
def test_runbooks_hold_no_section_for_an_alert_that_does_not_exist(everything):
    names = {r["alert"] for r in alert_rules(everything)}
    assert set(runbook_sections()) - names == set()


# --- rules ----------------------------------------------------------------------------------


@pytest.mark.unit
def test_recording_rule_names_are_level_metric_operation(mixin):
    for rule in recording_rules(mixin):
        assert RECORD_NAME.match(rule["record"]), rule["record"]


@pytest.mark.unit
def test_groups_are_small_and_uniquely_named(everything):
    groups = everything["rules"]["groups"] + everything["alerts"]["groups"]
    names = [g["name"] for g in groups]
    assert len(names) == len(set(names))
    for g in groups:
        assert 0 < len(g["rules"]) <= 20, g["name"]
        assert g["name"].startswith("kube-scale-exporter-")


# The interval of a group that sets none: the stack's (kube-prometheus evaluates every 30 s).
STACK_INTERVAL = 30
# Prometheus' lookback: an instant selector finds a record at most this old.
LOOKBACK = 300


def _interval(group) -> float:
    return go_duration(group["interval"]) if "interval" in group else STACK_INTERVAL


@pytest.mark.unit
def test_every_alert_is_evaluated_again_within_its_for(everything):
    """An alert's `for` spans at least one evaluation after the one that first saw the
    condition (a `for` shorter than the step is no `for`), and an alert without one, which
    fires at its first evaluation, runs at least every nodeAlertInterval. Every group runs
    within Prometheus' lookback, so a record read between its evaluations is never stale."""
    fastest = go_duration(everything["config"]["nodeAlertInterval"])
    for group in everything["alerts"]["groups"] + everything["rules"]["groups"]:
        interval = _interval(group)
        assert interval < LOOKBACK, group["name"]
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            if "for" in rule:
                assert interval <= go_duration(rule["for"]), (group["name"], rule["alert"])
            else:
                assert interval <= fastest, (group["name"], rule["alert"])


@pytest.mark.unit
def test_no_alert_reads_a_record_evaluated_less_often_than_itself(everything):
    """A record recorded less often than the alert that reads it would hold the alert on a
    value older than its own step: the alert would fire (or clear) a record's step late."""
    recorded = {
        r["record"]: _interval(g) for g in everything["rules"]["groups"] for r in g["rules"]
    }
    checked = 0
    for group in everything["alerts"]["groups"]:
        for rule in group["rules"]:
            for name in RECORDING_NAME.findall(rule["expr"]):
                if name in recorded:
                    checked += 1
                    assert recorded[name] <= _interval(group), (rule["alert"], name)
    assert checked > 20


@pytest.mark.unit
def test_every_raw_series_is_selected_by_job(everything):
    """A raw metric without our selector would pick up another job's series of that name."""
    c = everything["config"]
    selectors = [
        c["nodeExporterSelector"],
        c["clusterExporterSelector"],
        c["exporterSelector"],
        c["etcdLocalSelector"],
        c["etcdRemoteSelector"],
        c["prometheusSelector"],
        c["prometheusContainerSelector"],
    ]
    for expr in all_exprs(everything):
        for match in RAW_METRIC.finditer(expr):
            rest = expr[match.end() :]
            assert rest.startswith("{") and any(rest[1:].startswith(s) for s in selectors), (
                f"{match.group(1)} without a selector in:\n{expr}"
            )


@pytest.mark.integration
def test_promtool_rejects_nothing_in_the_rules(promtool, everything, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(
        yaml.safe_dump({"groups": everything["rules"]["groups"] + everything["alerts"]["groups"]})
    )
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# --- clusterLabel ---------------------------------------------------------------------------


def without_names_and_strings(text):
    """Recording rule names ("cluster:...") and label values ("...-cluster") are not labels."""
    return re.sub(r'"[^"]*"', '""', RECORDING_NAME.sub("RULE", text))


@pytest.mark.unit
def test_changing_cluster_label_leaves_no_hard_coded_cluster(customised):
    for rule in alert_rules(customised):
        assert not re.search(r"\$labels\.cluster\b", rule["annotations"]["description"]), rule[
            "alert"
        ]
    texts = all_exprs(customised)
    for dashboard in customised["dashboards"].values():
        texts += [expr for _, expr in dashboard_queries(dashboard)]
        texts += [
            t.get("legendFormat", "") for p in panels(dashboard) for t in p.get("targets", [])
        ]
        texts += [v["name"] for v in dashboard["templating"]["list"]]
    for text in texts:
        assert not re.search(r"\bcluster\b", without_names_and_strings(text)), text


@pytest.mark.unit
def test_every_aggregation_keeps_the_cluster_label(customised):
    for expr in all_exprs(customised):
        for by in re.findall(r"\bby \(([^)]*)\)", expr):
            assert "k8s_cluster" in [label.strip() for label in by.split(",")], expr


@pytest.mark.unit
def test_multi_cluster_dashboards_filter_every_query_on_the_cluster(customised):
    for name, dashboard in customised["dashboards"].items():
        variables = [v["name"] for v in dashboard["templating"]["list"]]
        assert "k8s_cluster" in variables, name
        for title, expr in dashboard_queries(dashboard):
            if title == "variable k8s_cluster":
                continue
            assert 'k8s_cluster="$k8s_cluster"' in expr, f"{name} / {title}: {expr}"


@pytest.mark.unit
def test_single_cluster_dashboards_have_no_cluster_variable(mixin):
    for dashboard in mixin["dashboards"].values():
        assert mixin["config"]["clusterLabel"] not in [
            v["name"] for v in dashboard["templating"]["list"]
        ]


# --- dashboards -----------------------------------------------------------------------------


@pytest.mark.unit
def test_dashboard_uids_are_stable_unique_and_short(mixin, customised):
    uids = {name: d["uid"] for name, d in mixin["dashboards"].items()}
    assert uids == mixin["config"]["grafanaDashboardIDs"]
    assert uids == {name: d["uid"] for name, d in customised["dashboards"].items()}
    assert len(set(uids.values())) == len(uids)
    assert all(re.fullmatch(r"[a-z0-9-]{1,40}", uid) for uid in uids.values())


@pytest.mark.unit
def test_dashboards_use_a_datasource_variable(mixin):
    for dashboard in mixin["dashboards"].values():
        (ds,) = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
        assert ds["name"] == "datasource" and ds["query"] == "prometheus"
        for p in panels(dashboard):
            if p["type"] == "row":
                continue
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            for t in p["targets"]:
                assert t["datasource"]["uid"] == "${datasource}", p["title"]


@pytest.mark.unit
def test_dashboards_use_rate_interval(mixin):
    for name, dashboard in mixin["dashboards"].items():
        for title, expr in dashboard_queries(dashboard):
            for window in re.findall(r"\[([^\]]*)\]", expr):
                assert window == "$__rate_interval", f"{name} / {title}: [{window}]"


@pytest.mark.unit
def test_dashboards_use_modern_panel_types_only(mixin):
    for dashboard in mixin["dashboards"].values():
        for p in panels(dashboard):
            assert p["type"] in {"row", "timeseries", "stat", "table", "bargauge"}, p["type"]


@pytest.mark.unit
def test_panels_have_unique_ids_and_do_not_overlap(mixin):
    for name, dashboard in mixin["dashboards"].items():
        ids = [p["id"] for p in panels(dashboard)]
        assert len(ids) == len(set(ids)), name
        cells = set()
        for p in panels(dashboard):
            g = p["gridPos"]
            assert g["x"] >= 0 and g["x"] + g["w"] <= 24, f"{name} / {p['title']}"
            mine = {
                (x, y)
                for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])
            }
            assert not cells & mine, f"{name} / {p['title']} overlaps another panel"
            cells |= mine


@pytest.mark.unit
def test_every_panel_has_a_title_and_queries(mixin):
    for dashboard in mixin["dashboards"].values():
        for p in panels(dashboard):
            assert p["title"]
            if p["type"] != "row":
                assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]


@pytest.mark.unit
def test_fleet_dashboards_read_recording_rules_only(mixin):
    """At 7,500 nodes a panel over raw per-node series is what takes Grafana and Prometheus
    down; fleet-wide panels read recording rules (ALERTS is Prometheus' own, and small)."""
    for name, dashboard in mixin["dashboards"].items():
        if name == "kubescale-node.json":
            continue
        for title, expr in dashboard_queries(dashboard):
            raw = {m.group(1) for m in RAW_METRIC.finditer(expr)} - {"ALERTS"}
            assert raw == set(), f"{name} / {title} reads raw series {raw}: {expr}"


@pytest.mark.unit
def test_node_dashboard_queries_are_pinned_to_one_node(mixin):
    dashboard = mixin["dashboards"]["kubescale-node.json"]
    node = '%s="$node"' % mixin["config"]["nodeLabel"]
    for title, expr in dashboard_queries(dashboard):
        if not title.startswith("variable"):
            assert node in expr, f"{title}: {expr}"


@pytest.mark.unit
def test_node_label_is_a_knob(customised):
    m = customised
    node = m["dashboards"]["kubescale-node.json"]
    assert all(
        'kubernetes_node="$node"' in e
        for t, e in dashboard_queries(node)
        if not t.startswith("variable")
    )
    descriptions = [r["annotations"]["description"] for r in alert_rules(m)]
    assert not any("$labels.node " in d for d in descriptions)
    assert any("$labels.kubernetes_node" in d for d in descriptions)


@pytest.mark.integration
def test_dashboard_queries_are_valid_promql(promtool, mixin, customised, tmp_path):
    """promtool has no expression checker, so each query becomes a recording rule."""
    substitutions = {"$__rate_interval": "5m", "${datasource}": "x"}
    rules = []
    for m in (mixin, customised):
        for dashboard in m["dashboards"].values():
            for title, expr in dashboard_queries(dashboard):
                if title.startswith("variable"):
                    expr = re.fullmatch(r"label_values\((.*), \w+\)", expr).group(1)
                for var, value in substitutions.items():
                    expr = expr.replace(var, value)
                expr = re.sub(r"\$\w+", "x", expr)
                rules.append({"record": "dashboard:query:check", "expr": expr})
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "queries", "rules": rules}]}))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.unit
def test_dashboards_follow_the_config(mixin):
    c = mixin["config"]
    for dashboard in mixin["dashboards"].values():
        assert dashboard["tags"] == c["dashboardTags"]
        assert dashboard["refresh"] == c["dashboardRefresh"]
        assert dashboard["time"]["from"] == c["dashboardTimeFrom"]
        assert dashboard["title"].startswith(c["dashboardTitlePrefix"])


# --- config ---------------------------------------------------------------------------------


@pytest.mark.unit
def test_every_knob_is_used_and_documented(mixin):
    """Used by a rule, alert or dashboard, or by config.libsonnet to build such a knob."""
    config = REPO / "mixin" / "config.libsonnet"
    sources = [p for p in (REPO / "mixin").rglob("*sonnet") if p != config]
    text = "\n".join(p.read_text() for p in sources)
    derives = config.read_text()
    docs = (REPO / "docs" / "mixin.md").read_text()
    for knob in mixin["config"]:
        assert re.search(rf"\b{knob}\b", text) or f"self.{knob}" in derives, f"{knob} is unused"
        assert f"`{knob}`" in docs, f"{knob} is not in docs/mixin.md"


@pytest.mark.unit
def test_every_knob_has_a_line_of_why():
    """Each knob in config.libsonnet follows a comment, its own or its group's."""
    lines = (REPO / "mixin" / "config.libsonnet").read_text().splitlines()
    for i, line in enumerate(lines):
        knob = re.match(r"^    (\w+): ", line)
        if knob is None:
            continue
        above = next(
            lines[j] for j in range(i - 1, -1, -1) if not re.match(r"^    \w+: ", lines[j])
        )
        assert above.strip().startswith("//"), f"{knob.group(1)} has no comment above it"


@pytest.mark.unit
def test_selectors_are_built_from_the_job_knobs():
    """The joint selectors cannot disagree with the single ones: all come from the job names
    and the extra matchers (a regex job matcher quotes what a job name may hold)."""
    m = build.mixin_object(
        {"nodeJobName": "kse.node", "clusterJobName": "kse-cluster", "exporterMatchers": 'ns="m"'}
    )
    c = m["config"]
    assert c["nodeExporterSelector"] == 'job="kse.node", ns="m"'
    assert c["clusterExporterSelector"] == 'job="kse-cluster", ns="m"'
    assert c["exporterSelector"] == 'job=~"kse[.]node|kse-cluster", ns="m"'
    assert (c["etcdLocalSelector"], c["etcdRemoteSelector"]) == (
        c["nodeExporterSelector"],
        c["clusterExporterSelector"],
    )
    for expr in all_exprs(m):
        assert "kube-scale-exporter-node" not in expr and "kube-scale-exporter-cluster" not in expr


@pytest.mark.unit
def test_a_job_name_a_regex_would_misread_is_refused():
    with pytest.raises(RuntimeError, match='job name "a|b": only letters'):
        build.mixin_object({"nodeJobName": "a|b"})


@pytest.mark.unit
def test_the_former_etcd_selector_knob_is_refused_by_name():
    with pytest.raises(RuntimeError, match="etcdLocalSelector and etcdRemoteSelector"):
        build.mixin_object({"etcdSelector": 'job="etcd"'})
