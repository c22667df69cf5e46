"""A small kwok fleet on the real 1.37 control plane (testbed/fleet.py): the same parts as
bench/fleet.py's 7,500 nodes, at a size CI runs in a couple of minutes.

The real scheduler binds the Deployments' pods, kwok plays Nodes (with Leases) and pods
(Pending -> Running, with a `Started` event), events go to their own etcd, and the node-mode
exporter watches one kwok Node's pods through the API server.
"""

import datetime
import shutil
import tempfile
import time

import pytest
import requests

from testbed.containerd_server import ContainerdServer
from testbed.exporter import start_exporter
from testbed.fleet import (
    GPU_NODE,
    GPU_RESOURCE,
    HOLD_ANNOTATION,
    KWOK_LABEL,
    NAMESPACE,
    POOL_LABEL,
    Fleet,
    FleetSize,
    etcd_keys,
    fleet,
)
from testbed.kube_apiserver import pod_manifest
from testbed.metrics import parse_exposition, sample, wait_until

# One worker runs them all: the module's fleet (20 s) is made once per worker that needs it.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("fleet")]

SIZE = FleetSize(nodes=200, gpu_nodes=20, pods=1000, gpu_pods=40, lease_seconds=20)


@pytest.fixture(scope="module")
def small_fleet():
    workdir = tempfile.mkdtemp(prefix="fleet-", dir="/tmp")
    try:
        with fleet(workdir, SIZE) as f:
            yield f
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _time(stamp):
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_nodes_are_ready_and_renew_their_leases(small_fleet):
    f = small_fleet
    nodes = f.admin.get("/api/v1/nodes", labelSelector="=".join(KWOK_LABEL))["items"]
    assert len(nodes) == SIZE.nodes
    assert f.ready_nodes() == SIZE.nodes
    # No node-lifecycle taint: the controller-manager sees the Leases as fresh.
    assert not [
        n["metadata"]["name"]
        for n in nodes
        for t in n["spec"].get("taints", [])
        if t["key"].startswith("node.kubernetes.io/")
    ]
    sampled = [f.nodes[0], f.nodes[-1], f.gpu_nodes[0]]
    before = {n: _time(f.lease(n)["spec"]["renewTime"]) for n in sampled}
    # kwok renews every lease_seconds/4 (5 s here), with a little jitter; what counts is a
    # renewal before the lease runs out, however loaded the machine.
    assert wait_until(
        lambda: all(_time(f.lease(n)["spec"]["renewTime"]) > before[n] for n in sampled),
        timeout=SIZE.lease_seconds,
        interval=1.0,
    ), before
    assert all(f.lease(n)["spec"]["leaseDurationSeconds"] == SIZE.lease_seconds for n in sampled)


def test_pods_run_on_kwok_nodes_as_the_scheduler_placed_them(small_fleet):
    f = small_fleet
    pods = f.admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    assert len(pods) == SIZE.pods + SIZE.gpu_pods
    assert {p["status"]["phase"] for p in pods} == {"Running"}
    cpu, gpu = set(f.nodes), set(f.gpu_nodes)
    gpu_pods = [p for p in pods if p["metadata"]["labels"]["app"].startswith("gpu-")]
    assert len(gpu_pods) == SIZE.gpu_pods
    assert all(p["spec"]["nodeName"] in gpu for p in gpu_pods)
    # The GPU taint keeps every other pod off the GPU pool.
    assert all(p["spec"]["nodeName"] in cpu for p in pods if p not in gpu_pods)
    # kwok gave each a pod IP from its Node's podCIDR.
    node = f.admin.get(f"/api/v1/nodes/{pods[0]['spec']['nodeName']}")
    assert pods[0]["status"]["podIP"].rsplit(".", 1)[0] == node["spec"]["podCIDR"].rsplit(".", 1)[0]
    # The real scheduler bound them: one Scheduled event per pod, from it. It posts them
    # from a queue after binding, so the last ones may come after the pods run.
    names = {p["metadata"]["name"] for p in pods}

    def scheduled():
        return f.admin.get(
            f"/api/v1/namespaces/{NAMESPACE}/events", fieldSelector="reason=Scheduled"
        )["items"]

    assert wait_until(
        lambda: {e["involvedObject"]["name"] for e in scheduled()} == names, 60, interval=1.0
    )
    assert {e.get("reportingComponent") or e["source"]["component"] for e in scheduled()} == {
        "default-scheduler"
    }


