"""A kwok fleet on the real 1.37 control plane: thousands of Nodes' worth of API objects.

    with fleet(tmp, FleetSize(nodes=300, gpu_nodes=30, pods=3000)) as f:
        f.admin.get("/api/v1/nodes")                  # admin requests (testbed Api)
        f.kubeconfig                                  # admin kubeconfig for the code under test
        f.nodes, f.gpu_nodes                          # the Node names, CPU group then GPU group
        f.main_etcd, f.events_etcd                    # EtcdServer: /events lives on the second
        f.procs()                                     # {"kube-apiserver": Proc, ...} for RSS/CPU
        f.scale_pods(n)                               # grow or shrink the workload to n pods
    # or, step by step (a bench times each step):
    f = Fleet(tmp, size).start()    # etcds, API server, scheduler, controller-manager, kwok
    f.create_nodes(); f.wait_nodes_ready()
    f.create_workload(); f.wait_pods_running()
    f.stop()                        # every process, by PID
    # or API objects alone (no scheduler, controller-manager or kwok; see `players`):
    f = Fleet(tmp, size, players=False).start()
    f.create_nodes(); f.create_bound_pods(per_node=1)
    # or kwok's Nodes with pods bound directly, where the scheduler is the bottleneck:
    f = Fleet(tmp, size).start(); f.create_nodes(); f.wait_nodes_ready()
    f.create_bound_pods(per_node=20, gpu_pods=750, balloons=300, until=deadline)

The parts, all on loopback, on free ports:
- a main etcd 3.7 and an events etcd 3.7: the API server keeps /events on the second
  (--etcd-servers-overrides), as large clusters split them;
- kube-apiserver (testbed/kube_apiserver.py), kube-scheduler and kube-controller-manager
  (their argv from testbed/control_plane.py) with client QPS raised so that the fleet's
  size, not a client rate limiter, sets the pace;
- kwok (.ci/setup.d/47-kwok.sh) managing the Nodes labelled `type=kwok`: a Lease per node
  renewed every lease_seconds/4 (as the kubelet does; the controller-manager's node
  grace periods keep the kubelet's proportions to it, see `node_grace_args`), status from
  our Stages (STAGES):
  a Node gets Ready conditions and keeps the allocatable it was created with; a Pod that
  the real scheduler bound goes Pending -> Running with a `Started` event; a deleted Pod
  goes away (there is no kubelet to finish the graceful deletion). Pods annotated
  HOLD_ANNOTATION are left alone.

The Nodes are made here, as a kubelet would register them: a CPU pool (`POOL_LABEL`=cpu;
32 CPUs, 128 GiB, 110 pods) and a GPU pool (`POOL_LABEL`=gpu; 8 `nvidia.com/gpu` each,
tainted `nvidia.com/gpu=present:NoSchedule`), zones, instance types and a podCIDR each.
The pods come from Deployments (the ReplicaSet controller creates them and the scheduler
binds them): `pods` pause pods spread over the CPU pool, and `gpu_pods` that tolerate the
GPU taint and request one GPU each. Deployment status is how readiness is counted: reading
150,000 pods back would cost more than making them.

With `players=False` only the etcds and the API server run: the Nodes are plain API
objects (nothing renews a Lease, nothing marks them Unknown or taints them), and
`create_bound_pods` writes pods already bound by spec.nodeName with a Running status, as a
kubelet would have reported it. This is for what reads the API server (watches, lists),
at sizes where kwok's Lease renewals (nodes / (lease_seconds/4) writes a second) would
not keep up on a small machine. With the players running, `create_bound_pods` is how a
fleet gets more pods than the scheduler binds in the time there is (at 2,500 Nodes it
bound 6 a second on these two cores): the pods carry HOLD_ANNOTATION, so kwok leaves the
status written with them alone.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import math
import pathlib
import threading
import time

import yaml

from .builds import kube_binary, kwok_binary
from .control_plane import controller_manager_argv, scheduler_argv
from .etcd_server import CONTROL_PLANE_VERSION, EtcdServer, prefix_range
from .kube_apiserver import Api, KubeApiServer
from .procs import Proc

KWOK_LABEL = ("type", "kwok")
POOL_LABEL = "kse.test/node-pool"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
NAMESPACE = "fleet"
# A pod with this annotation is left as it was made: a test writes its status itself (a
# container waiting for its image, say), as a kubelet would.
HOLD_ANNOTATION = "kse.test/kwok-hold"
ZONES = ("zone-a", "zone-b", "zone-c")
# What each pool's Node reports, as a kubelet on such a machine would.
CPU_NODE = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "500Gi"}
GPU_NODE = {
    "cpu": "96",
    "memory": "1024Gi",
    "pods": "110",
    "ephemeral-storage": "2000Gi",
    GPU_RESOURCE: "8",
}
POD_REQUESTS = {"cpu": "100m", "memory": "128Mi"}
BALLOON_LABELS = {"run": "overprovisioning"}
BALLOON_REQUESTS = {"cpu": "4", "memory": "8Gi"}
BALLOON_PRIORITY_CLASS = "overprovisioning"
# The main etcd's quota as large clusters set it (etcd's default, 2 GiB, is what 150,000
# pods and their revisions between two compactions come near).
MAIN_ETCD_QUOTA = 8 * 2**30
# Concurrent writers when the fleet makes its own objects (Nodes, Deployments).
WRITERS = 16

# The Stages kwok plays (its Stage API, kwok.x-k8s.io/v1alpha1; the functions in the
# templates are kwok's: Now, Quote, YAML, NodeConditions, NodeIPWith, PodIPWith).
NODE_READY = """
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
nodeInfo:
  architecture: amd64
  containerRuntimeVersion: kwok
  kernelVersion: kwok
  kubeletVersion: kwok
  kubeProxyVersion: kwok
  operatingSystem: linux
