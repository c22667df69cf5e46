"""End to end: a real single-node cluster, the image built from this tree, deploy/ applied as
the README says, and Debian's Prometheus scraping it through Kubernetes service discovery.

Run with `make e2e` (root; KSE_E2E=1). One cluster for the whole session (`up` is the
expensive part); the scenario files run in name order and each leaves the cluster as it
found it. test_9_host_clean.py takes the cluster down and checks the host.
"""

import json
import os
import pathlib
import time

import pytest
import requests
import yaml

from testbed import image, operator
from testbed.accounts import metrics_reader_token
from testbed.cluster import Cluster
from testbed.node import NODE_IP, NODE_NAME
from testbed import prometheus
from testbed.prometheus import PrometheusServer
from testbed.registry_server import RegistryServer
from testbed.throttle_proxy import ThrottleProxy
from tools.build_mixin import mixin_object

REPO = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
NS = "kube-scale-exporter"
SCRAPE = "5s"
# Every `for:` of the mixin shortened through its _config, so an alert fires within a test.
SHORT_FOR = "15s"
TIMINGS = {}


def wait_for(what, fn, timeout=120.0, interval=1.0):
    """fn() until it returns something truthy; its last value or exception in the failure."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
            last = value
        except Exception as e:  # noqa: BLE001  (reported if it never succeeds)
            last = repr(e)
        time.sleep(interval)
    raise TimeoutError(f"{what}: not after {timeout:.0f}s (last: {str(last)[:2000]})")


class Kube:
    """The cluster's API as admin, plus kubectl."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.server = cluster.server
        self.s = cluster.session()

    def get(self, path, **params):
        r = self.s.get(self.server + path, params=params or None, timeout=30)
        r.raise_for_status()
        return r.json()

    def post(self, path, body, ok=(200, 201, 202)):
        r = self.s.post(self.server + path, json=body, timeout=30)
        if r.status_code not in ok:
            raise AssertionError(f"POST {path}: {r.status_code} {r.text[:500]}")
        return r.json()

    def patch(self, path, body):
        r = self.s.patch(
            self.server + path,
            json=body,
            timeout=30,
            headers={"Content-Type": "application/merge-patch+json"},
        )
        r.raise_for_status()
        return r.json()

    def delete(self, path):
        r = self.s.delete(self.server + path, json={"gracePeriodSeconds": 0}, timeout=30)
        if r.status_code not in (200, 202, 404):
            raise AssertionError(f"DELETE {path}: {r.status_code} {r.text[:300]}")

    def namespace(self, name):
        """A new namespace, once its default ServiceAccount exists (pods need it)."""
        self.post("/api/v1/namespaces", {"metadata": {"name": name}})
        wait_for(
            f"ServiceAccount {name}/default",
            lambda: (
                self.s.get(
                    f"{self.server}/api/v1/namespaces/{name}/serviceaccounts/default", timeout=10
                ).ok
            ),
            timeout=60,
            interval=0.3,
        )

    def pods(self, ns=NS, selector=None):
        params = {"labelSelector": selector} if selector else {}
        return self.get(f"/api/v1/namespaces/{ns}/pods", **params)["items"]

    def kubectl(self, *args, input=None, check=True):
        return self.cluster.kubectl(*args, input=input, check=check)

    def apply_kustomization(self, directory):
        """`kubectl apply -k`, with the server's own kubectl version."""
        rendered = self.kubectl("kustomize", str(directory))
        self.cluster.kubectl("apply", "-f", "-", input=rendered)
        return rendered

    def delete_kustomization(self, directory):
        rendered = self.kubectl("kustomize", str(directory))
        self.cluster.kubectl(
            "delete",
            "--wait=true",
            "--ignore-not-found",
            "-f",
            "-",
            input=rendered,
        )


class Prom(PrometheusServer):
    def alerts(self, name=None, **labels):
        data = self.session.get(self.url + "/api/v1/alerts", timeout=5).json()["data"]["alerts"]
        return [
            a
            for a in data
            if (name is None or a["labels"]["alertname"] == name)
            and all(a["labels"].get(k) == v for k, v in labels.items())
        ]

    def firing(self, name, **labels):
        return [a for a in self.alerts(name, **labels) if a["state"] == "firing"]

    def value(self, expr):
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def targets(self):
        return self.session.get(self.url + "/api/v1/targets", timeout=5).json()["data"][
            "activeTargets"
        ]


def e2e_rules() -> dict:
    """The mixin's recording rules and alerts with every `for:` at SHORT_FOR, the groups on
    nodeAlertInterval and slowInterval at the stack's own interval (their 2 and 4 minutes
    are longer than any wait here), and the
    image pull backlog threshold at 1 (one queued pull is what a one-node test can make)."""
    defaults = mixin_object()["config"]
    config = {k: SHORT_FOR for k in defaults if k.endswith("For")}
    config["nodeAlertInterval"] = config["slowInterval"] = SCRAPE
    config["imagePullQueuedThreshold"] = 1
    m = mixin_object(config)
    return {"groups": m["rules"]["groups"] + m["alerts"]["groups"]}