def test_gpu_pool_shows_its_allocatable_and_taint(small_fleet):
    f = small_fleet
    gpu_nodes = f.admin.get("/api/v1/nodes", labelSelector=f"{POOL_LABEL}=gpu")["items"]
    assert len(gpu_nodes) == SIZE.gpu_nodes
    for node in gpu_nodes:
        assert node["status"]["allocatable"][GPU_RESOURCE] == GPU_NODE[GPU_RESOURCE]
        assert {t["key"] for t in node["spec"]["taints"]} == {GPU_RESOURCE}
    cpu_node = f.admin.get(f"/api/v1/nodes/{f.nodes[0]}")
    assert GPU_RESOURCE not in cpu_node["status"]["allocatable"]
    assert cpu_node["status"]["allocatable"]["cpu"] == "32"


def test_events_live_in_the_events_etcd_only(small_fleet):
    f = small_fleet
    listed = f.admin.get(f"/api/v1/namespaces/{NAMESPACE}/events")
    events = listed["items"]
    started = [e for e in events if e["reason"] == "Started"]
    # kwok's pod stage writes a `Started` event per pod, through client-go's event
    # broadcaster, which drops what does not fit its 1,000-event queue while pods start
    # faster than it posts: some, not necessarily all.
    assert started
    assert {e["source"]["component"] for e in started} == {"kwok_controller"}
    assert {e["involvedObject"]["kind"] for e in started} == {"Pod"}
    # Every event of the namespace is a key in the events etcd; the main one has none.
    # kwok may still be posting: the keys are counted at the list's own revision.
    at_list = int(listed["metadata"]["resourceVersion"])
    assert etcd_keys(f.events_etcd, f"/registry/events/{NAMESPACE}/", at_list) == len(events)
    assert etcd_keys(f.main_etcd, "/registry/events/") == 0
    # ... while the objects themselves are in the main one.
    assert etcd_keys(f.main_etcd, "/registry/pods/") == SIZE.pods + SIZE.gpu_pods
    assert etcd_keys(f.events_etcd, "/registry/pods/") == 0


def test_node_mode_exporter_watches_one_kwok_nodes_pods(small_fleet, tmp_path):
    """The imagepull collector's spec.nodeName watch through the fleet's API server: a pod
    on its node waiting for an image is queued; the Running pods kwok plays are not."""
    f = small_fleet
    node = f.nodes[7]
    containerd_dir = tempfile.mkdtemp(prefix="cd-", dir="/tmp")
    containerd = ContainerdServer(containerd_dir).start()
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
    flags = [
        "--collector.disable-defaults",
        "--collector.imagepull",
        "--containerd.address",
        containerd.address,
        "--kubelet.config-file",
        str(kubelet),
        "--kube.kubeconfig",
        f.kubeconfig,
        "--kube.node-name",
        node,
    ]
    exporter = start_exporter(flags, tmp_path)
    try:

        def scrape():
            return parse_exposition(requests.get(exporter.url + "/metrics", timeout=10).text)

        def until(name, want, timeout=30.0, **labels):
            deadline = time.monotonic() + timeout
            while True:
                try:
                    got = sample(scrape(), name, **labels)
                except KeyError:
                    got = None
                if got == want or time.monotonic() > deadline:
                    return got
                time.sleep(0.5)

        assert until("kubescale_kube_watch_up", 1, resource="pods") == 1
        assert until("kubescale_image_pulls_queued", 0) == 0
        # A pod bound to this node whose container waits for an image nobody has.
        body = pod_manifest("waits-for-image", node=node)
        body["metadata"]["annotations"] = {HOLD_ANNOTATION: "true"}
        body["spec"]["containers"][0]["image"] = "registry.invalid/absent:v1"
        base = f"/api/v1/namespaces/{NAMESPACE}/pods"
        f.admin.create(base, body)
        waiting = {"reason": "ContainerCreating"}
        f.admin.merge_patch(
            f"{base}/waits-for-image/status",
            {
                "status": {
                    "phase": "Pending",
                    "containerStatuses": [
                        {
                            "name": "pause",
                            "image": "registry.invalid/absent:v1",
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {"waiting": waiting},
                        }
                    ],
                }
            },
        )
        assert until("kubescale_image_pulls_queued", 1) == 1
        # The same on another node is not this exporter's.
        other = pod_manifest("elsewhere", node=f.nodes[8])
        other["metadata"]["annotations"] = {HOLD_ANNOTATION: "true"}
        f.admin.create(base, other)
        f.admin.delete(f"{base}/waits-for-image")
        assert until("kubescale_image_pulls_queued", 0) == 0
        f.admin.delete(f"{base}/elsewhere")
    finally:
        exporter.proc.stop()
        containerd.wipe()
        shutil.rmtree(containerd_dir, ignore_errors=True)


