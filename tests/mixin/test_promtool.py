"""promtool unit tests: every alert fires and stays quiet, every recording rule is checked,
on every Prometheus release users run (Debian's 2.42 and upstream 3.5)."""

import pathlib
import re
import subprocess

import pytest
import yaml

from tests.mixin import fleet
from tests.mixin.support import PROMTOOL_TESTS, alert_rules, recording_rules
from tests.mixin.support import build


@pytest.mark.unit
def test_there_are_promtool_tests():
    assert len(PROMTOOL_TESTS) >= 7


def _promtool_test(promtool, path):
    out = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, cwd=path.parent
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


@pytest.mark.integration
@pytest.mark.parametrize("path", PROMTOOL_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(promtool, path):
    _promtool_test(promtool, path)


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(fleet.GENERATED))
def test_promtool_fleet_tests_pass(promtool, name, tmp_path):
    """Fleets too large to write by hand (a 1,000-target DaemonSet rollout)."""
    _promtool_test(promtool, fleet.write(name, tmp_path))


def _loaded_tests():
    return [t for path in PROMTOOL_TESTS for t in yaml.safe_load(path.read_text())["tests"]]


@pytest.mark.unit
def test_every_alert_fires_and_stays_quiet_in_some_test(everything):
    fires, quiet = set(), set()
    for test in _loaded_tests():
        for case in test.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {r["alert"] for r in alert_rules(everything)}
    assert names - fires == set(), "alerts never shown firing"
    assert names - quiet == set(), "alerts never shown quiet"
    assert (fires | quiet) - names == set(), "tests for alerts that do not exist"


@pytest.mark.unit
def test_a_healthy_fleet_keeps_every_alert_silent(everything):
    """healthy_test.yaml holds one healthy cluster and expects nothing of any alert."""
    (test,) = yaml.safe_load((PROMTOOL_TESTS[0].parent / "healthy_test.yaml").read_text())["tests"]
    silent = {case["alertname"] for case in test["alert_rule_test"] if not case["exp_alerts"]}
    assert all(not case["exp_alerts"] for case in test["alert_rule_test"])
    assert silent == {r["alert"] for r in alert_rules(everything)}


@pytest.mark.unit
def test_every_severity_of_every_alert_fires_in_some_test(everything):
    fired = {
        (case["alertname"], alert["exp_labels"]["severity"])
        for test in _loaded_tests()
        for case in test.get("alert_rule_test", [])
        for alert in case.get("exp_alerts") or []
    }
    defined = {(r["alert"], r["labels"]["severity"]) for r in alert_rules(everything)}
    assert defined - fired == set()


@pytest.mark.unit
def test_every_recording_rule_is_checked_in_some_test(mixin):
    checked = set()
    for test in _loaded_tests():
        for case in test.get("promql_expr_test", []):
            checked |= set(re.findall(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", case["expr"]))
    names = {r["record"] for r in recording_rules(mixin)}
    assert names - checked == set()


# The production cases must be the ones that tell the rules apart: with the rule bent back to
# the behaviour the case was written against, the same test fails.
BENT = {
    "gaps reset an etcd member's `for`": (
        "etcd_test.yaml",
        {"gapTolerance": "1m"},
        "KubeScaleEtcdDatabaseNearQuota",
    ),
    "the head saw-tooth read as growth": (
        "prometheus_test.yaml",
        {"prometheusHeadCycle": "1m", "prometheusHeadSeriesPredictWindow": "1h"},
        "10.0.3.3:9090",
    ),
    "a threshold at the DaemonSet's maxUnavailable": (
        "rollout_test.yaml",
        {"exporterDownRatio": 0.1},
        "99 kube-scale-exporter-node targets",
    ),
}


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(BENT))
def test_production_cases_catch_the_behaviour_they_were_written_against(promtool, case, tmp_path):
    name, config, symptom = BENT[case]

    m = build.mixin_object(dict(config, prometheusSelfProtection=True))
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "prometheus_rules.yaml").write_text(yaml.safe_dump(m["rules"]))
    (rules / "prometheus_alerts.yaml").write_text(yaml.safe_dump(m["alerts"]))
    (rules / "prometheus_selfprotection_alerts.yaml").write_text(yaml.safe_dump({"groups": []}))
    if name in fleet.GENERATED:
        test = fleet.GENERATED[name]()
    else:
        test = yaml.safe_load((PROMTOOL_TESTS[0].parent / name).read_text())
    test["rule_files"] = [str(rules / pathlib.Path(f).name) for f in test["rule_files"]]
    path = tmp_path / name
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    out = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode != 0, f"{name} still passes with {config}"
    assert symptom in out.stdout + out.stderr
