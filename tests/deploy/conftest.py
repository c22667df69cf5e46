"""The generated manifests, and a real kube-apiserver with Debian's kubectl of its version."""
import os
import subprocess

import pytest
import yaml

from testbed.kube_apiserver import apiserver_on_new_etcd

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(REPO, "deploy")
KUBECTL = os.environ.get("KUBECTL_BIN", "/var/cache/kube-scale-exporter/kubectl")

# Our own minimal CRDs for the prometheus-operator kinds the manifests use: enough for the
# API server to know the kinds and keep their fields, nothing of the operator's schema.
CRD_STUBS = [("ServiceMonitor", "servicemonitors"), ("PrometheusRule", "prometheusrules")]


def crd_stub(kind, plural):
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com", "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "listKind": f"{kind}List",
                      "singular": kind.lower()},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                "openAPIV3Schema": {"type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }


@pytest.fixture(scope="session")
def manifests():
    """Every object that `kubectl apply -k deploy/` would send, as (file, object)."""
    with open(os.path.join(DEPLOY, "kustomization.yaml")) as f:
        kustomization = yaml.safe_load(f)
    out = []
    for rel in kustomization["resources"]:
        with open(os.path.join(DEPLOY, rel)) as f:
            out += [(rel, doc) for doc in yaml.safe_load_all(f) if doc]
    return out


class Kubectl:
    def __init__(self, kubeconfig):
        self.kubeconfig = kubeconfig

    def __call__(self, *args, stdin=None, check=True):
        if not os.access(KUBECTL, os.X_OK):
            raise FileNotFoundError(f"{KUBECTL} missing: run .ci/setup.d/45-deploy.sh")
        result = subprocess.run([KUBECTL, "--kubeconfig", self.kubeconfig, *args], input=stdin,
                                capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.returncode}\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory):
    with apiserver_on_new_etcd(tmp_path_factory.mktemp("deploy-api")) as api:
        yield api


@pytest.fixture(scope="session")
def kubectl(apiserver, tmp_path_factory):
    """kubectl as cluster admin, with our CRD stubs installed."""
    path = apiserver.write_kubeconfig(tmp_path_factory.mktemp("kubeconfig") / "admin")
    run = Kubectl(path)
    run("apply", "-f", "-", stdin=yaml.safe_dump_all([crd_stub(*c) for c in CRD_STUBS]))
    for _, plural in CRD_STUBS:
        run("wait", "--for=condition=Established", "--timeout=30s",
            f"crd/{plural}.monitoring.coreos.com")
    return run