def test_pods_bound_directly_keep_the_status_written_with_them(small_fleet):
    """create_bound_pods beside kwok (how bench/fleet.py --bind direct grows a fleet past
    what the scheduler binds): balloons, GPU pods and pause pods, each Running with the
    status written at creation; kwok, told to hold them, neither replays nor reports them."""
    f = small_fleet
    made = f.create_bound_pods(1, gpu_pods=4, balloons=2)
    assert made == len(f.nodes) + 4 + 2
    pods = f.admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector="!pod-template-hash")
    pods = pods["items"]
    assert len(pods) == made
    assert {p["status"]["phase"] for p in pods} == {"Running"}
    assert all(HOLD_ANNOTATION in p["metadata"]["annotations"] for p in pods)
    balloons = [p for p in pods if p["metadata"]["labels"].get("run") == "overprovisioning"]
    assert len(balloons) == 2
    assert {p["spec"]["priority"] for p in balloons} == {-1}
    gpu = [p for p in pods if p["metadata"]["labels"].get("app") == "bound-gpu"]
    assert len(gpu) == 4
    assert {p["spec"]["nodeName"] for p in gpu} <= set(f.gpu_nodes)
    # The status is the one written with the pod: kwok did not play it again.
    time.sleep(5)
    again = f.admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{pods[0]['metadata']['name']}")
    assert again["metadata"]["resourceVersion"] == pods[0]["metadata"]["resourceVersion"]
    started = f.admin.get(f"/api/v1/namespaces/{NAMESPACE}/events", fieldSelector="reason=Started")[
        "items"
    ]
    assert not {e["involvedObject"]["name"] for e in started} & {
        p["metadata"]["name"] for p in pods
    }


def test_a_fleet_without_players_holds_bound_running_pods_and_no_leases():
    """Fleet(players=False): the API server alone, Nodes as plain objects, pods bound by
    spec.nodeName at creation with a kubelet's Running status; what node mode's
    spec.nodeName watch reads is there, and nothing renews a Lease or marks a Node."""
    from kube_scale_exporter import kube  # noqa: PLC0415

    size = FleetSize(nodes=30, gpu_nodes=0, pods=0, gpu_pods=0)
    workdir = tempfile.mkdtemp(prefix="fleet-objects-", dir="/tmp")
    f = Fleet(workdir, size, players=False)
    try:
        f.start()
        assert set(f.procs()) == {"etcd-main", "etcd-events", "kube-apiserver"}
        f.create_nodes()
        assert f.create_bound_pods(per_node=2) == 60
        pods = f.admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        assert len(pods) == 60
        assert {p["status"]["phase"] for p in pods} == {"Running"}
        by_node = {}
        for p in pods:
            by_node.setdefault(p["spec"]["nodeName"], []).append(p)
        assert sorted(by_node) == sorted(f.nodes)
        assert {len(v) for v in by_node.values()} == {2}
        # Each pod's address is in its Node's podCIDR, its hostIP the Node's own.
        nodes = {n["metadata"]["name"]: n for n in f.admin.get("/api/v1/nodes")["items"]}
        for p in pods:
            node = nodes[p["spec"]["nodeName"]]
            assert (
                p["status"]["podIP"].rsplit(".", 1)[0] == node["spec"]["podCIDR"].rsplit(".", 1)[0]
            )
            assert p["status"]["hostIP"] == node["status"]["addresses"][0]["address"]
        leases = f.admin.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")
        assert leases["items"] == []
        # The only taint is the one the TaintNodesByCondition admission puts on a new Node
        # (NoSchedule: no eviction), never the node-lifecycle controller's unreachable one.
        taints = {(t["key"], t["effect"]) for n in nodes.values() for t in n["spec"]["taints"]}
        assert taints == {("node.kubernetes.io/not-ready", "NoSchedule")}

        client = kube.KubeClient(kube.load(f.kubeconfig))
        informer = kube.for_node(client, kube.PODS, f.nodes[7]).start()
        try:
            assert informer.wait_synced(30)
            assert sorted(p["metadata"]["name"] for p in informer.items()) == [
                f"{f.nodes[7]}-0",
                f"{f.nodes[7]}-1",
            ]
        finally:
            informer.stop()
            client.close()
    finally:
        f.stop()
        shutil.rmtree(workdir, ignore_errors=True)
