"""Every panel explains itself: what it shows, what is normal, and what to do when it is not.

Grafana shows a panel's description behind the "i" beside its title; whoever opens the
dashboard at 3 a.m. reads it there. dashboard-linter's panel-title-description-rule checks
time series and stat panels only (tests/mixin/test_mixin_linters.py runs it); these tests hold
every panel type, on every dashboard and in every configuration, to more than a non-empty
string. Dashboards read from dashboards/*.json and from the jsonnet, so a panel anyone adds
is held to the same.
"""

import json
import re

import _gojsonnet
import pytest

from tests.mixin.support import REPO, alert_rules, build, panels

pytestmark = pytest.mark.unit

DASHBOARD_FILES = sorted((REPO / "dashboards").glob("*.json"))
# What the jsonnet quotes from config knobs with `%`: one left over is a formatting slip.
UNFORMATTED = re.compile(r"%\(\w+\)[sdg]|%[-0-9.]*[sdg]\b|%%")
ALERT_NAME = re.compile(r"\bKubeScale[A-Z][A-Za-z0-9]+")
# Under this a description cannot say what the panel shows, what is normal and what to do.
SHORTEST = 120


def described_panels(dashboards):
    """(dashboard title / panel title, panel) of every panel but rows (Grafana shows no
    description for a row)."""
    for dashboard in dashboards:
        for p in panels(dashboard):
            if p["type"] != "row":
                yield f"{dashboard['title']} / {p['title']}", p


def all_dashboards(*mixins):
    committed = [json.loads(path.read_text()) for path in DASHBOARD_FILES]
    return committed + [d for m in mixins for d in m["dashboards"].values()]


def test_there_are_dashboards_with_panels():
    assert len(DASHBOARD_FILES) >= 4
    assert len(list(described_panels(all_dashboards()))) >= 60


def test_every_panel_says_what_it_shows_what_is_normal_and_what_to_do(mixin, customised):
    for name, p in described_panels(all_dashboards(mixin, customised)):
        text = p.get("description", "")
        assert text.strip(), f"{name}: no description"
        assert text == text.strip(), f"{name}: the description starts or ends with blanks"
        assert len(text) >= SHORTEST, f"{name}: {len(text)} characters say too little: {text!r}"
        assert "Normal" in text, f"{name}: the description does not say what is normal: {text!r}"
        assert len(re.findall(r"[.:]\s", text + " ")) >= 2, f"{name}: one sentence: {text!r}"


def test_descriptions_quote_no_unformatted_placeholder(mixin, customised):
    for name, p in described_panels(all_dashboards(mixin, customised)):
        assert not UNFORMATTED.search(p["description"]), f"{name}: {p['description']!r}"


def test_descriptions_name_alerts_that_exist(everything, customised):
    names = {r["alert"] for r in alert_rules(everything)}
    named = set()
    for name, p in described_panels(all_dashboards(everything, customised)):
        for alert in ALERT_NAME.findall(p["description"]):
            assert alert in names, f"{name} names {alert}, which is no alert of this mixin"
            named.add(alert)
    # Most panels point at the alert (and so the runbook) for what they show.
    assert len(named) >= 20


def test_descriptions_follow_the_thresholds_they_quote(mixin):
    """A threshold quoted in a description comes from the knob its panel draws, so a
    changed knob changes the text too."""
    default = mixin
    changed = build.mixin_object(
        {"neighborUsageWarning": 0.7, "imagePullOldestSeconds": 1800, "etcdFsyncP99Seconds": 0.02}
    )

    def text(m, dashboard, title):
        (p,) = [p for _, p in described_panels([m["dashboards"][dashboard]]) if p["title"] == title]
        return p["description"]

    assert "80%" in text(default, "kubescale-overview.json", "Worst gc_thresh3 usage")
    assert "70%" in text(changed, "kubescale-overview.json", "Worst gc_thresh3 usage")
    assert "20 minutes" in text(default, "kubescale-node.json", "Oldest unfinished pull")
    assert "30 minutes" in text(changed, "kubescale-node.json", "Oldest unfinished pull")
    assert "10 ms" in text(default, "kubescale-etcd.json", "WAL fsync p99: main")
    assert "20 ms" in text(changed, "kubescale-etcd.json", "WAL fsync p99: events")


PANEL_WITHOUT_DESCRIPTION = """
local g = import 'lib/grafana.libsonnet';
g.timeseries('Something new', [g.target('vector(1)')], 'short', width=8)
"""


def test_the_dashboard_library_refuses_a_panel_without_a_description():
    with pytest.raises(RuntimeError, match='panel "Something new" has no description'):
        _gojsonnet.evaluate_snippet(
            str(REPO / "mixin" / "new.jsonnet"),
            PANEL_WITHOUT_DESCRIPTION,
            jpathdir=[str(REPO / "mixin")],
        )
