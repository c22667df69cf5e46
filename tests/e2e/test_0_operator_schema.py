"""deploy/'s ServiceMonitors and PrometheusRule against prometheus-operator's published schema.

No registry here carries the operator or its CRDs, so the cluster gets permissive stand-in
CRDs (crds.yaml) only so that `kubectl apply -k deploy/` finds the kinds. The objects are
checked here instead, against the validators npm's @kubernetes-models/prometheus-operator
compiles from the operator's CRDs (PyPI's cloudcoil-models-prometheus-operator carries
pydantic models generated from them, not the schema itself). .ci/setup.d/46-e2e.sh installs
the npm package into the cache.
"""

import json
import os
import subprocess

import pytest
import yaml

from testbed.cluster import current_kubectl

from .conftest import HERE, REPO

NPM_PREFIX = os.environ.get(
    "KSE_OPERATOR_SCHEMA", "/var/cache/kube-scale-exporter/npm-prometheus-operator"
)


def operator_objects():
    rendered = subprocess.run(
        [current_kubectl(), "kustomize", str(REPO / "deploy")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [
        d
        for d in yaml.safe_load_all(rendered)
        if d and d["apiVersion"].startswith("monitoring.coreos.com/")
    ]


def validate(objs):
    return subprocess.run(
        ["node", str(HERE / "validate_operator.mjs"), NPM_PREFIX],
        input=json.dumps(objs),
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def schema():
    if not os.path.isdir(os.path.join(NPM_PREFIX, "node_modules")):
        pytest.fail(f"{NPM_PREFIX} missing: run .ci/setup.d/46-e2e.sh")


def test_servicemonitors_and_prometheusrule_match_operator_schema(schema):
    objs = operator_objects()
    kinds = sorted({o["kind"] for o in objs})
    assert kinds == ["PrometheusRule", "ServiceMonitor"], kinds
    result = validate(objs)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_validator_rejects_what_the_operator_rejects(schema):
    bad = [
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": "no-selector"},
            "spec": {"endpoints": [{"port": "metrics"}]},
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {"name": "rules-not-a-list"},
            "spec": {"groups": [{"name": "g", "rules": {"alert": "X"}}]},
        },
    ]
    result = validate(bad)
    assert result.returncode == 1
    assert result.stdout.count("INVALID") == 2, result.stdout
