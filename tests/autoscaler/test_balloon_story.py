"""The balloon story of the seed, with the real cluster-autoscaler (kwok provider) on the real
1.37 control plane: balloons make the autoscaler add nodes; a real workload preempts them and
the autoscaler adds nodes again, and the balloons run again; with both node groups at their
max, preempted balloons stay Pending. The exporter's balloon series show each step, and the
mixin's KubeScaleBalloon* alerts, evaluated by a live Prometheus (the newest release the tests
run, 3.16) scraping the exporter, fire when they should.

The alerts' windows are shortened (KNOBS) so the story takes minutes, not the hour the
defaults would: the same expressions, smaller numbers.
"""

import json
import shutil
import tempfile
import time

import pytest
import requests

from testbed import prometheus
from testbed.autoscaler import ClusterAutoscaler, NodeGroup
from testbed.exporter import start_exporter
from testbed.fleet import CPU_NODE, GPU_RESOURCE, Fleet, FleetSize
from testbed.metrics import parse_exposition
from testbed.prometheus import PrometheusServer
from tests.autoscaler.support import apply_deployment, deployment, rule_files
from tests.mixin.support import prometheus_binary

pytestmark = pytest.mark.integration

BALLOON_NS = "overprovisioning"
WORKLOAD_NS = "workload"
SELECTOR = ("run", "overprovisioning")  # the cluster-autoscaler FAQ's balloon label
CLUSTER_JOB = "kube-scale-exporter-cluster"
KNOBS = {
    "balloonExhaustedFor": "30s",
    "balloonPendingSeconds": 30,
    "balloonPendingFor": "10s",
    "gapTolerance": "20s",
}
CPU_GROUP = NodeGroup("cpu", max_size=4)
GPU_GROUP = NodeGroup("gpu", max_size=1, gpu=True)
# A pod that fills one node of its group (the template also carries a kube-proxy the
# autoscaler adds to its simulation; 1 CPU and 8 GiB are left for it and daemons).
FILL_CPU = {"cpu": str(int(CPU_NODE["cpu"]) - 1), "memory": "120Gi"}
FILL_GPU = {"cpu": "8", "memory": "64Gi", GPU_RESOURCE: "8"}
STEP_TIMEOUT = 120.0


def balloons(pool, replicas, fill):
    """The FAQ's overprovisioning Deployment for one node group: pods that fill a node."""
    return deployment(
        f"overprovisioning-{pool}",
        BALLOON_NS,
        replicas,
        fill,
        labels={SELECTOR[0]: SELECTOR[1], "pool": pool},
        gpu=pool == "gpu",
        priority_class="overprovisioning",
    )


class Story:
    """The cluster, the exporter and Prometheus, and what the test reads of them."""

    def __init__(self, fleet, ca, exporter, prom):
        self.fleet, self.ca, self.exporter, self.prom = fleet, ca, exporter, prom
        self.t0 = time.monotonic()
        self.log = []  # (seconds since start, what)
        self._alert_states = {}
        self.scrapes = []

    def note(self, what):
        self.log.append((round(time.monotonic() - self.t0, 1), what))

    def scrape(self) -> dict:
        """The balloon series of one scrape: {(name, labels...): value}."""
        text = requests.get(self.exporter.url + "/metrics", timeout=10).text
        out = {}
        for family in parse_exposition(text):
            for s in family.samples:
                if s.name.startswith("kubescale_balloon_"):
                    out[(s.name, *sorted(s.labels.items()))] = s.value
        return out

    def series(self, name, **labels):
        return self.scrape()[(name, *sorted(labels.items()))]

    def phases(self):
        got = self.scrape()
        return {
            phase: int(got[("kubescale_balloon_pods", ("phase", phase))])
            for phase in ("Pending", "Running")
        }

    def alerts(self) -> dict:
        reply = self.prom.session.get(self.prom.url + "/api/v1/alerts", timeout=5).json()
        return {
            a["labels"]["alertname"]: a["state"]
            for a in reply["data"]["alerts"]
            if a["labels"]["alertname"].startswith("KubeScaleBalloon")
        }

    def _note_alert_changes(self):
        states = self.alerts()
        for name in sorted(set(states) | set(self._alert_states)):
            if states.get(name) != self._alert_states.get(name):
                self.note(f"{name} {states.get(name, 'inactive')}")
        self._alert_states = states

    def seen(self) -> dict:
        """One scrape's phases, CPU reserved and preemptions, kept in `self.scrapes`: a
        step's passing states (a Pending lasting seconds) are read back from there."""
        got = self.scrape()
        now = {
            "Pending": int(got[("kubescale_balloon_pods", ("phase", "Pending"))]),
            "Running": int(got[("kubescale_balloon_pods", ("phase", "Running"))]),
            "cpu": got.get(
                ("kubescale_balloon_reserved", ("resource", "cpu"), ("unit", "core")), 0
            ),
            "preemptions": got[("kubescale_balloon_preemptions_total",)],
        }
        self.scrapes.append(now)
        return now

    def wait(self, what, predicate, timeout=STEP_TIMEOUT, every=1.0):
        deadline = time.monotonic() + timeout
        while True:
            self.fleet.check_alive()
            self.ca.check_alive()
            self._note_alert_changes()
            if predicate():
                self.note(what)
                return time.monotonic()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{what}: not after {timeout:.0f}s; phases {self.phases()}, "
                    f"alerts {self.alerts()}, log {self.log}\n"
                    f"cluster-autoscaler:\n{self.ca.proc.log_tail(20)}"
                )
            time.sleep(every)


