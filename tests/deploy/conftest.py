"""deploy/ rendered by kustomize, and a real kube-apiserver with the kubectl of its version.

Two kubectls: KUSTOMIZE_KUBECTL renders (its kustomize must know Components, kubectl 1.21
or later; the one 40-kubernetes.sh builds does), KUBECTL_BIN (default: the kubectl built
with the test API server, .ci/setup.d/40-kubernetes.sh) applies what it rendered.
"""

import functools
import os
import re
import subprocess

import pytest
import yaml

from testbed.builds import kube_binary
from testbed.kube_apiserver import apiserver_on_new_etcd
from testbed.kustomize import render

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(REPO, "deploy")
COMPONENTS = os.path.join(DEPLOY, "components")
OVERLAY = os.path.join(DEPLOY, "overlays", "example")
# Our own minimal CRDs for the prometheus-operator kinds the manifests use: enough for the
# API server to know the kinds and keep their fields, nothing of the operator's schema.
CRD_STUBS = [("ServiceMonitor", "servicemonitors"), ("PrometheusRule", "prometheusrules")]


def compose(tmp_path, components, resources=("base",), **fields) -> list[dict]:
    """Render a kustomization of our own: deploy/base plus the named components, in order,
    plus any other kustomization fields. kustomize takes relative paths only."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    rel = functools.partial(os.path.relpath, start=tmp_path)
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [rel(os.path.join(DEPLOY, r)) for r in resources],
        "components": [rel(os.path.join(COMPONENTS, c)) for c in components],
        **fields,
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return render(tmp_path)


def deployment_memory_limit() -> int:
    """The cluster-mode Deployment's memory limit in deploy/base, in bytes."""
    with open(os.path.join(DEPLOY, "base", "cluster.yaml")) as f:
        [dep] = [d for d in yaml.safe_load_all(f) if d and d["kind"] == "Deployment"]
    [container] = dep["spec"]["template"]["spec"]["containers"]
    value = container["resources"]["limits"]["memory"]
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", value).groups()
    return int(number) << {"Mi": 20, "Gi": 30}[unit]


def component_names() -> list[str]:
    return sorted(
        d
        for d in os.listdir(COMPONENTS)
        if os.path.exists(os.path.join(COMPONENTS, d, "kustomization.yaml"))
    )


@pytest.fixture(scope="session")
def manifests():
    """The default install: what `kubectl apply -k deploy/` sends."""
    return render(DEPLOY)


@pytest.fixture(scope="session")
def renders(tmp_path_factory):
    """Every install deploy/ offers: the default, the base alone, the base with each
    component alone, and the example overlay."""
    out = {
        "default": render(DEPLOY),
        "base": render(os.path.join(DEPLOY, "base")),
        "overlays/example": render(OVERLAY),
    }
    for name in component_names():
        out[f"base+{name}"] = compose(tmp_path_factory.mktemp(name), [name])
    return out


def crd_stub(kind, plural):
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "plural": plural,
                "listKind": f"{kind}List",
                "singular": kind.lower(),
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


class Kubectl:
    def __init__(self, kubeconfig, binary=None):
        self.kubeconfig = kubeconfig
        self.binary = binary or os.environ.get("KUBECTL_BIN") or kube_binary("kubectl")

    def __call__(self, *args, stdin=None, check=True):
        result = subprocess.run(
            [self.binary, "--kubeconfig", self.kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)}: {result.returncode}\n{result.stdout}\n{result.stderr}"
            )
        return result


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory):
    with apiserver_on_new_etcd(tmp_path_factory.mktemp("deploy-api")) as api:
        yield api


@pytest.fixture(scope="session")
def admin_kubeconfig(apiserver, tmp_path_factory):
    return apiserver.write_kubeconfig(tmp_path_factory.mktemp("kubeconfig") / "admin")


@pytest.fixture(scope="session")
def kubectl(admin_kubeconfig):
    """kubectl as cluster admin, with our CRD stubs installed."""
    run = Kubectl(admin_kubeconfig)
    run("apply", "-f", "-", stdin=yaml.safe_dump_all([crd_stub(*c) for c in CRD_STUBS]))
    for _, plural in CRD_STUBS:
        run(
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            f"crd/{plural}.monitoring.coreos.com",
        )
    return run
