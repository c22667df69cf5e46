"""promtool unit tests: every alert fires and stays quiet, every recording rule is checked,
on every Prometheus release the tests run (3.13, the LTS, and 3.16): the hand-written
tests/mixin/promtool/*_test.yaml, the fleets of fleet.py and the production cases of
production.py."""

import pathlib
import re
import subprocess

import pytest
import yaml

from tests.mixin import fleet, production
from tests.mixin.support import PROMTOOL_TESTS, alert_rules, recording_rules
from tests.mixin.support import build

_built = {}


def _mixin(config: dict | None) -> dict:
    """The mixin with `config` and every opt-in group, built once per config."""
    key = yaml.safe_dump(config or {})
    if key not in _built:
        _built[key] = build.mixin_object(dict(config or {}, prometheusSelfProtection=True))
    return _built[key]


def _rules(config: dict | None) -> dict:
    m = _mixin(config)
    return {"groups": m["rules"]["groups"] + m["alerts"]["groups"]}


def _with_rules(test: dict, config: dict, directory: pathlib.Path) -> dict:
    """`test` reading the rules rendered with `config` (rule files named as in rules/)."""
    m = _mixin(config)
    rules = directory / "rules"
    rules.mkdir(exist_ok=True)
    (rules / "prometheus_rules.yaml").write_text(yaml.safe_dump(m["rules"]))
    (rules / "prometheus_alerts.yaml").write_text(yaml.safe_dump(m["alerts"]))
    (rules / "prometheus_selfprotection_alerts.yaml").write_text(yaml.safe_dump({"groups": []}))
    return dict(test, rule_files=[str(rules / pathlib.Path(f).name) for f in test["rule_files"]])


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


@pytest.fixture(scope="session")
def production_files(tmp_path_factory):
    """Each production case written once per session: the 2,500-node one takes a while."""
    directory = tmp_path_factory.mktemp("production")
    files = {}
    for name, (story, config) in production.CASES.items():
        test = story(_rules(config))
        if config is not None:
            test = _with_rules(test, config, directory)
        files[name] = directory / name
        files[name].write_text(yaml.safe_dump(test, sort_keys=False, width=1 << 20))
    return files


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(production.CASES))
def test_promtool_production_cases_pass(promtool, name, production_files):
    """Restarts, lost scrapes, clusters sharing a store, a 2,500-node pool rolling an image."""
    _promtool_test(promtool, production_files[name])


@pytest.mark.integration
def test_the_noisy_fleet_keeps_every_alert_silent(everything):
    """noisy_test.yaml expects nothing of any alert at any of its times, while its targets
    time out, restart and move."""
    (test,) = production.noisy(_rules(None))["tests"]
    cases = test["alert_rule_test"]
    assert all(not case["exp_alerts"] for case in cases)
    assert {case["alertname"] for case in cases} == {r["alert"] for r in alert_rules(everything)}
    assert len({case["eval_time"] for case in cases}) >= 5


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
    # An instant read: a window that holds the sample at the evaluation and nothing before.
    "a lost scrape resets a `for`": (
        "gaps_test.yaml",
        {"gapTolerance": "1s"},
        "KubeScaleNeighborTableNearFull",
    ),
    "a pruned cluster hidden by the others in the store": (
        "clusters_test.yaml",
        {"notObservedLookback": "1s"},
        "Cluster dev reported",
    ),
}


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(BENT))
def test_production_cases_catch_the_behaviour_they_were_written_against(promtool, case, tmp_path):
    name, config, symptom = BENT[case]
    if name in fleet.GENERATED:
        test = fleet.GENERATED[name]()
    elif name in production.CASES:
        story, case_config = production.CASES[name]
        config = dict(case_config or {}, **config)
        test = story(_rules(config))
    else:
        test = yaml.safe_load((PROMTOOL_TESTS[0].parent / name).read_text())
    test = _with_rules(test, config, tmp_path)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    out = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode != 0, f"{name} still passes with {config}"
    assert symptom in out.stdout + out.stderr