@pytest.fixture
def story(tmp_path):
    workdir = tempfile.mkdtemp(prefix="ca-story-", dir="/tmp")
    fleet = ca = exporter = prom = None
    try:
        fleet = Fleet(workdir, FleetSize(nodes=0, gpu_nodes=0, pods=0, gpu_pods=0)).start()
        for ns in (BALLOON_NS, WORKLOAD_NS):
            fleet.admin.create("/api/v1/namespaces", {"metadata": {"name": ns}})
        # The overprovisioning charts' default: below every ordinary pod, above the
        # autoscaler's expendable cutoff (-10), so preempted balloons still scale it up.
        fleet.admin.create(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {"metadata": {"name": "overprovisioning"}, "value": -1, "globalDefault": False},
        )
        ca = ClusterAutoscaler(fleet, [CPU_GROUP, GPU_GROUP]).start()
        exporter = start_exporter(
            [
                "--mode",
                "cluster",
                "--balloon.selector",
                "=".join(SELECTOR),
                "--kube.kubeconfig",
                fleet.kubeconfig,
            ],
            tmp_path,
        )
        target = exporter.url.removeprefix("http://")
        prom = PrometheusServer(
            tmp_path,
            {
                "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
                "rule_files": rule_files(tmp_path, KNOBS, lambda name: "balloon" in name),
                "scrape_configs": [
                    {
                        "job_name": CLUSTER_JOB,
                        "static_configs": [{"targets": [target], "labels": {"cluster": "story"}}],
                    }
                ],
            },
            binary=prometheus_binary(prometheus.NEWEST, "prometheus"),
        ).start()
        yield Story(fleet, ca, exporter, prom)
    finally:
        for part in (prom, ca):
            if part is not None:
                part.stop()
        if exporter is not None:
            exporter.proc.stop()
        if fleet is not None:
            fleet.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def apply(story, manifest):
    apply_deployment(story.fleet.admin, manifest)


