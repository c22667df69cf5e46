"""The linters mixin users run find nothing but what mixin/.lint excludes, with a reason.

`mixtool lint` (monitoring-mixins' guidelines for alerts, and Grafana's dashboard-linter
rules for the dashboards it renders) on the mixin as users vendor it and with every option
on, and Grafana's dashboard-linter on each generated dashboard, as `make lint` runs them.
Both are built from source tarballs by .ci/setup.d/49-mixin-linters.sh at the commits
.ci/third-party.sha256 pins; a missing binary fails, never skips.
"""

import json
import re
import shutil
import subprocess

import pytest
import yaml

from testbed import builds
from tests.mixin.support import CUSTOM_CONFIG, EVERYTHING, REPO
from tools import build_mixin

pytestmark = pytest.mark.integration

LINT = REPO / "mixin" / ".lint"
DASHBOARD_FILES = sorted((REPO / "dashboards").glob("*.json"))
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# dashboard-linter prints each rule's description, then one line per result: [❌] an error,
# [⚠️] a warning (excluded results are not printed; --strict fails on either).
FINDING = re.compile(r"^\[(❌|⚠️)\] (.*)$")


def _binary(finder):
    try:
        return finder()
    except FileNotFoundError as e:
        pytest.fail(str(e))


@pytest.fixture
def mixtool(record_property):
    path = _binary(builds.mixtool_binary)
    version = builds.version_line(path)
    assert builds.third_party_version("mixtool") in version, version
    record_property("mixtool_version", version)
    return path


@pytest.fixture
def dashboard_linter(record_property):
    path = _binary(builds.dashboard_linter_binary)
    version = builds.stamped_version(path)
    assert version == builds.third_party_version("dashboard-linter"), f"{path} is {version}"
    record_property("dashboard_linter_version", version)
    return path


@pytest.fixture
def rule_names(dashboard_linter):
    """Each dashboard-linter rule's description, mapped to its name (`dashboard-linter rules`)."""
    out = subprocess.run(
        [dashboard_linter, "rules"], capture_output=True, text=True, timeout=60, check=True
    )
    rules = dict(
        (description, name)
        for name, description in re.findall(r"^\* `([a-z-]+)` - (.*)$", out.stdout, re.M)
    )
    assert len(rules) >= 10, out.stdout
    return rules


def run_mixtool(mixtool, entry, *jpath):
    """[(rule, message)] that `mixtool lint` reports on the mixin file `entry` (it reads the
    .lint beside it), and its exit status."""
    args = [mixtool, "lint"] + [a for p in jpath for a in ("-J", str(p))] + [str(entry)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=entry.parent)
    lines = ANSI.sub("", out.stdout + out.stderr).splitlines()
    findings = [
        tuple(m.groups()) for m in map(re.compile(r"^\[([a-z0-9-]+)\] (.*)$").match, lines) if m
    ]
    return findings, out.returncode, "\n".join(lines)


