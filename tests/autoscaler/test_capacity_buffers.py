"""CapacityBuffers with the real cluster-autoscaler (kwok provider) on the real control plane:
the warm headroom the balloon story keeps, held the 2026 way. The autoscaler injects virtual
pods for each buffer; no pod, preemption or PriorityClass exists. Each test starts its own
cluster (testbed/fleet.py), installs the CapacityBuffer CRD of the autoscaler's own release
and runs the autoscaler with its buffer controller and pod injection on.

- the story: buffers provision nodes in the CPU and the GPU group; a burst of real pods
  takes the headroom at once and the autoscaler brings it back; with the CPU group at its
  max the buffer stays unprovisioned (NotTriggerScaleUp) until the max is raised;
- both API versions: a v1alpha1 and a v1beta1 buffer, each read through the other version,
  both provisioned; then one's PodTemplate is deleted, and one is cut by a ResourceQuota.
"""

import json
import shutil
import tempfile
import time

import pytest

from testbed.autoscaler import (
    BUFFER_VERSIONS,
    ClusterAutoscaler,
    NodeGroup,
    install_capacity_buffer_crd,
)
from testbed.builds import cluster_autoscaler_version
from testbed.fleet import CPU_NODE, GPU_RESOURCE, Fleet, FleetSize
from tests.autoscaler.support import Buffers, apply_deployment, deployment, wait_for

pytestmark = pytest.mark.integration

BUFFER_NS = "buffers"
WORKLOAD_NS = "workload"
CPU_GROUP = NodeGroup("cpu", max_size=4)
GPU_GROUP = NodeGroup("gpu", max_size=1, gpu=True)
# One replica fills a node of its group (the template also carries a kube-proxy the
# autoscaler adds to its simulation; 1 CPU and 8 GiB are left for it and daemons).
FILL_CPU = {"cpu": str(int(CPU_NODE["cpu"]) - 1), "memory": "120Gi"}
FILL_GPU = {"cpu": "8", "memory": "64Gi", GPU_RESOURCE: "8"}
# A kwok scale-up here: the autoscaler's loop (2 s), the Node created, kwok marks it Ready;
# under a loaded 2-core machine about 10-40 s. A minute and a half before a step fails.
STEP_TIMEOUT = 90.0


class Cluster:
    def __init__(self, fleet, ca):
        self.fleet, self.ca = fleet, ca
        self.admin = fleet.admin
        self.buffers = Buffers(fleet.admin, BUFFER_NS)
        self.t0 = time.monotonic()
        self.log = []  # (seconds since start, what)

    def note(self, what, at=None):
        self.log.append((round((at or time.monotonic()) - self.t0, 1), what))

    def wait(self, what, predicate, timeout=STEP_TIMEOUT, every=1.0):
        try:
            at = wait_for(
                what, predicate, timeout, every, check=(self.fleet.check_alive, self.ca.check_alive)
            )
        except TimeoutError as e:
            raise TimeoutError(
                f"{e}; log {self.log}\ncluster-autoscaler:\n{self.ca.proc.log_tail(25)}"
            ) from None
        self.note(what, at)
        return at

    def ready_nodes(self, group):
        nodes = self.admin.get("/api/v1/nodes", labelSelector=f"kse.test/node-group={group}")
        return sum(
            1
            for n in nodes["items"]
            for c in n.get("status", {}).get("conditions", [])
            if c["type"] == "Ready" and c["status"] == "True"
        )

    def running(self, ns, label):
        pods = self.admin.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=label)["items"]
        return sum(1 for p in pods if p.get("status", {}).get("phase") == "Running")