def test_balloons_preempted_autoscaler_adds_nodes_then_groups_at_max(story):
    cpu_balloons = balloons("cpu", 2, FILL_CPU)
    gpu_balloons = balloons("gpu", 1, FILL_GPU)

    # 1. Balloons on an empty cluster: the autoscaler adds a node for each (2 CPU, 1 GPU).
    apply(story, cpu_balloons)
    apply(story, gpu_balloons)
    story.wait("balloons Running on new nodes", lambda: story.phases()["Running"] == 3)
    assert (story.ca.group_size("cpu"), story.ca.group_size("gpu")) == (2, 1)
    got = story.scrape()
    assert got[("kubescale_balloon_nodes",)] == 3
    assert got[("kubescale_balloon_reserved", ("resource", "cpu"), ("unit", "core"))] == 2 * 31 + 8
    assert (
        got[("kubescale_balloon_reserved", ("resource", "nvidia_com_gpu"), ("unit", "integer"))]
        == 8
    )
    assert got[("kubescale_balloon_preemptions_total",)] == 0
    assert got[("kubescale_balloon_misconfigured", ("reason", "priority_not_negative"))] == 0
    # Until the first nodes came, no balloon ran: HeadroomExhausted clears once none is
    # Pending, and step 2's preemption must come after the balloons have stayed Running
    # for the alert's whole window (else a Pending replacement re-arms it).
    story.wait("no balloon alert once headroom stood a window", lambda: story.alerts() == {}, 90)
    stood = (
        'min_over_time(cluster_phase:kubescale_balloon_pods:max{phase="Running"}'
        f"[{KNOBS['balloonExhaustedFor']}]) > 0"
    )
    story.wait("Running balloons through the alert's window", lambda: story.prom.query(stood), 90)

    # 2. A real workload (default priority 0) needs both CPU nodes: the scheduler preempts
    # both CPU balloons, their replacements go Pending, the autoscaler adds two nodes
    # (the CPU group to its max of 4) and the balloons run again.
    workload = deployment("app", WORKLOAD_NS, 2, FILL_CPU, labels={"app": "app"}, gpu=False)
    apply(story, workload)
    # Scraped every 0.2 s: the replacements' Pending lasts only until the nodes come.
    story.scrapes.clear()
    preempted = story.wait(
        "CPU balloons preempted", lambda: story.seen()["preemptions"] == 2, 60, every=0.2
    )
    back = story.wait(
        "balloons Running again",
        lambda: [story.seen()[p] for p in ("Pending", "Running")] == [0, 3],
        every=0.2,
    )
    # On the way: replacements Pending and only what still runs held: the GPU balloon's 8
    # CPUs while both CPU balloons are gone, 8 + 31 if the autoscaler's loop (every 2 s)
    # came between the two preemptions and the first replacement ran before the second
    # balloon was evicted.
    assert max(seen["Pending"] for seen in story.scrapes) in (1, 2), story.scrapes
    assert min(seen["cpu"] for seen in story.scrapes) in (8, 8 + 31), story.scrapes
    assert story.ca.group_size("cpu") == CPU_GROUP.max_size
    assert story.series("kubescale_balloon_reserved", resource="cpu", unit="core") == 2 * 31 + 8
    assert story.series("kubescale_balloon_pending_oldest_seconds") == 0
    story.note(f"autoscaler brought headroom back {back - preempted:.0f}s after the preemption")
    # The GPU balloon kept running throughout: some headroom never went away, so neither
    # alert fires (PendingTooLong needed 30 s Pending plus 10 s).
    assert "KubeScaleBalloonHeadroomExhausted" not in story.alerts()

    # 3. Both groups at their max: the workload grows by two CPU nodes' worth and a GPU
    # job takes the GPU node. Every balloon is preempted and stays Pending: no node can
    # be added. Both alerts fire, within their windows of the preemption.
    apply(story, {**workload, "spec": {**workload["spec"], "replicas": 4}})
    gpu_job = deployment("train", WORKLOAD_NS, 1, FILL_GPU, labels={"app": "train"}, gpu=True)
    apply(story, gpu_job)
    exhausted = story.wait(
        "every balloon Pending, groups at max",
        lambda: story.phases() == {"Pending": 3, "Running": 0},
        60,
    )
    assert story.series("kubescale_balloon_preemptions_total") == 5
    assert story.series("kubescale_balloon_nodes") == 0
    assert (
        story.scrape().get(("kubescale_balloon_reserved", ("resource", "cpu"), ("unit", "core")), 0)
        == 0
    )
    fired = story.wait(
        "both alerts firing",
        lambda: (
            story.alerts()
            == {
                "KubeScaleBalloonHeadroomExhausted": "firing",
                "KubeScaleBalloonPendingTooLong": "firing",
            }
        ),
        STEP_TIMEOUT,
    )
    # 30 s of window then 30 s of `for`; 30 s Pending then 10 s of `for`: both within ~a
    # minute and a half of the preemption (scrape and evaluation every 2 s).
    assert fired - exhausted < 90, story.log
    assert (story.ca.group_size("cpu"), story.ca.group_size("gpu")) == (4, 1)
    # The autoscaler says why on the balloons themselves: no group may grow.
    story.wait(
        "NotTriggerScaleUp events on the balloons",
        lambda: any(
            "max node group size reached" in e.get("message", "")
            for e in story.fleet.admin.get(
                f"/api/v1/namespaces/{BALLOON_NS}/events", fieldSelector="reason=NotTriggerScaleUp"
            )["items"]
        ),
        60,
    )
    print(json.dumps(story.log))
