"""A soak of the e2e cluster itself: deploy/ on a real kubelet, scheduler and containerd,
under churn, the exporter pods' resources sampled from the node.

    flock -w 5 /var/lock/kse-bigrun.lock python -m bench.soak_cluster [--minutes 60]

Root, the cached Kubernetes 1.34 build and nothing else using the e2e cluster's ports
(`make e2e` and this cannot run together). testbed/cluster.py brings the single-node
cluster up; deploy/ goes on as the README says, with tests/e2e/overlay on top (the cluster
Deployment also reads both etcd clusters), and the node labelled control-plane so the
etcd-node DaemonSet's pod (neighbor, imagepull from the ingest directory, both local etcd
members) is the node pod. Both pods are scraped every SCRAPE_SECONDS with the metrics
reader's token, as Prometheus would. The events etcd gets EVENTS_QUOTA, room for an hour of
the kubelet's events.

The churn, each on its own thread:
- a pod created every CHURN_SECONDS and the one KEEP_PODS before it deleted: the
  scheduler binds it, the kubelet starts and kills its sandbox and container;
- every PULL_SECONDS an image of fresh layers pushed to a local registry behind a
  throttling proxy and a pod that needs it: the kubelet pulls it through containerd 2.1
  (Pulling/Pulled events, the ingest directory the node pod reads); pods and images of
  PULL_KEEP pulls ago removed;
- every BALLOON_SECONDS a preemption cycle: two balloons (priority -1,
  `run=overprovisioning`) hold most of the node's free CPU, a pod of default priority
  that does not fit beside them makes the real scheduler preempt one, then leaves, and
  the balloons' Deployment brings the preempted one back;
- every DEFRAG_SECONDS each etcd member (main's three, events) defragmented.

Every bench.soak.SAMPLE_SECONDS, for each exporter pod's process (found on the host by its container
ID): RSS, its container's working set (the cgroup's usage less inactive file pages, what
the kubelet evicts and OOM-kills by), CPU seconds, open files, threads, TCP connections to
the API server, watches up, collectors failing, and the container's restarts. Results in
bench/results/soak_cluster.md and stdout; the cluster is taken down at the end and the
host checked clean.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import requests

from bench.soak import (
    SCRAPE_SECONDS,
    every,
    report_text,
    resources,
    sample_every,
    samples_named,
)
from testbed import image, operator
from testbed.accounts import metrics_reader_token
from testbed.cluster import Cluster
from testbed.control_plane import API_PORT, EVENTS_PORT, MAIN_MEMBERS
from testbed.kube_apiserver import Api
from testbed.node import NODE_IP, NODE_NAME, PAUSE_IMAGE, free_cpu
from testbed.procs import cpu_seconds
from testbed.registry_server import RegistryServer
from testbed.throttle_proxy import ThrottleProxy

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "soak_cluster.md"
OVERLAY = ROOT / "tests" / "e2e" / "overlay"
EXPORTER_NS = "kube-scale-exporter"
NS = "kse-soak"
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
CHURN_SECONDS = 4.0
KEEP_PODS = 8
PULL_SECONDS = 30.0
PULL_KEEP = 2
PULL_RATE = 2 << 20  # bytes per second and connection through the proxy
LAYERS = (8 << 20, 4 << 20, 2 << 20)
BALLOON_SECONDS = 180.0
DEFRAG_SECONDS = 300.0
# The kubelet's events of an hour (about 5 a pod, kept for the API server's one-hour TTL)
# filled the e2e's 8 MiB events etcd at minute 56.6 of the first soak.
EVENTS_QUOTA = 64 << 20
# The API server as the pods reach it: the kubernetes Service, and its own port.
API_PORTS = {443, API_PORT}
FIGURES = (
    ("rss_mib", "RSS, MiB"),
    ("working_set_mib", "working set, MiB"),
    ("cpu_s", "CPU, s"),
    ("fds", "open files"),
    ("threads", "threads"),
    ("api_conns", "API connections"),
    ("watches_up", "watches up"),
    ("failing", "collectors failing"),
    ("restarts", "restarts"),
)


def until(what: str, fn, timeout: float, stop: threading.Event | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        if stop is not None and stop.is_set():
            raise RuntimeError(f"{what}: the soak ended first")
        time.sleep(1.0)
    raise TimeoutError(f"{what}: not after {timeout:.0f}s")


def pod(name: str, image_ref: str, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "kse-soak"}},
        "spec": {
            "containers": [{"name": "c", "image": image_ref, **spec}],
            "terminationGracePeriodSeconds": 0,
        },
    }


def running(api: Api, selector: str) -> list[dict]:
    pods = api.get(f"/api/v1/namespaces/{NS}/pods", labelSelector=selector)["items"]
    return [p for p in pods if p["status"].get("phase") == "Running"]


class Churn:
    """Pods, pulls, preemptions and defragmentations, each on its own thread."""

    def __init__(self, cluster: Cluster, api: Api, proxy: ThrottleProxy, registry):
        self.cluster, self.api, self.proxy, self.registry = cluster, api, proxy, registry
        self.stop = threading.Event()
        self.counts = {"pods": 0, "pulls": 0, "preemption cycles": 0, "defrags": 0, "errors": 0}
        self._pods: list[str] = []
        self._pulls: list[tuple[str, str]] = []
        self._balloon_cpu = 0
        self._threads = [
            threading.Thread(target=every, args=(self.stop, self.counts, period, step), daemon=True)
            for period, step in (
                (CHURN_SECONDS, self._pod),
                (PULL_SECONDS, self._pull),
                (BALLOON_SECONDS, self._preemption),
                (DEFRAG_SECONDS, self._defrag),
            )
        ]

    def start(self):
        """The balloons first: two of them holding four fifths of the free CPU."""
        self.api.create(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {"metadata": {"name": "overprovisioning"}, "value": -1, "globalDefault": False},
        )
        self._balloon_cpu = free_cpu(self.api.get) * 2 // 5
        labels = {"run": "overprovisioning"}
        self.api.create(
            f"/apis/apps/v1/namespaces/{NS}/deployments",
            {
                "metadata": {"name": "balloons"},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "priorityClassName": "overprovisioning",
                            "terminationGracePeriodSeconds": 0,
                            "containers": [
                                {
                                    "name": "pause",
                                    "image": PAUSE_IMAGE,
                                    "resources": {"requests": {"cpu": f"{self._balloon_cpu}m"}},
                                }
                            ],
                        },
                    },
                },
            },
        )
        until(
            "two balloons Running", lambda: len(running(self.api, "run=overprovisioning")) == 2, 120
        )
        for t in self._threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self._threads:
            t.join(120)

    def _pod(self):
        name = f"churn-{secrets.token_hex(4)}"
        self.api.create(
            f"/api/v1/namespaces/{NS}/pods", pod(name, PAUSE_IMAGE, imagePullPolicy="IfNotPresent")
        )
        self._pods.append(name)
        self.counts["pods"] += 1
        if len(self._pods) > KEEP_PODS:
            self.api.delete(f"/api/v1/namespaces/{NS}/pods/{self._pods.pop(0)}")

    def _pull(self):
        repo = f"soak{secrets.token_hex(4)}"
        self.registry.push_image(repo, "v1", list(LAYERS))
        ref = f"{self.proxy.host}/{repo}:v1"
        name = f"pull-{repo}"
        self.api.create(f"/api/v1/namespaces/{NS}/pods", pod(name, ref, imagePullPolicy="Always"))
        self._pulls.append((name, ref))
        self.counts["pulls"] += 1
        if len(self._pulls) > PULL_KEEP:
            old, old_ref = self._pulls.pop(0)
            self.api.delete(f"/api/v1/namespaces/{NS}/pods/{old}")
            # Its image goes too (the node's disk; node.status.images stays short). An image
            # still in use waits for the next round.
            self.cluster.ctr("images", "rm", old_ref, check=False)

    def _preemption(self):
        name = f"workload-{secrets.token_hex(3)}"
        body = pod(name, PAUSE_IMAGE, imagePullPolicy="IfNotPresent")
        body["metadata"]["labels"] = {"app": "kse-soak-workload"}
        # More than is free beside the balloons, less than is free without one of them.
        cpu = free_cpu(self.api.get) + self._balloon_cpu * 3 // 4
        body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": f"{cpu}m"}}
        self.api.create(f"/api/v1/namespaces/{NS}/pods", body)
        try:
            until(
                f"{name} Running after a preemption",
                lambda: running(self.api, "app=kse-soak-workload"),
                120,
                self.stop,
            )
        finally:
            self.api.delete(f"/api/v1/namespaces/{NS}/pods/{name}")
        until(
            "both balloons Running again",
            lambda: len(running(self.api, "run=overprovisioning")) == 2,
            120,
            self.stop,
        )
        self.counts["preemption cycles"] += 1

    def _defrag(self):
        with self.cluster.etcd_session() as s:
            for _, port, _, _ in MAIN_MEMBERS:
                s.post(
                    f"https://{NODE_IP}:{port}/v3/maintenance/defragment", json={}, timeout=60
                ).raise_for_status()
            s.post(
                f"http://{NODE_IP}:{EVENTS_PORT}/v3/maintenance/defragment", json={}, timeout=60
            ).raise_for_status()
        self.counts["defrags"] += 1


def events_db_mib() -> float:
    """The events etcd's database size: the API server's events fill it (quota EVENTS_QUOTA)."""
    with requests.Session() as s:
        s.trust_env = False
        status = s.post(
            f"http://{NODE_IP}:{EVENTS_PORT}/v3/maintenance/status", json={}, timeout=10
        )
    return int(status.json()["dbSize"]) / (1 << 20)


def exporter_pods(api: Api) -> dict[str, dict]:
    """The node pod (the etcd-node DaemonSet's, on the control-plane node) and the cluster
    pod, each Running with its container started."""
    found = {}
    for p in api.get(f"/api/v1/namespaces/{EXPORTER_NS}/pods")["items"]:
        statuses = p["status"].get("containerStatuses") or []
        if (
            p["status"].get("phase") != "Running"
            or not statuses
            or "running" not in statuses[0]["state"]
        ):
            continue
        found[p["metadata"]["labels"]["app.kubernetes.io/component"]] = p
    return found


def container_pid(container_id: str) -> int:
    """The exporter's process on the host: the one in its container's cgroup running Python."""
    cid = container_id.split("://", 1)[1]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/cgroup") as f:
                if cid not in f.read():
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"kube_scale_exporter" in f.read():
                    return int(entry)
    raise LookupError(f"no process of container {cid}")


def working_set_mib(pid: int) -> float:
    """usage less total_inactive_file of the process's memory cgroup (v1 on this host)."""
    with open(f"/proc/{pid}/cgroup") as f:
        path = next(
            line.rstrip("\n").split(":", 2)[2]
            for line in f
            if "memory" in line.split(":", 2)[1].split(",")
        )
    base = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
    usage = int((base / "memory.usage_in_bytes").read_text())
    stat = dict(line.split() for line in (base / "memory.stat").read_text().splitlines())
    return (usage - int(stat["total_inactive_file"])) / (1 << 20)


def sample(p: dict, session: requests.Session, url: str) -> dict:
    status = p["status"]["containerStatuses"][0]
    pid = container_pid(status["containerID"])
    text = session.get(url, timeout=30).text
    figures = resources(pid, API_PORTS, text)
    figures["working_set_mib"] = working_set_mib(pid)
    figures["cpu_s"] = cpu_seconds(pid)
    figures["failing"] = sum(
        1 for s in samples_named(text, "kubescale_scrape_collector_success") if s.value == 0
    )
    figures["restarts"] = status.get("restartCount", 0)
    return figures


def urls(pods: dict[str, dict]) -> dict[str, str]:
    """Where each of exporter_pods' pods answers."""
    return {
        "node": f"http://{NODE_IP}:9867/metrics",
        "cluster": f"http://{pods['cluster']['status']['podIP']}:9867/metrics",
    }


def scrape_loop(api: Api, session: requests.Session, stop: threading.Event, failures: dict):
    """Both pods every SCRAPE_SECONDS; a pod that moved (a restart) is found again."""
    targets = urls(exporter_pods(api))
    while not stop.wait(SCRAPE_SECONDS):
        for name, url in targets.items():
            try:
                session.get(url, timeout=10).raise_for_status()
            except requests.RequestException as exc:
                failures[name] = failures.get(name, 0) + 1
                print(f"scrape {name}: {exc}"[:300], flush=True)
                with contextlib.suppress(Exception):
                    targets = urls(exporter_pods(api))


def deploy(cluster: Cluster, api: Api) -> None:
    """deploy/ with the e2e overlay (its etcd client Secret first), the node labelled
    control-plane; until both exporter pods are ready."""
    operator.apply_crds(cluster.kubeconfig)
    cluster.kubectl("create", "namespace", EXPORTER_NS)
    cluster.etcd_client_secret(EXPORTER_NS, "kse-e2e-etcd-client")  # the overlay mounts it
    cluster.kubectl("apply", "-f", "-", input=cluster.kubectl("kustomize", str(OVERLAY)))
    api.merge_patch(f"/api/v1/nodes/{NODE_NAME}", {"metadata": {"labels": {CONTROL_PLANE: ""}}})

    def ready():
        pods = exporter_pods(api)
        node = pods.get("node")
        return (
            node is not None
            and node["metadata"]["labels"].get("kube-scale-exporter/placement") == "etcd"
            and "cluster" in pods
            and all(p["status"]["containerStatuses"][0].get("ready") for p in pods.values())
        )

    until("the etcd-node pod and the cluster pod ready", ready, 300)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench.soak_cluster: the e2e cluster needs root")
    started_at = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows: dict[str, list[tuple[float, dict]]] = {"node": [], "cluster": []}
    db: list[float] = []
    cluster = Cluster(events_quota=EVENTS_QUOTA)
    remains: list[str] = []
    try:
        with (
            tempfile.TemporaryDirectory(prefix="soak-cluster-", dir="/tmp") as tmp,
            contextlib.ExitStack() as stack,
        ):
            cluster.up(images=[image.build()])
            api = Api(cluster.server, str(cluster.pki / "ca.crt"), cluster.admin_token)
            deploy(cluster, api)
            api.create("/api/v1/namespaces", {"metadata": {"name": NS}})
            until(
                f"ServiceAccount {NS}/default",
                lambda: api.get(f"/api/v1/namespaces/{NS}/serviceaccounts")["items"],
                60,
            )
            session = stack.enter_context(requests.Session())
            session.trust_env = False
            token = metrics_reader_token(api.create, EXPORTER_NS, "soak", seconds=24 * 3600)
            session.headers["Authorization"] = f"Bearer {token}"
            registry = RegistryServer(f"{tmp}/registry").start()
            stack.callback(registry.stop)
            proxy = ThrottleProxy(tmp, registry.port, PULL_RATE)
            stack.callback(proxy.stop)
            cluster.add_registry(proxy.host, f"http://{proxy.host}")
            churn = Churn(cluster, api, proxy, registry)
            churn.start()
            stack.callback(churn.finish)
            stop, failures = threading.Event(), {}
            threading.Thread(
                target=scrape_loop, args=(api, session, stop, failures), daemon=True
            ).start()
            stack.callback(stop.set)

            def take(elapsed: float) -> str:
                # A pod being replaced (a restart, an eviction) is waited for, and counted.
                pods = until(
                    "both exporter pods running",
                    lambda: found if len(found := exporter_pods(api)) == 2 else None,
                    180,
                )
                where = urls(pods)
                for name in rows:
                    rows[name].append((elapsed, sample(pods[name], session, where[name])))
                db.append(events_db_mib())
                return f"{churn.counts} events db {db[-1]:.1f} MiB; " + "; ".join(
                    f"{n}: {r[-1][1]}" for n, r in rows.items()
                )

            sample_every(args.minutes, take)
            counts = dict(churn.counts)
            text = session.get(urls(exporter_pods(api))["cluster"], timeout=30).text
            for key, metric in (
                ("preemptions counted", "kubescale_balloon_preemptions_total"),
                ("pulls counted", "kubescale_image_pulls_succeeded_total"),
            ):
                counts[key] = int(sum(s.value for s in samples_named(text, metric)))
            cluster_rss = cluster.rss_mib()
    finally:
        remains = cluster.down()
        for line in remains:
            print("remains:", line)
    text = report(args.minutes, started_at, rows, counts, failures, db, cluster_rss, remains)
    print(text)
    RESULTS.write_text(text)
    return 1 if remains else 0


def report(minutes, started_at, rows, counts, failures, db, cluster_rss, remains) -> str:
    return report_text(
        f"The e2e cluster under churn, {minutes:g} minutes "
        f"(`python -m bench.soak_cluster --minutes {minutes:g}`)",
        f"Started {started_at} on the shared 2-core machine: Kubernetes 1.34 "
        "(testbed/cluster.py), deploy/ with tests/e2e/overlay, the node labelled control-plane.",
        counts,
        failures,
        rows,
        FIGURES,
        more=f" Events etcd database {db[0]:.1f} MiB first, {max(db):.1f} MiB at most "
        f"(quota {EVENTS_QUOTA >> 20} MiB). The cluster's own processes: {cluster_rss:.0f} MiB "
        "RSS at the end. Host after `down`: "
        + ("clean" if not remains else "NOT clean: " + "; ".join(remains))
        + ".",
    )


if __name__ == "__main__":
    raise SystemExit(main())