@pytest.fixture
def cluster():
    workdir = tempfile.mkdtemp(prefix="ca-buffers-", dir="/tmp")
    fleet = ca = None
    try:
        fleet = Fleet(workdir, FleetSize(nodes=0, gpu_nodes=0, pods=0, gpu_pods=0)).start()
        served = install_capacity_buffer_crd(fleet.admin)
        assert served == list(BUFFER_VERSIONS)
        for ns in (BUFFER_NS, WORKLOAD_NS):
            fleet.admin.create("/api/v1/namespaces", {"metadata": {"name": ns}})
        ca = ClusterAutoscaler(fleet, [CPU_GROUP, GPU_GROUP], buffers=True).start()
        assert ca.version == cluster_autoscaler_version()
        print(f"cluster-autoscaler {ca.version} (kwok provider), CapacityBuffer {served}")
        yield Cluster(fleet, ca)
    finally:
        if ca is not None:
            ca.stop()
        if fleet is not None:
            fleet.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_buffers_provision_burst_takes_headroom_group_at_max(cluster):
    b = cluster.buffers
    b.create_template("cpu-chunk", FILL_CPU)
    b.create_template("gpu-chunk", FILL_GPU, gpu=True)

    # 1. Two buffers on an empty cluster: the autoscaler adds a node per replica in each group.
    created = b.create("cpu", "cpu-chunk", 2)
    b.create("gpu", "gpu-chunk", 1)
    cluster.wait(
        "both buffers ReadyForProvisioning, fake pods injected",
        lambda: b.provisioning("cpu") and b.provisioning("gpu"),
    )
    assert b.get("cpu")["status"]["replicas"] == 2
    assert b.get("gpu")["status"]["replicas"] == 1
    # The autoscaler resolves the template into one it manages (server-side dry run).
    assert b.get("cpu")["status"]["podTemplateRef"]["name"] != "cpu-chunk"
    up = cluster.wait(
        "2 CPU and 1 GPU node Ready for the buffers",
        lambda: (cluster.ready_nodes("cpu"), cluster.ready_nodes("gpu")) == (2, 1),
    )
    cluster.note(f"buffers provisioned {up - created:.0f}s after they were created")
    for name, group in (("cpu", "cpu 0->2"), ("gpu", "gpu 0->1")):
        cluster.wait(f"TriggeredScaleUp on {name}", lambda n=name: b.events(n, "TriggeredScaleUp"))
        message = b.events(name, "TriggeredScaleUp")[0]["message"]
        assert message.startswith("capacity buffer "), message
        assert group in message, message
    assert not b.events("cpu", "NotTriggerScaleUp")
    # Nothing but the Nodes: no pod holds the headroom.
    assert not cluster.admin.get(f"/api/v1/namespaces/{BUFFER_NS}/pods")["items"]

    # 2. A burst of real pods (priority 0, no preemption: nothing to preempt) takes both CPU
    # nodes at once; the buffer's virtual pods no longer fit, and the autoscaler adds two
    # nodes: the headroom is back, the CPU group at its max of 4.
    burst = deployment("app", WORKLOAD_NS, 2, FILL_CPU, labels={"app": "app"}, gpu=False)
    started = time.monotonic()
    apply_deployment(cluster.admin, burst)
    placed = cluster.wait(
        "the burst Running on the buffer's nodes",
        lambda: cluster.running(WORKLOAD_NS, "app=app") == 2,
        every=0.2,
    )
    assert cluster.ready_nodes("cpu") == 2, "the burst waited for a node"
    back = cluster.wait(
        "headroom back: 4 CPU nodes Ready", lambda: cluster.ready_nodes("cpu") == 4, every=0.5
    )
    cluster.note(
        f"burst Running {placed - started:.1f}s after it was created, headroom back "
        f"{back - placed:.0f}s later"
    )
    assert cluster.ca.logged("Final scale-up plan: [{cpu 2->4 (max: 4)}]")
    # The autoscaler posts one event per reason per buffer in 5 minutes (its recorder's spam
    # filter, unless --record-duplicated-events): this scale-up left no second event.
    (event,) = b.events("cpu", "TriggeredScaleUp")
    assert event.get("count", 1) == 1 and "cpu 0->2" in event["message"], event

    # 3. The burst grows by two nodes' worth and takes them: the CPU group is at its max,
    # the buffer cannot be provisioned and the autoscaler says so on it.
    apply_deployment(cluster.admin, {**burst, "spec": {**burst["spec"], "replicas": 4}})
    cluster.wait("the grown burst Running", lambda: cluster.running(WORKLOAD_NS, "app=app") == 4)
    cluster.wait("NotTriggerScaleUp on cpu", lambda: b.events("cpu", "NotTriggerScaleUp"))
    message = b.events("cpu", "NotTriggerScaleUp")[0]["message"]
    assert message.startswith("capacity buffer 2 fake pods didn't trigger scale-up"), message
    assert "max node group size reached" in message, message
    # The buffer itself still reads ready: only the events tell it is not provisioned.
    assert b.provisioning("cpu")
    assert cluster.ready_nodes("cpu") == CPU_GROUP.max_size

    # 4. The group's max raised to 6: the autoscaler adds the two nodes the buffer asks for.
    # The kwok provider reads its groups at start, so the autoscaler starts again (a real
    # provider re-reads them); the new process's event filter starts empty, so it posts a
    # TriggeredScaleUp at once, where a long-running one might hold it back up to 5 minutes.
    raised = time.monotonic()
    cluster.ca.restart([NodeGroup("cpu", max_size=6)])
    cluster.wait("headroom back after the max was raised", lambda: cluster.ready_nodes("cpu") == 6)
    assert cluster.ca.logged("Final scale-up plan: [{cpu 4->6 (max: 6)}]")
    cluster.wait(
        "TriggeredScaleUp cpu 4->6",
        lambda: any("cpu 4->6" in e["message"] for e in b.events("cpu", "TriggeredScaleUp")),
    )
    cluster.note(f"max raised: headroom back in {time.monotonic() - raised:.0f}s")
    print(json.dumps(cluster.log))


