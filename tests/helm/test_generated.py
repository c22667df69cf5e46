"""The chart's files agree: values.yaml, values.schema.json and docs/deploy.md's table name
the same values, and every template says it is generated (tools/helm_chart.py)."""

import json
import os

import pytest
import yaml

from testbed.helm import CHART
from tools import helm_chart

pytestmark = pytest.mark.unit


def test_values_yaml_schema_and_docs_name_the_same_values():
    with open(CHART / "values.yaml") as f:
        values = yaml.safe_load(f)
    with open(CHART / "values.schema.json") as f:
        schema = json.load(f)

    def schema_leaves(node, prefix=""):
        """A value is where the schema describes it; above it, objects refuse other keys."""
        for k, v in node["properties"].items():
            if "description" not in v:
                assert v["additionalProperties"] is False, k
                yield from schema_leaves(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}"

    def leaves(node, names, prefix=""):
        """values.yaml's keys, down to the values the schema names."""
        for k, v in node.items():
            path = f"{prefix}{k}"
            if path in names:
                yield path
            else:
                assert isinstance(v, dict), path
                yield from leaves(v, names, f"{path}.")

    with open(helm_chart.DOCS) as f:
        docs = f.read()
    in_docs = [
        line.split("`")[1]
        for line in docs[
            docs.index(helm_chart.DOCS_BEGIN) : docs.index(helm_chart.DOCS_END)
        ].splitlines()
        if line.startswith("| `")
    ]
    in_schema = list(schema_leaves(schema))
    assert schema["additionalProperties"] is False
    assert list(leaves(values, set(in_schema))) == in_schema == in_docs
    assert {c.path for c in helm_chart.CHOICES} <= set(in_docs)


def test_every_template_is_generated():
    for name in os.listdir(CHART / "templates"):
        with open(CHART / "templates" / name) as f:
            assert f.readline() in (helm_chart.HEADER, helm_chart.OWN_HEADER), name


def test_the_drift_check_names_edited_missing_and_stray_chart_files(tmp_path, monkeypatch):
    monkeypatch.setattr(helm_chart, "REPO", tmp_path)
    monkeypatch.setattr(helm_chart, "CHART", tmp_path / "chart")
    kept, edited, missing = (tmp_path / "chart" / n for n in ("Chart.yaml", "a.yaml", "b.yaml"))
    files = {kept: "name: x\n", edited: "kind: A\n", missing: "kind: B\n"}
    kept.parent.mkdir()
    kept.write_text(files[kept])
    edited.write_text("kind: A, by hand\n")
    (tmp_path / "chart" / "stray.yaml").write_text("kind: C\n")
    assert helm_chart.drift(files) == [
        "chart/a.yaml: differs from what deploy/ renders",
        "chart/b.yaml: missing",
        "chart/stray.yaml: not generated",
    ]