phase: Running
"""
NODE_HEARTBEAT = """
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $.metadata.creationTimestamp | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""
POD_RUNNING = """
{{ $now := Now }}
conditions:
- {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  started: true
  restartCount: 0
  state: {running: {startedAt: {{ $now | Quote }}}}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""
# Node status the kubelet refreshes about every 5 minutes when nothing changes (the
# Lease carries the heartbeat); spread so 7,500 Nodes do not write at once.
NODE_STATUS_EVERY_MS = 300_000


def _stage(name, kind, selector, next_, delay_ms=None, jitter_ms=None):
    spec = {"resourceRef": {"apiGroup": "v1", "kind": kind}, "selector": selector, "next": next_}
    if delay_ms is not None:
        spec["delay"] = {"durationMilliseconds": delay_ms, "jitterDurationMilliseconds": jitter_ms}
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": spec,
    }


def _expr(key, operator, *values):
    found = {"key": key, "operator": operator}
    if values:
        found["values"] = list(values)
    return found


READY = '.status.conditions.[] | select( .type == "Ready" ) | .status'
STAGES = (
    _stage(
        "node-ready",
        "Node",
        {"matchExpressions": [_expr(READY, "NotIn", "True")]},
        {"statusTemplate": NODE_READY},
    ),
    _stage(
        "node-heartbeat",
        "Node",
        {"matchExpressions": [_expr(".status.phase", "In", "Running"), _expr(READY, "In", "True")]},
        {"statusTemplate": NODE_HEARTBEAT},
        delay_ms=NODE_STATUS_EVERY_MS,
        jitter_ms=NODE_STATUS_EVERY_MS + NODE_STATUS_EVERY_MS // 10,
    ),
    _stage(
        "pod-running",
        "Pod",
        {
            "matchExpressions": [
                _expr(".metadata.deletionTimestamp", "DoesNotExist"),
                _expr(f'.metadata.annotations["{HOLD_ANNOTATION}"]', "DoesNotExist"),
                _expr(".status.phase", "In", "Pending"),
                _expr(READY, "NotIn", "True"),
            ]
        },
        {
            "event": {"type": "Normal", "reason": "Started", "message": "Started container"},
            "statusTemplate": POD_RUNNING,
        },
    ),
    _stage(
        "pod-delete",
        "Pod",
        {"matchExpressions": [_expr(".metadata.deletionTimestamp", "Exists")]},
        {"delete": True},
    ),
)


@dataclasses.dataclass(frozen=True)
class FleetSize:
    """How big: Nodes in all (`gpu_nodes` of them in the GPU pool), pods on the CPU pool,
    GPU pods (one GPU each) and how many pods each Deployment holds."""

    nodes: int = 300
    gpu_nodes: int = 30
    pods: int = 3000
    gpu_pods: int = 60
    pods_per_deployment: int = 2000
    lease_seconds: int = 40

    def __post_init__(self):
        if not 0 <= self.gpu_nodes <= self.nodes:
            raise ValueError(f"gpu_nodes {self.gpu_nodes} not within 0..nodes {self.nodes}")
        if self.gpu_pods > self.gpu_nodes * int(GPU_NODE[GPU_RESOURCE]):
            raise ValueError(f"{self.gpu_pods} GPU pods do not fit on {self.gpu_nodes} nodes")


def node_grace_args(lease_seconds):
    """The node-lifecycle controller's grace periods in the kubelet's proportions to its
    Lease: upstream's 50 s (node-monitor) and 60 s (startup) for the kubelet's 40 s Lease,
    1.25 and 1.5 times it, never shorter than those defaults. A longer Lease (fewer
    renewals a second) keeps a Node Ready between renewals only if they grow with it."""
    return [
        f"--node-monitor-grace-period={max(50, lease_seconds * 5 // 4)}s",
        f"--node-startup-grace-period={max(60, lease_seconds * 3 // 2)}s",
    ]


# 10.(64..127).x.0/24 for pods, 172.16.0.0/12 for nodes: room for 16,384 Nodes.
def pod_net(index):
    """The first three octets of the `index`th Node's podCIDR."""
    return f"10.{64 + index // 256}.{index % 256}"