def test_buffers_both_api_versions_template_deleted_quota(cluster):
    b = cluster.buffers
    b.create_template("alpha-chunk", FILL_CPU)
    b.create_template("beta-chunk", FILL_CPU)

    # A buffer made through each version; the API server stores v1beta1 and serves both.
    b.create("alpha", "alpha-chunk", 1, version="v1alpha1")
    b.create("beta", "beta-chunk", 1, version="v1beta1")
    for name in ("alpha", "beta"):
        for version in BUFFER_VERSIONS:
            got = b.get(name, version)
            assert got["apiVersion"] == f"autoscaling.x-k8s.io/{version}"
            assert got["spec"]["replicas"] == 1
            assert got["spec"]["provisioningStrategy"] == "buffer.x-k8s.io/active-capacity"
    cluster.wait(
        "both buffers provisioning", lambda: b.provisioning("alpha") and b.provisioning("beta")
    )
    cluster.wait("a node for each", lambda: cluster.ready_nodes("cpu") == 2)
    for name in ("alpha", "beta"):
        cluster.wait(f"TriggeredScaleUp on {name}", lambda n=name: b.events(n, "TriggeredScaleUp"))
    # The v1alpha1 object's status as the autoscaler (a v1beta1 client) wrote it.
    assert b.get("alpha", "v1alpha1")["status"]["replicas"] == 1

    # The PodTemplate of one is deleted: that buffer is no longer ready, its fake pods go.
    cluster.admin.delete(f"/api/v1/namespaces/{BUFFER_NS}/podtemplates/alpha-chunk")
    cluster.wait(
        "alpha not ready for provisioning",
        lambda: (b.condition("alpha", "ReadyForProvisioning") or ("",))[0] == "False",
    )
    status, reason, message = b.condition("alpha", "ReadyForProvisioning")
    assert reason == "error", (reason, message)
    assert "alpha-chunk" in message and "not found" in message, message
    cluster.wait(
        "alpha not provisioning",
        lambda: (
            (b.condition("alpha", "Provisioning") or ("", ""))[:2]
            == ("False", "NotReadyForProvisioning")
        ),
    )
    assert "replicas" not in b.get("alpha")["status"]
    assert b.provisioning("beta")

    # A ResourceQuota below two replicas' requests: the autoscaler cuts the buffer to one.
    cluster.admin.create(
        "/api/v1/namespaces/{}/resourcequotas".format(BUFFER_NS),
        {
            "metadata": {"name": "cpu"},
            "spec": {"hard": {"requests.cpu": str(int(FILL_CPU["cpu"]) * 3 // 2)}},
        },
    )
    cluster.admin.merge_patch(
        f"/apis/autoscaling.x-k8s.io/v1beta1/namespaces/{BUFFER_NS}/capacitybuffers/beta",
        {"spec": {"replicas": 2}},
    )
    cluster.wait(
        "beta LimitedByQuotas",
        lambda: (b.condition("beta", "LimitedByQuotas") or ("",))[0] == "True",
    )
    status, reason, message = b.condition("beta", "LimitedByQuotas")
    assert reason == "ResourceQuotasAllocated", (reason, message)
    assert "limited from 2 to 1" in message, message
    assert b.get("beta")["status"]["replicas"] == 1
    print(json.dumps(cluster.log))
