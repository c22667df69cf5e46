"""`kubectl apply -k deploy/` against a real kube-apiserver: server-side dry-run of every
object (validation, defaulting and admission run, nothing is stored), and the RBAC it
grants, asked of the API server's own authorizer.

A kubectl whose kustomize knows Components renders (conftest.kustomize), the kubectl of
the API server's version applies what it rendered; the example overlay goes through the
same dry-run."""

import json
import time

import pytest
import requests
import yaml

from testbed.exporter import start_exporter
from testbed.kustomize import kustomize, kustomize_kubectl
from tests.deploy.conftest import DEPLOY, OVERLAY, Kubectl

pytestmark = pytest.mark.integration

NAMESPACE = "kube-scale-exporter"


@pytest.fixture(scope="module")
def namespace(kubectl, manifests):
    # Server-side dry-run of a namespaced object needs its namespace to exist for real.
    [ns] = [obj for obj in manifests if obj["kind"] == "Namespace"]
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(ns))
    return NAMESPACE


@pytest.mark.parametrize("path", [DEPLOY, OVERLAY], ids=["default", "overlays/example"])
def test_every_manifest_passes_server_side_dry_run(kubectl, namespace, path):
    rendered = kustomize(path)
    objs = [obj for obj in yaml.safe_load_all(rendered) if obj]
    result = kubectl("apply", "--dry-run=server", "-f", "-", stdin=rendered)
    lines = result.stdout.strip().splitlines()
    assert all(line.endswith("(server dry run)") for line in lines), result.stdout
    kinds = {obj["kind"] for obj in objs}
    assert {
        "DaemonSet",
        "Deployment",
        "ClusterRole",
        "ClusterRoleBinding",
        "ServiceAccount",
        "Service",
        "ServiceMonitor",
        "PrometheusRule",
    } <= kinds
    assert len(lines) == len(objs)
    for obj in objs:
        name = obj["metadata"]["name"]
        assert any(f"/{name} " in line for line in lines), (obj["kind"], name)
    # nothing but the namespace was stored
    stored = json.loads(
        kubectl(
            "get", "daemonsets,deployments,services,serviceaccounts", "-n", namespace, "-o", "json"
        ).stdout
    )["items"]
    assert stored == []  # (no controller-manager here makes a `default` ServiceAccount)


def test_the_one_line_install_itself(admin_kubeconfig, kubectl, namespace, manifests):
    """`kubectl apply -k deploy/` as an operator types it, with the newer kubectl that
    renders (its version is outside the API server's skew, which a dry-run tolerates)."""
    result = Kubectl(admin_kubeconfig, kustomize_kubectl())(
        "apply", "--dry-run=server", "-k", DEPLOY
    )
    lines = result.stdout.strip().splitlines()
    assert len(lines) == len(manifests), result.stdout
    assert all(line.endswith("(server dry run)") for line in lines), result.stdout


def test_the_server_defaults_keep_the_pods_locked_down(kubectl, namespace):
    """What the API server would store, after defaulting, still says what we asked."""
    out = kubectl(
        "apply", "--dry-run=server", "-f", "-", "-o", "json", stdin=kustomize(DEPLOY)
    ).stdout
    items = (
        json.loads(out)["items"]
        if out.lstrip().startswith("{")
        else [json.loads(doc) for doc in out.split("\n}\n") if doc.strip()]
    )
    pods = {
        i["metadata"]["name"]: i["spec"]["template"]["spec"]
        for i in items
        if i["kind"] in ("DaemonSet", "Deployment")
    }
    assert set(pods) == {
        "kube-scale-exporter-node",
        "kube-scale-exporter-etcd-node",
        "kube-scale-exporter-cluster",
    }
    for name, pod in pods.items():
        [c] = pod["containers"]
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}, name
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        for v in pod.get("volumes", ()):
            assert "hostPath" not in v or any(
                m["name"] == v["name"] and m["readOnly"] for m in c["volumeMounts"]
            )


def test_dry_run_rejects_what_the_server_would_reject(kubectl, namespace, manifests):
    """The dry-run is not a rubber stamp: a broken DaemonSet fails it."""
    ds = next(obj for obj in manifests if obj["kind"] == "DaemonSet")
    broken = json.loads(json.dumps(ds))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsUser"] = -1
    result = kubectl(
        "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(broken), check=False
    )
    assert result.returncode != 0
    assert "securityContext.runAsUser: Invalid value: -1" in result.stderr, result.stderr


def can_i(kubectl, account, verb, resource, subresource=None):
    args = [
        "auth",
        "can-i",
        verb,
        resource,
        "--all-namespaces",
        f"--as=system:serviceaccount:{NAMESPACE}:{account}",
    ]
    if subresource:
        args.append(f"--subresource={subresource}")
    result = kubectl(*args, check=False)
    assert result.stdout.strip() in ("yes", "no"), result
    return result.stdout.strip() == "yes"


@pytest.fixture(scope="module")
def rbac_applied(kubectl, namespace, manifests):
    """The ServiceAccounts and RBAC objects, stored for real so the authorizer can use them."""
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
    docs = [obj for obj in manifests if obj["kind"] in kinds]
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    return {obj["metadata"]["name"] for obj in docs if obj["kind"] == "ServiceAccount"}