def node_address(index):
    return f"172.{16 + index // 65536}.{index // 256 % 256}.{index % 256}"


def node_manifest(name, index, gpu):
    """A Node as a kubelet registers it: labels, capacity, an address, a podCIDR."""
    pool = "gpu" if gpu else "cpu"
    resources = GPU_NODE if gpu else CPU_NODE
    zone = ZONES[index % len(ZONES)]
    pod_cidr = f"{pod_net(index)}.0/24"
    node_ip = node_address(index)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                KWOK_LABEL[0]: KWOK_LABEL[1],
                POOL_LABEL: pool,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "gpu-8x" if gpu else "cpu-32",
                "topology.kubernetes.io/zone": zone,
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr], "taints": [GPU_TAINT] if gpu else []},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [
                {"type": "InternalIP", "address": node_ip},
                {"type": "Hostname", "address": name},
            ],
        },
    }


def deployment_manifest(name, replicas, gpu):
    labels = {"app": name}
    requests = dict(POD_REQUESTS)
    limits = {}
    spec = {"nodeSelector": {POOL_LABEL: "gpu" if gpu else "cpu"}}
    if gpu:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = "1"
        spec["tolerations"] = [{**GPU_TAINT, "operator": "Equal"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    **spec,
                    "terminationGracePeriodSeconds": 0,
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": requests, "limits": limits},
                        }
                    ],
                },
            },
        },
    }


def bound_pod_manifest(name, node, gpu=False, hold=False):
    """A pause pod of the Deployments' shape (a GPU pod's with `gpu`), already bound to
    `node`; `hold` keeps kwok away from it."""
    template = deployment_manifest("bound-gpu" if gpu else "bound", 1, gpu)["spec"]["template"]
    spec = {k: v for k, v in template["spec"].items() if k != "nodeSelector"}
    metadata = {"name": name, "namespace": NAMESPACE, "labels": template["metadata"]["labels"]}
    if hold:
        metadata["annotations"] = {HOLD_ANNOTATION: "bound"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {**spec, "nodeName": node},
    }


def balloon_manifest(name, node, hold=False):
    """An overprovisioning pod as the cluster-autoscaler FAQ runs them (run=overprovisioning,
    a negative PriorityClass, a pause container holding 4 CPUs and 8 GiB), bound to `node`."""
    pod = bound_pod_manifest(name, node, hold=hold)
    pod["metadata"]["labels"] = dict(BALLOON_LABELS)
    container = pod["spec"]["containers"][0]
    container["resources"] = {"requests": dict(BALLOON_REQUESTS), "limits": {}}
    pod["spec"]["priorityClassName"] = BALLOON_PRIORITY_CLASS
    return pod


