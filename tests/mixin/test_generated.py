"""The committed YAML/JSON match the jsonnet, and Prometheus accepts the rules."""

import json
import subprocess

import pytest
import yaml

from tests.mixin.support import REPO, binary, build


@pytest.mark.unit
def test_committed_files_match_the_jsonnet(rendered):
    problems = build.drift(rendered)
    assert problems == [], "run `make generate` and commit:\n" + "\n".join(problems)


@pytest.mark.unit
def test_drift_check_notices_edited_missing_and_stale_files(rendered, tmp_path, monkeypatch):
    monkeypatch.setattr(build, "REPO", tmp_path)
    monkeypatch.setattr(build, "GENERATED", tmp_path / "rules")
    monkeypatch.setattr(build, "DASHBOARDS", tmp_path / "dashboards")
    rendered = {tmp_path / path.relative_to(REPO): content for path, content in rendered.items()}
    for path, content in rendered.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    assert build.drift(rendered) == []

    alerts = build.GENERATED / "prometheus_alerts.yaml"
    alerts.write_text(alerts.read_text().replace("for: 10m", "for: 1h", 1))
    (build.DASHBOARDS / "kubescale-node.json").unlink()
    (build.DASHBOARDS / "old.json").write_text("{}")
    (build.GENERATED / "kustomization.yaml").write_text("resources: [prometheus-rule.yaml]\n")
    assert build.drift(rendered) == [
        "rules/prometheus_alerts.yaml: differs from the jsonnet",
        "dashboards/kubescale-node.json: missing",
        "dashboards/old.json: no longer generated",
    ]
    assert build.main(["--check"]) == 1


@pytest.mark.integration
def test_promtool_accepts_the_generated_rules(promtool):
    out = subprocess.run(
        [
            promtool,
            "check",
            "rules",
            str(build.GENERATED / "prometheus_alerts.yaml"),
            str(build.GENERATED / "prometheus_rules.yaml"),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.integration
def test_prometheus_rule_manifest_holds_every_group(promtool, tmp_path):
    manifest = yaml.safe_load((build.GENERATED / "prometheus-rule.yaml").read_text())
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
    assert manifest["kind"] == "PrometheusRule"
    alerts = yaml.safe_load((build.GENERATED / "prometheus_alerts.yaml").read_text())["groups"]
    rules = yaml.safe_load((build.GENERATED / "prometheus_rules.yaml").read_text())["groups"]
    assert manifest["spec"]["groups"] == rules + alerts
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(manifest["spec"]))
    out = subprocess.run([promtool, "check", "rules", str(spec)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.integration
def test_generated_yaml_and_json_are_what_the_jsonnet_cli_renders():
    """Users without Python render with the jsonnet CLI; both paths must give the same data."""
    for entry, generated in [
        ("alerts.jsonnet", "prometheus_alerts.yaml"),
        ("rules.jsonnet", "prometheus_rules.yaml"),
    ]:
        out = subprocess.run(
            [binary("jsonnet"), "-J", str(REPO / "mixin"), str(REPO / "mixin" / entry)],
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(out.stdout) == yaml.safe_load((build.GENERATED / generated).read_text())