# The kube-rbac component (default): both accounts review scrapers' tokens.
REVIEWS = [
    ("create", "tokenreviews.authentication.k8s.io"),
    ("create", "subjectaccessreviews.authorization.k8s.io"),
]
ALLOWED = {
    "kube-scale-exporter-node": [("list", "pods"), ("watch", "pods"), *REVIEWS],
    "kube-scale-exporter-cluster": [
        *REVIEWS,
        ("list", "pods"),
        ("watch", "pods"),
        ("list", "nodes"),
        ("watch", "nodes"),
        ("list", "events"),
        ("watch", "events"),
        ("list", "priorityclasses.scheduling.k8s.io"),
        ("watch", "priorityclasses.scheduling.k8s.io"),
    ],
}
DENIED = [
    ("get", "secrets", None),
    ("list", "secrets", None),
    ("get", "nodes", "proxy"),
    ("create", "nodes", "proxy"),
    ("create", "pods", None),
    ("delete", "pods", None),
    ("create", "pods", "exec"),
    ("get", "pods", "log"),
    ("list", "configmaps", None),
    ("patch", "nodes", None),
    ("create", "serviceaccounts", "token"),
]


@pytest.mark.parametrize("account", sorted(ALLOWED))
def test_the_api_server_grants_exactly_the_reads_the_collectors_need(
    kubectl, rbac_applied, account
):
    assert account in rbac_applied
    for verb, resource in ALLOWED[account]:
        assert can_i(kubectl, account, verb, resource), (account, verb, resource)
    for verb, resource, sub in DENIED:
        assert not can_i(kubectl, account, verb, resource, sub), (account, verb, resource, sub)
    if account.endswith("-node"):
        for verb, resource in ALLOWED["kube-scale-exporter-cluster"]:
            if resource != "pods" and (verb, resource) not in REVIEWS:
                assert not can_i(kubectl, account, verb, resource), (verb, resource)
        assert not can_i(kubectl, account, "get", "pods")  # informers list and watch only


def service_account_kubeconfig(apiserver, account, path):
    """A kubeconfig holding a TokenRequest token of one of our ServiceAccounts."""
    token = apiserver.admin.create(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600},
        },
    )["status"]["token"]
    return apiserver.write_kubeconfig(path, token=token)


def metrics_reader_token(apiserver, kubectl):
    """A token of a stand-in Prometheus ServiceAccount bound to the metrics reader role,
    as docs/deploy.md tells users to bind theirs (--web.kube-rbac, the default)."""
    kubectl("create", "serviceaccount", "prometheus", "-n", "default", check=False)
    kubectl(
        "create",
        "clusterrolebinding",
        "prometheus-kube-scale-exporter",
        "--clusterrole=kube-scale-exporter-metrics-reader",
        "--serviceaccount=default:prometheus",
        check=False,
    )
    return apiserver.admin.create(
        "/api/v1/namespaces/default/serviceaccounts/prometheus/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]


def scrape_until(url, predicate, timeout=30, token=None):
    session = requests.Session()
    session.trust_env = False
    if token:
        session.headers["Authorization"] = f"Bearer {token}"
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        try:
            text = session.get(url, timeout=10).text
        except requests.RequestException:
            text = ""
        if predicate(text):
            return text
        time.sleep(0.5)
    return text


@pytest.mark.parametrize(
    "account,granted", [("kube-scale-exporter-cluster", True), ("kube-scale-exporter-node", False)]
)
def test_the_cluster_deployment_runs_on_its_role_and_not_on_less(
    apiserver, kubectl, rbac_applied, manifests, tmp_path, account, granted
):
    """The Deployment's own args, as its ServiceAccount: every informer syncs. With the
    node pods' narrower role instead, they cannot, and the collectors fail. Both roles
    review the scraper's token (--web.kube-rbac): the metrics reader's is let in, no
    token is not."""
    [dep] = [obj for obj in manifests if obj["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    kubeconfig = service_account_kubeconfig(apiserver, account, tmp_path / "kubeconfig")
    exporter = start_exporter([*args, "--kube.kubeconfig", kubeconfig], tmp_path)
    proc = exporter.proc
    try:
        url = exporter.url + "/metrics"
        collectors = ("balloon", "imagepull_events")
        success = [f'kubescale_scrape_collector_success{{collector="{c}"}} 1.0' for c in collectors]
        assert requests.get(url, timeout=10).status_code == 401
        text = scrape_until(
            url,
            lambda t: all(line in t for line in success),
            timeout=30 if granted else 8,
            token=metrics_reader_token(apiserver, kubectl),
        )
        if granted:
            assert all(line in text for line in success), proc.log_tail()
            for resource in ("pods", "priorityclasses", "nodes"):  # balloon reports these
                assert f'kubescale_kube_watch_up{{resource="{resource}"}} 1.0' in text
        else:
            for c in collectors:
                assert f'kubescale_scrape_collector_success{{collector="{c}"}} 0.0' in text
            assert "forbidden" in proc.log_tail().lower()
    finally:
        proc.stop()
