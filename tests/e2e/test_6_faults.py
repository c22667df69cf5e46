"""Scenario 5: faults a real cluster has, with the exporter left to recover on its own.

The API server restarted, the kubelet restarted, containerd restarted in the middle of a
pull, and the leader of the 3-member main etcd stopped (then started again). For each: the
exporter's targets, collectors and watches come back without anyone touching its pods;
the pull in progress is seen again once the kubelet retries it; the alert that fires all
along on this host (`KubeScaleNeighborThresholdsAtKernelDefault`: the kernel's gc_thresh
defaults) stays firing at every look, and no other alert fires. The mixin's `for:` are 15 s
here (conftest.SHORT_FOR), so an outage the exporter did not ride out would show.
"""

import threading
import time

import pytest
import requests

from testbed.control_plane import MAIN_MEMBERS
from testbed.node import NODE_IP

from .conftest import NS, TIMINGS, wait_for

CLUSTER_JOB = 'job="kube-scale-exporter-cluster"'
NODE_JOB = 'job="kube-scale-exporter-node"'
STEADY = "KubeScaleNeighborThresholdsAtKernelDefault"


class AlertWatch:
    """Polls Prometheus' alerts every second from a thread: the firing set at each look."""

    def __init__(self, prom):
        self.prom = prom
        self.looks: list[set[str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.looks.append({a["labels"]["alertname"] for a in self.prom.firing(None)})
            except requests.RequestException:
                pass  # Prometheus itself is not under test here
            self._stop.wait(1.0)

    def __enter__(self):
        self.before = {a["labels"]["alertname"] for a in self.prom.firing(None)}
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)

    def assert_steady(self):
        assert len(self.looks) >= 10, self.looks
        gaps = [i for i, firing in enumerate(self.looks) if STEADY not in firing]
        assert not gaps, f"{STEADY} resolved at looks {gaps} of {len(self.looks)}"
        new = set().union(*self.looks) - self.before
        assert not new, f"alerts fired by the fault: {sorted(new)}"


@pytest.fixture
def steady(prom):
    wait_for(f"{STEADY} firing", lambda: prom.firing(STEADY), timeout=90)
    return prom


def exporter_healthy(prom):
    """Both targets up, every collector's last scrape a success, every watch up."""
    for job in (CLUSTER_JOB, NODE_JOB):
        if prom.value(f"min(up{{{job}}})") != 1:
            return False
        if prom.value(f"min(kubescale_scrape_collector_success{{{job}}})") != 1:
            return False
    return prom.value("min(kubescale_kube_watch_up)") == 1


def recovered_after(prom, what, started, timeout=120):
    wait_for(f"exporter healthy after {what}", lambda: exporter_healthy(prom), timeout=timeout)
    TIMINGS[f"fault_{what}_recovered"] = time.monotonic() - started


def watch_relists(prom):
    return prom.value("sum(kubescale_kube_relists_total)") or 0


def test_api_server_restarted(steady, cluster):
    prom = steady
    wait_for("healthy before", lambda: exporter_healthy(prom), timeout=60)
    with AlertWatch(prom) as watch:
        t = time.monotonic()
        cluster.restart("kube-apiserver", down_seconds=3)
        cluster.wait_apiserver()
        # The watches went down with it (a fresh list after the restart) and came back.
        recovered_after(prom, "apiserver", t)
        time.sleep(20)  # past every shortened `for:`
    watch.assert_steady()


def test_kubelet_restarted(steady, cluster, kube):
    prom = steady
    wait_for("healthy before", lambda: exporter_healthy(prom), timeout=60)
    pods_before = {p["metadata"]["uid"] for p in kube.pods(NS)}
    with AlertWatch(prom) as watch:
        t = time.monotonic()
        cluster.restart("kubelet", down_seconds=3)
        cluster.wait_node_ready()
        recovered_after(prom, "kubelet", t)
        time.sleep(20)
    watch.assert_steady()
    # The exporter's pods rode it out: none replaced.
    assert {p["metadata"]["uid"] for p in kube.pods(NS)} == pods_before


def test_containerd_restarted_mid_pull(steady, cluster, kube, pull_registry):
    prom = steady
    reg, proxy = pull_registry
    reg.push_image("restart", "1", [200 * 1024 * 1024])
    ns = "e2e-fault-pull"
    kube.namespace(ns)
    in_progress = f"kubescale_image_pulls_in_progress{{{NODE_JOB}}}"
    try:
        kube.post(
            f"/api/v1/namespaces/{ns}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "restart"},
                "spec": {
                    "containers": [{"name": "c", "image": f"{proxy.host}/restart:1"}],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        )
        wait_for("pull in progress", lambda: prom.value(in_progress) == 1, timeout=90)
        with AlertWatch(prom) as watch:
            t = time.monotonic()
            cluster.restart("containerd", down_seconds=2)
            cluster.wait_containerd()
            recovered_after(prom, "containerd", t)
            # The kubelet pulls again after its back-off: seen as in progress again.
            wait_for("the pull retried", lambda: prom.value(in_progress) == 1, timeout=120)
            time.sleep(20)
        watch.assert_steady()
    finally:
        kube.delete(f"/api/v1/namespaces/{ns}")
    wait_for(
        "namespace gone",
        lambda: kube.s.get(f"{kube.server}/api/v1/namespaces/{ns}", timeout=10).status_code == 404,
        timeout=120,
        interval=2,
    )


def main_leader(cluster):
    """The name of main's leader, from each member's Status (over TLS, the etcd client pair)."""
    s = requests.Session()
    s.trust_env = False
    s.verify = str(cluster.pki / "etcd/ca.crt")
    s.cert = (
        str(cluster.pki / "etcd/healthcheck-client.crt"),
        str(cluster.pki / "etcd/healthcheck-client.key"),
    )
    for name, client, _, _ in MAIN_MEMBERS:
        try:
            status = s.post(f"https://{NODE_IP}:{client}/v3/maintenance/status", json={}, timeout=5)
        except requests.RequestException:
            continue
        doc = status.json()
        if doc.get("leader") and doc["leader"] == doc["header"]["member_id"]:
            return name
    return None


def test_main_etcd_leader_stopped(steady, cluster):
    prom = steady
    wait_for("healthy before", lambda: exporter_healthy(prom), timeout=60)
    leader = wait_for("main's leader", lambda: main_leader(cluster), timeout=30)
    members = f'kubescale_etcd_up{{{CLUSTER_JOB},etcd_cluster="main"}}'
    with AlertWatch(prom) as watch:
        t = time.monotonic()
        cluster.stop_process(f"etcd-{leader}")
        new_leader = wait_for("a new leader", lambda: main_leader(cluster), timeout=30)
        assert new_leader != leader
        # The cluster Deployment still sees main, through the members left.
        wait_for("main up from the Deployment", lambda: prom.value(members) == 1, timeout=60)
        time.sleep(5)
        cluster.start_process(f"etcd-{leader}")
        recovered_after(prom, "etcd_leader", t)
        time.sleep(20)
    watch.assert_steady()
    TIMINGS["fault_etcd_leader"] = time.monotonic() - t