def prometheus_config(kubeconfig: str, token_file: str) -> dict:
    """deploy/prometheus/prometheus.yml as shipped, pointed at the cluster from outside it
    (kubeconfig_file), scraping every 5 s with the stand-in Prometheus account's token
    (the kube-rbac component: outside a pod there is no service-account token file)."""
    cfg = yaml.safe_load((REPO / "deploy/prometheus/prometheus.yml").read_text())
    cfg.setdefault("global", {}).update(scrape_interval=SCRAPE, evaluation_interval=SCRAPE)
    for job in cfg["scrape_configs"]:
        job["scrape_interval"], job["scrape_timeout"] = SCRAPE, "4s"
        job["authorization"]["credentials_file"] = token_file
        for sd in job["kubernetes_sd_configs"]:
            sd["kubeconfig_file"] = kubeconfig
    cfg["rule_files"] = ["rules.json"]
    return cfg


@pytest.fixture(scope="session")
def cluster():
    if os.geteuid() != 0:
        pytest.skip("the e2e cluster needs root")
    t = time.monotonic()
    archives = [image.build(), operator.reloader_image()[1], operator.prometheus_image()[1]]
    TIMINGS["image"] = time.monotonic() - t
    c = Cluster()
    try:
        c.up(images=archives)
    except BaseException:
        c.down(verify=False)  # a half-started cluster must not stay on the host
        raise
    TIMINGS["up"] = c.timings["up"]
    yield c
    if c.load():
        c.down(verify=False)


def pytest_terminal_summary(terminalreporter):
    """The measured times (docs/deploy.md "Tested end to end" quotes them)."""
    if TIMINGS:
        terminalreporter.write_sep("-", "e2e timings (s)")
        terminalreporter.write_line(
            json.dumps(
                {k: round(v, 1) if isinstance(v, float) else v for k, v in TIMINGS.items()},
                default=str,
            )
        )


@pytest.fixture(scope="session")
def kube(cluster):
    return Kube(cluster)


@pytest.fixture(scope="session")
def deployed(kube):
    """deploy/ applied as the README says (`kubectl apply -k deploy/`), after the CRDs of
    the prometheus-operator release the tests pin (its ServiceMonitor and PrometheusRule
    schemas check ours); both workloads running."""
    t = time.monotonic()
    operator.apply_crds(kube.cluster.kubeconfig)
    kube.apply_kustomization(REPO / "deploy")
    SCRAPE_TOKEN.append(metrics_reader_token(kube.post, NS, "e2e-prometheus"))
    wait_exporters_ready(kube)
    TIMINGS["deploy"] = time.monotonic() - t
    return kube


# The stand-in Prometheus' token (deploy/components/kube-rbac, in the default install):
# metrics_text and the test Prometheus send it. Set by `deployed`.
SCRAPE_TOKEN: list[str] = []


def running_and_ready(pod) -> bool:
    """Running, every container ready, and not on its way out (a terminating pod still
    says Running and ready until its process exits)."""
    return (
        pod["status"].get("phase") == "Running"
        and "deletionTimestamp" not in pod["metadata"]
        and all(c.get("ready") for c in pod["status"].get("containerStatuses", []))
    )


def wait_exporters_ready(kube, timeout=180):
    def ready():
        pods = kube.pods(selector="app.kubernetes.io/name=kube-scale-exporter")
        running = [p for p in pods if running_and_ready(p)]
        comps = {p["metadata"]["labels"]["app.kubernetes.io/component"] for p in running}
        return comps >= {"node", "cluster"} and len(running) == len(pods)

    return wait_for("exporter pods Running and ready", ready, timeout=timeout, interval=2)


@pytest.fixture(scope="session")
def prom(deployed, cluster, tmp_path_factory):
    work = tmp_path_factory.mktemp("prometheus")
    (work / "rules.json").write_text(json.dumps(e2e_rules()))
    (work / "token").write_text(SCRAPE_TOKEN[0])
    p = Prom(
        work,
        prometheus_config(str(cluster.kubeconfig), str(work / "token")),
        binary=prometheus.newest("prometheus"),  # built with Kubernetes service discovery
        extra_args=["--storage.tsdb.retention.time=1d"],
    )
    p.start()
    yield p
    p.proc.stop()


def metrics_text(url, timeout=5):
    s = requests.Session()
    s.trust_env = False
    if SCRAPE_TOKEN:
        s.headers["Authorization"] = f"Bearer {SCRAPE_TOKEN[0]}"
    r = s.get(url, timeout=timeout)
    r.raise_for_status()
    return r.text


# Bytes per second per connection through the registry's throttling proxy.
RATE = 2 * 1024 * 1024


@pytest.fixture
def pull_registry(tmp_path, cluster):
    """A local docker-registry behind a throttling proxy the node's containerd pulls from:
    (registry, proxy); `proxy.proc.pause()` freezes every download."""
    reg = RegistryServer(tmp_path / "registry").start()
    proxy = ThrottleProxy(tmp_path, reg.port, RATE)
    cluster.add_registry(proxy.host, f"http://{proxy.host}")
    yield reg, proxy
    proxy.proc.resume()
    proxy.stop()
    reg.stop()


NODE_METRICS = f"http://{NODE_IP}:9867/metrics"
__all__ = [
    "NODE_METRICS",
    "NODE_NAME",
    "NS",
    "RATE",
    "TIMINGS",
    "metrics_text",
    "running_and_ready",
    "wait_exporters_ready",
    "wait_for",
]
