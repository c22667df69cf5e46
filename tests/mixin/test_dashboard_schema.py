"""Every dashboard validates against Grafana's dashboard schema.

No Grafana server is installable here; .ci/setup.d/60-grafana-schema.sh generates a JSON schema
from npm @grafana/schema's TypeScript Dashboard type. Unknown fields and wrong types fail.
"""

import json
import os

import jsonschema
import pytest

from tests.mixin.support import REPO

pytestmark = pytest.mark.integration

SCHEMA = os.path.join(
    os.environ.get("KSE_CACHE", REPO / ".cache"), "grafana-schema", "dashboard.schema.json"
)


@pytest.fixture(scope="module")
def validator():
    if not os.path.exists(SCHEMA):
        pytest.fail(f"{SCHEMA} missing: run .ci/setup.d/60-grafana-schema.sh")
    with open(SCHEMA) as f:
        schema = json.load(f)
    return jsonschema.Draft7Validator(schema)


def errors(validator, dashboard):
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(dashboard)
    ]


def test_committed_dashboards_validate(validator):
    paths = sorted((REPO / "dashboards").glob("*.json"))
    assert len(paths) == 4
    for path in paths:
        assert errors(validator, json.loads(path.read_text())) == [], path.name


def test_multi_cluster_dashboards_validate(validator, customised):
    for name, dashboard in customised["dashboards"].items():
        assert errors(validator, dashboard) == [], name


def test_schema_catches_a_misspelt_field_and_a_wrong_type(validator):
    dashboard = json.loads((REPO / "dashboards" / "kubescale-overview.json").read_text())
    dashboard["refersh"] = "1m"
    dashboard["panels"][1]["gridPos"]["w"] = "wide"
    found = errors(validator, dashboard)
    assert any("refersh" in e for e in found)
    assert any(e.startswith("panels/1") for e in found)