def running_status(node_index, slot):
    """What POD_RUNNING makes kwok write: Ready conditions, a running container, the
    Node's address and the `slot`th address of its podCIDR."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "phase": "Running",
        "startTime": now,
        "hostIP": node_address(node_index),
        "podIP": f"{pod_net(node_index)}.{slot + 2}",
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": now}
            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ],
        "containerStatuses": [
            {
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "imageID": "",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
        ],
    }


def split(total, per):
    """`total` as parts of at most `per`, as even as possible (Deployment sizes)."""
    if total <= 0:
        return []
    parts = math.ceil(total / per)
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


class Fleet:
    """The control plane, kwok and the objects it plays; see the module docstring."""

    def __init__(self, workdir, size: FleetSize = FleetSize(), api_args=(), players=True):
        self.workdir = pathlib.Path(workdir)
        self.size = size
        self.players = players
        self.api_args = list(api_args)
        self.nodes = [f"kwok-cpu-{i:05d}" for i in range(size.nodes - size.gpu_nodes)]
        self.gpu_nodes = [f"kwok-gpu-{i:05d}" for i in range(size.gpu_nodes)]
        self.deployments: dict[str, int] = {}
        self.main_etcd = self.events_etcd = self.api = None
        self.scheduler = self.controller_manager = self.kwok = None
        self.kubeconfig = str(self.workdir / "admin.kubeconfig")
        self._local = threading.local()

    # ---- the processes ------------------------------------------------------------------
    def start(self):
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self):
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.main_etcd = EtcdServer(
            self.workdir / "etcd-main",
            version=CONTROL_PLANE_VERSION,
            name="main",
            quota_bytes=MAIN_ETCD_QUOTA,
        ).start()
        self.events_etcd = EtcdServer(
            self.workdir / "etcd-events", version=CONTROL_PLANE_VERSION, name="events"
        ).start()
        self.api = KubeApiServer(
            self.workdir / "apiserver",
            self.main_etcd.client_url,
            extra_args=[
                f"--etcd-servers-overrides=/events#{self.events_etcd.client_url}",
                "--max-requests-inflight=1000",
                "--max-mutating-requests-inflight=500",
                *self.api_args,
            ],
        ).start()
        self.api.write_kubeconfig(self.kubeconfig)
        self.admin = self.api.admin
        self.admin.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        if self.players:
            self._start_players()

    def _start_players(self):
        pki = self._controller_pki()
        self.controller_manager = Proc(
            [
                *controller_manager_argv(
                    kube_binary("kube-controller-manager"), self.kubeconfig, pki
                ),
                "--kube-api-qps=1000",
                "--kube-api-burst=2000",
                "--concurrent-replicaset-syncs=20",
                "--concurrent-deployment-syncs=10",
                # No CIDR allocation (Nodes come with theirs), no service accounts' tokens.
                "--controllers=*,-nodeipam,-serviceaccount-token",
                *node_grace_args(self.size.lease_seconds),
            ],
            self.workdir / "kube-controller-manager.log",
        )
        self.scheduler = Proc(
            [
                *scheduler_argv(kube_binary("kube-scheduler"), self.kubeconfig),
                "--kube-api-qps=1000",
                "--kube-api-burst=2000",
            ],
            self.workdir / "kube-scheduler.log",
        )
        self.kwok = Proc(
            [kwok_binary(), "--kubeconfig", self.kubeconfig, "--config", self._kwok_config()],
            self.workdir / "kwok.log",
        )

    def _controller_pki(self):
        """The controller-manager's files under the names control_plane.py gives them: the
        API server's service-account key, and its client CA to sign certificates with."""
        pki = self.workdir / "pki"
        pki.mkdir(exist_ok=True)
        for name, target in (
            ("sa.key", self.api.sa_key),
            ("ca.crt", self.api.client_ca[0]),
            ("ca.key", self.api.client_ca[1]),
        ):
            link = pki / name
            if not link.exists():
                link.symlink_to(target)
        return pki

    def _kwok_config(self):
        options = {
            "manageNodesWithLabelSelector": "=".join(KWOK_LABEL),
            "nodeLeaseDurationSeconds": self.size.lease_seconds,
            "nodeLeaseParallelism": 16,
            "podPlayStageParallelism": 16,
            "nodePlayStageParallelism": 8,
            "cidr": "10.0.0.0/16",
            "serverAddress": "127.0.0.1:0",
            "enableProfilingHandler": False,
        }
        docs = [
            {
                "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                "kind": "KwokConfiguration",
                "options": options,
            },
            *STAGES,
        ]
        path = self.workdir / "kwok.yaml"
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        return str(path)

    def procs(self) -> dict[str, Proc]:
        """The running processes by component name (for RSS and CPU readings)."""
        found = {
            "etcd-main": self.main_etcd and self.main_etcd.proc,
            "etcd-events": self.events_etcd and self.events_etcd.proc,
            "kube-apiserver": self.api and self.api.proc,
            "kube-controller-manager": self.controller_manager,
            "kube-scheduler": self.scheduler,
            "kwok": self.kwok,
        }
        return {name: proc for name, proc in found.items() if proc is not None}

    def check_alive(self):
        dead = [name for name, proc in self.procs().items() if not proc.alive()]
        if dead:
            tails = "\n".join(f"--- {n}:\n{self.procs()[n].log_tail(15)}" for n in dead)
            raise RuntimeError(f"fleet processes exited: {dead}\n{tails}")

    def stop(self):
        """Every process, by PID, last started first."""
        for proc in (self.kwok, self.scheduler, self.controller_manager):
            if proc is not None:
                proc.stop()
        if self.api is not None:
            self.api.stop()
        for etcd in (self.events_etcd, self.main_etcd):
            if etcd is not None:
                etcd.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    # ---- the objects --------------------------------------------------------------------
    def _api(self) -> Api:
        """A session per thread: requests' Session is not safe to share."""
        api = getattr(self._local, "api", None)
        if api is None:
            api = self._local.api = Api(self.api.server, self.api.ca, self.api.admin_token)
        return api

    def _parallel(self, fn, items):
        with concurrent.futures.ThreadPoolExecutor(WRITERS) as pool:
            for _ in pool.map(fn, items):
                pass

    def create_nodes(self):
        """Register every Node (CPU pool, then GPU pool), WRITERS at a time."""
        named = [(n, i, False) for i, n in enumerate(self.nodes)] + [
            (n, len(self.nodes) + i, True) for i, n in enumerate(self.gpu_nodes)
        ]
        self._parallel(
            lambda item: self._api().create("/api/v1/nodes", node_manifest(*item)), named
        )

    def create_bound_pods(self, per_node, gpu_pods=0, balloons=0, until=None):
        """Running pods bound at creation (no scheduler), their status written as a kubelet
        reports it: `balloons` balloon pods spread over the CPU pool, `gpu_pods` GPU pods
        (one GPU each) spread over the GPU pool, then `per_node` pods on each CPU-pool Node,
        a round of every Node at a time. Past `until` (time.monotonic()) no more are made;
        returns how many were. With the players running the pods carry HOLD_ANNOTATION:
        kwok would otherwise play each a second time."""
        if per_node + 1 > 250 or gpu_pods > len(self.gpu_nodes) * int(GPU_NODE[GPU_RESOURCE]):
            raise ValueError(f"{per_node} pods a Node, {gpu_pods} GPU pods: they do not fit")
        if balloons > len(self.nodes):
            raise ValueError(f"{balloons} balloons: one a Node at most")
        cpu, gpu = len(self.nodes), len(self.gpu_nodes)
        # (node, its index as create_nodes counts, podIP slot, kind); a balloon takes the
        # slot after the pods'.
        work = [
            (self.nodes[b * cpu // balloons], b * cpu // balloons, per_node, "balloon")
            for b in range(balloons)
        ]
        work += [(self.gpu_nodes[g % gpu], cpu + g % gpu, g // gpu, "gpu") for g in range(gpu_pods)]
        work += [(self.nodes[n], n, slot, "cpu") for slot in range(per_node) for n in range(cpu)]
        if balloons:
            self._api().request(
                "POST",
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                {"metadata": {"name": BALLOON_PRIORITY_CLASS}, "value": -1, "globalDefault": False},
                ok=(201, 409),
            )
        path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        hold = self.players
        made = []

        def make(item):
            if until is not None and time.monotonic() > until:
                return
            node, index, slot, kind = item
            if kind == "balloon":
                name = f"{node}-balloon"
                pod = balloon_manifest(name, node, hold)
            else:
                name = f"{node}-gpu-{slot}" if kind == "gpu" else f"{node}-{slot}"
                pod = bound_pod_manifest(name, node, kind == "gpu", hold)
            api = self._api()
            api.create(path, pod)
            api.merge_patch(f"{path}/{name}/status", {"status": running_status(index, slot)})
            made.append(kind)

        self._parallel(make, work)
        return len(made)

    def ready_nodes(self) -> int:
        """Nodes whose Ready condition is True (a list from the watch cache)."""
        listing = self.admin.get(
            "/api/v1/nodes", labelSelector="=".join(KWOK_LABEL), resourceVersion="0"
        )
        return sum(
            1
            for node in listing["items"]
            for c in node.get("status", {}).get("conditions", [])
            if c["type"] == "Ready" and c["status"] == "True"
        )

    def wait_nodes_ready(self, timeout=600.0):
        # Each poll reads every Node (~3 KiB each): less often the more there are.
        every = max(0.5, self.size.nodes / 1000)
        self._wait(lambda: self.ready_nodes() >= self.size.nodes, "Nodes Ready", timeout, every)

    def create_workload(self):
        """The Deployments of size.pods CPU pods and size.gpu_pods GPU pods."""
        self.scale_pods(self.size.pods)
        if self.size.gpu_pods:
            self._apply_deployment("gpu-000", self.size.gpu_pods, gpu=True)

    def scale_pods(self, pods):
        """Make the CPU pool's Deployments hold `pods` pods in all (new Deployments, or
        replicas changed); returns their {name: replicas}."""
        sizes = split(pods, self.size.pods_per_deployment)
        wanted = {f"app-{i:03d}": n for i, n in enumerate(sizes)}
        for name in [n for n in self.deployments if n.startswith("app-") and n not in wanted]:
            wanted[name] = 0
        self._parallel(lambda item: self._apply_deployment(*item, gpu=False), wanted.items())
        return {n: r for n, r in wanted.items() if r}

    def _apply_deployment(self, name, replicas, gpu):
        path = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"
        if name in self.deployments:
            self._api().merge_patch(f"{path}/{name}", {"spec": {"replicas": replicas}})
        else:
            self._api().create(path, deployment_manifest(name, replicas, gpu))
        self.deployments[name] = replicas

    def running_pods(self) -> int:
        """Pods Ready as the Deployment controller counts them (cheap at any size)."""
        listing = self.admin.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments")
        return sum(d.get("status", {}).get("readyReplicas", 0) for d in listing["items"])

    def wanted_pods(self) -> int:
        return sum(self.deployments.values())

    def wait_pods_running(self, timeout=1800.0, progress=None):
        """Until every Deployment's pods are Ready; `progress(running)` each poll."""

        def done():
            running = self.running_pods()
            if progress:
                progress(running)
            return running >= self.wanted_pods()

        self._wait(done, "pods Running", timeout, every=2.0)

    def _wait(self, predicate, what, timeout, every=0.5):
        deadline = time.monotonic() + timeout
        while not predicate():
            self.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not after {timeout:.0f}s")
            time.sleep(every)

    def lease(self, node):
        return self.admin.get(
            f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"
        )


@contextlib.contextmanager
def fleet(workdir, size: FleetSize = FleetSize(), api_args=()):
    """A Fleet with its Nodes Ready and its pods Running; stopped by PID on exit."""
    f = Fleet(workdir, size, api_args).start()
    try:
        f.create_nodes()
        f.wait_nodes_ready()
        f.create_workload()
        f.wait_pods_running()
        yield f
    finally:
        f.stop()


def etcd_keys(etcd: EtcdServer, prefix: str, revision: int = 0) -> int:
    """How many keys under `prefix` (e.g. "/registry/events/") one etcd holds, now or at
    `revision` (an API server list's resourceVersion: the same moment as the list)."""
    return int(prefix_range(etcd, prefix, count_only=True, revision=revision).get("count", 0))