def run_dashboard_linter(dashboard_linter, rule_names, path, config=LINT):
    """[(rule, message)] that `dashboard-linter lint --strict` reports on one dashboard file,
    and its exit status."""
    out = subprocess.run(
        [dashboard_linter, "lint", "--strict", "--config", str(config), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    findings, rule = [], None
    for line in ANSI.sub("", out.stdout).splitlines():
        found = FINDING.match(line)
        if found:
            findings.append((rule, found.group(2)))
        elif not line.startswith("["):
            rule = rule_names.get(line.strip(), line.strip())
    return findings, out.returncode, out.stdout + out.stderr


def mixin_with(tmp_path, config, extra=""):
    """A mixin file in tmp_path importing ours with `config` over its _config (and `extra`
    mixed in), beside a copy of mixin/.lint: what mixtool reads with the file."""
    shutil.copy(LINT, tmp_path / ".lint")
    entry = tmp_path / "mixin.libsonnet"
    entry.write_text(
        "(import '%s/mixin.libsonnet') + { _config+:: %s }%s\n"
        % (REPO / "mixin", json.dumps(config), extra)
    )
    return entry


# --- what users run -------------------------------------------------------------------------


def test_mixtool_lint_finds_nothing_in_the_mixin(mixtool):
    findings, status, out = run_mixtool(mixtool, REPO / "mixin" / "mixin.libsonnet")
    assert (findings, status) == ([], 0), out


def test_mixtool_lint_finds_nothing_with_every_option_on(mixtool, tmp_path):
    """The opt-in alerts (Prometheus self-protection) and the multi-cluster dashboards."""
    entry = mixin_with(tmp_path, {**EVERYTHING, **CUSTOM_CONFIG})
    findings, status, out = run_mixtool(mixtool, entry)
    assert (findings, status) == ([], 0), out


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.name)
def test_dashboard_linter_finds_nothing_in_the_generated_dashboard(
    dashboard_linter, rule_names, path
):
    findings, status, out = run_dashboard_linter(dashboard_linter, rule_names, path)
    assert (findings, status) == ([], 0), out


def test_dashboard_linter_finds_nothing_in_the_multi_cluster_dashboards(
    dashboard_linter, rule_names, customised, tmp_path
):
    for name, dashboard in customised["dashboards"].items():
        path = tmp_path / name
        path.write_text(build_mixin.to_json(dashboard))
        findings, status, out = run_dashboard_linter(dashboard_linter, rule_names, path)
        assert (findings, status) == ([], 0), f"{name}:\n{out}"


# --- the exclusions -------------------------------------------------------------------------


def exclusions():
    """{rule: (reason, [entry...])} of mixin/.lint."""
    config = yaml.safe_load(LINT.read_text())
    assert set(config) == {"exclusions"}, "mixin/.lint downgrades nothing to a warning"
    return {
        rule: (body.get("reason", ""), body.get("entries", []))
        for rule, body in config["exclusions"].items()
    }


def test_every_exclusion_says_why_and_names_what_it_covers():
    for rule, (reason, entries) in exclusions().items():
        assert len(reason.split()) >= 12, f"{rule}: the reason says too little: {reason!r}"
        # A rule excluded without entries would hide its findings on any dashboard added later.
        assert entries, f"{rule}: names no dashboard or alert"
        for entry in entries:
            assert set(entry) in ({"dashboard"}, {"alert"}), f"{rule}: {entry}"


def test_every_exclusion_is_still_needed(mixtool, dashboard_linter, rule_names, tmp_path):
    """Without mixin/.lint the linters report each excluded rule on each dashboard or alert
    it names: an exclusion that covers nothing any more is removed, not kept."""
    empty = tmp_path / "empty.lint"
    empty.write_text("exclusions: {}\n")
    titles = {}
    found = set()
    for path in DASHBOARD_FILES:
        titles[path] = json.loads(path.read_text())["title"]
        findings, status, _ = run_dashboard_linter(dashboard_linter, rule_names, path, empty)
        assert status != 0
        found |= {(rule, titles[path]) for rule, _ in findings}
    bare = tmp_path / "bare"
    bare.mkdir()
    entry = mixin_with(bare, {})
    (bare / ".lint").write_text("exclusions: {}\n")
    findings, status, _ = run_mixtool(mixtool, entry)
    assert status != 0
    for rule, message in findings:
        found |= {(rule, name) for name in re.findall(r"Alert '(\w+)'", message)}
    for rule, (_, entries) in exclusions().items():
        for entry in entries:
            covered = entry.get("dashboard") or entry.get("alert")
            assert (rule, covered) in found, f"{rule} for {covered}: nothing to exclude"


# --- the linters can fail -------------------------------------------------------------------


def test_a_panel_without_a_description_is_a_finding(dashboard_linter, rule_names, tmp_path):
    dashboard = json.loads((REPO / "dashboards" / "kubescale-overview.json").read_text())
    victim = next(p for p in dashboard["panels"] if p["type"] == "timeseries")
    victim["description"] = ""
    path = tmp_path / "overview.json"
    path.write_text(json.dumps(dashboard))
    findings, status, out = run_dashboard_linter(dashboard_linter, rule_names, path)
    assert status != 0, out
    assert [rule for rule, message in findings if f"'{victim['title']}'" in message] == [
        "panel-title-description-rule"
    ], out


def test_a_new_dashboard_is_linted_in_full(dashboard_linter, rule_names, tmp_path):
    """The exclusions name the dashboards they cover: another one reads raw series
    without $job and $instance until it has its own entry and reason."""
    dashboard = json.loads((REPO / "dashboards" / "kubescale-node.json").read_text())
    dashboard["title"] = "Kube Scale / Something new"
    path = tmp_path / "new.json"
    path.write_text(json.dumps(dashboard))
    findings, status, out = run_dashboard_linter(dashboard_linter, rule_names, path)
    assert status != 0, out
    assert {"template-job-rule", "template-instance-rule", "target-job-rule"} <= {
        rule for rule, _ in findings
    }, out


LOWER_CASE_SUMMARY = """ + {
  prometheusAlerts+:: { groups+: [{ name: 'kube-scale-exporter-new.alerts', rules: [{
    alert: 'KubeScaleSomethingNew',
    expr: 'vector(1)',
    labels: { severity: 'warning' },
    annotations: { summary: 'something is wrong', description: 'On {{ $labels.node }}.' },
  }] }] },
}"""


def test_an_alert_against_the_guidelines_is_a_finding(mixtool, tmp_path):
    entry = mixin_with(tmp_path, {}, LOWER_CASE_SUMMARY)
    findings, status, out = run_mixtool(mixtool, entry)
    assert status != 0, out
    assert [rule for rule, message in findings if "KubeScaleSomethingNew" in message] == [
        "alert-summary-style"
    ], out


# --- mixtool generate -----------------------------------------------------------------------


def test_mixtool_generates_what_make_generate_renders(mixtool, rendered, tmp_path):
    """Users who render the mixin with `mixtool generate all` get the same alerts, rules and
    dashboards as rules/ and dashboards/ hold (tools/build_mixin.py, go-jsonnet)."""
    out = subprocess.run(
        [mixtool, "generate", "all", "-d", "dashboards", "-a", "alerts.yaml", "-r", "rules.yaml"]
        + [str(REPO / "mixin" / "mixin.libsonnet")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    ours = {path.relative_to(REPO).as_posix(): text for path, text in rendered.items()}
    for theirs, mine in (
        ("alerts.yaml", "rules/prometheus_alerts.yaml"),
        ("rules.yaml", "rules/prometheus_rules.yaml"),
    ):
        assert yaml.safe_load((tmp_path / theirs).read_text()) == yaml.safe_load(ours[mine])
    generated = sorted(p.name for p in (tmp_path / "dashboards").iterdir())
    assert generated == sorted(n.removeprefix("dashboards/") for n in ours if n.endswith(".json"))
    for name in generated:
        theirs = json.loads((tmp_path / "dashboards" / name).read_text())
        assert theirs == json.loads(ours[f"dashboards/{name}"]), name
