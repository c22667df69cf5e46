"""The promtool tests' alerts on vmalert: every test promtool runs (tests/mixin/promtool/*,
fleet.py's fleets and production.py's cases) also runs through `vmalert-tool unittest`,
vmalert's rule engine over an embedded VictoriaMetrics of the same release (1.145, Debian sid),
which reads promtool's test format. The series are the same; each expected alert must be the
same one, with the same labels, at the same evaluation time.

What is not compared, and why:
- annotations: their numbers are MetricsQL's, whose rate() does not extrapolate to the window's
  edges as Prometheus' does (3.5 writes a second where promtool says 3.6);
- promql_expr_test: recording rules' values differ in the same way and in precision (the store
  keeps 12 significant digits), and MetricsQL keeps the metric name through round().
"""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest
import yaml

from tests.mixin import fleet, production
from tests.mixin.support import PROMTOOL_TESTS, REPO, victoria_metrics_binary
from tests.mixin.test_promtool import _rules, _with_rules

pytestmark = pytest.mark.integration

# (test file, alert, evaluation time) where vmalert differs from promtool, and why. Nothing
# else may differ; a difference listed here that goes away fails too.
KNOWN_DIFFERENCES: dict[tuple[str, str, str], str] = {}


def _for_vmalert(test: dict, source: pathlib.Path, directory: pathlib.Path) -> pathlib.Path:
    """`test` (read from `source`) as vmalert-tool takes it, written into `directory`."""
    rules = directory / "rules"
    rules.mkdir(exist_ok=True)
    files = []
    for name in test["rule_files"]:
        rule_file = yaml.safe_load((source.parent / name).read_text())
        for group in rule_file["groups"]:
            for rule in group["rules"]:
                rule.pop("annotations", None)
        files.append(rules / pathlib.Path(name).name)
        files[-1].write_text(yaml.safe_dump(rule_file))
    tests = []
    for group in test["tests"]:
        group = {k: v for k, v in group.items() if k != "promql_expr_test"}
        for case in group.get("alert_rule_test", []):
            for alert in case.get("exp_alerts") or []:
                alert.pop("exp_annotations", None)
        tests.append(group)
    converted = dict(test, rule_files=[str(f) for f in files], tests=tests)
    path = directory / source.name
    path.write_text(yaml.safe_dump(converted, sort_keys=False, width=1 << 20))
    return path


def differences(test: dict, source: pathlib.Path, directory: pathlib.Path) -> set[tuple]:
    """{(file, alert, time)} where vmalert's alerts are not promtool's expected ones."""
    path = _for_vmalert(test, source, directory)
    out = subprocess.run(
        [
            victoria_metrics_binary("vmalert-tool"),
            "unittest",
            # promtool's tests name no group; vmalert adds the group's name as a label.
            "--disableAlertgroupLabel",
            f"--files={path}",
        ],
        capture_output=True,
        text=True,
        cwd=directory,
        timeout=600,
    )
    text = out.stdout + out.stderr
    found = {
        (source.name, alert, at)
        for alert, at in re.findall(r"alertname: (\w+), time: (\w+),", text)
    }
    if out.returncode == 0:
        assert "SUCCESS" in text, text
    else:
        assert found, f"vmalert-tool failed for another reason than an alert:\n{text[-3000:]}"
    return found


def _expected(name: str) -> set[tuple]:
    return {key for key in KNOWN_DIFFERENCES if key[0] == name}


@pytest.mark.parametrize("path", PROMTOOL_TESTS, ids=lambda p: p.name)
def test_vmalert_gives_the_alerts_promtool_expects(path, tmp_path):
    test = yaml.safe_load(path.read_text())
    assert differences(test, path, tmp_path) == _expected(path.name)


@pytest.mark.parametrize("name", sorted(fleet.GENERATED))
def test_vmalert_gives_the_fleet_alerts_promtool_expects(name, tmp_path):
    path = fleet.write(name, tmp_path)
    out = tmp_path / "vmalert"
    out.mkdir()
    assert differences(yaml.safe_load(path.read_text()), path, out) == _expected(name)


@pytest.mark.parametrize("name", sorted(production.CASES))
def test_vmalert_gives_the_production_alerts_promtool_expects(name, tmp_path):
    story, config = production.CASES[name]
    test = story(_rules(config))
    if config is not None:
        test = _with_rules(test, config, tmp_path)
    source = REPO / "rules" / name  # the rule files' paths are absolute
    out = tmp_path / "vmalert"
    out.mkdir()
    assert differences(test, source, out) == _expected(name)


def test_a_missing_alert_is_a_difference(tmp_path):
    """The comparison can fail: drop one expected alert and vmalert-tool names it."""
    path = REPO / "tests" / "mixin" / "promtool" / "neighbor_test.yaml"
    test = yaml.safe_load(path.read_text())
    case = next(c for c in test["tests"][0]["alert_rule_test"] if c.get("exp_alerts"))
    case["exp_alerts"] = case["exp_alerts"][1:]
    found = differences(test, path, tmp_path)
    assert found == {(path.name, case["alertname"], _duration(case["eval_time"]))}


def _duration(promtool_time: str) -> str:
    """promtool's "25m" as Go prints it ("25m0s")."""
    minutes = int(promtool_time.removesuffix("m"))
    return (f"{minutes // 60}h" if minutes >= 60 else "") + f"{minutes % 60}m0s"
