"""cluster-autoscaler with its kwok cloud provider, on a Fleet's control plane (testbed/fleet.py):
the autoscaler adds Nodes to node groups, kwok makes them Ready, the scheduler places pods.

    with fleet(tmp, FleetSize(nodes=0, gpu_nodes=0, pods=0, gpu_pods=0)) as f:
        ca = ClusterAutoscaler(f, [NodeGroup("cpu", max_size=4), NodeGroup("gpu", 1, gpu=True)])
        ca.start()
        ca.group_size("cpu")               # Nodes of that group in the API
        ca.version                         # "1.36.1", as the running binary logged it
        ca.stop()                          # by PID; the provider deletes the Nodes it added
    # CapacityBuffers: the CRD of the same release first, then the autoscaler's two switches
    install_capacity_buffer_crd(f.admin)
    ca = ClusterAutoscaler(f, groups, buffers=True).start()
    ca.restart([NodeGroup("cpu", max_size=6)])   # a group's max changed; the Nodes stay

How the provider is configured (read from cloudprovider/kwok in the pinned module): a
ConfigMap `kwok-provider-config` in the autoscaler's namespace (POD_NAMESPACE) says where the
node templates are (`readNodesFrom: configmap`, a second ConfigMap whose `templates` key
holds Node manifests) and which label groups them; each template's annotations give its
group's min and max size. A Node the autoscaler adds is the template under a new name,
annotated `kwok.x-k8s.io/node: fake`; it keeps the template's labels, so the fleet's kwok
(which manages Nodes labelled type=kwok) makes it Ready. The provider talks to the API
server through a client of its own, from KUBECONFIG when KWOK_PROVIDER_MODE=local. `skipTaint` leaves out the
provider's own `kwok-provider` taint: the pods here are the cluster's, not a dry run's.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import time

import yaml

from .builds import capacity_buffer_crd, cluster_autoscaler_binary
from .fleet import CPU_NODE, GPU_NODE, GPU_RESOURCE, Fleet, node_manifest
from .procs import Proc

NAMESPACE = "kube-system"
CONFIG_MAP = "kwok-provider-config"
TEMPLATES_CONFIG_MAP = "kwok-provider-templates"
GROUP_LABEL = "kse.test/node-group"
# The label the provider reads a GPU node's accelerator type from, and the one type here.
GPU_LABEL = "kse.test/accelerator"
GPU_TYPE = "nvidia-test-8x"
# The autoscaler's loop period: seconds, not its default 10 s, so a test waits less.
SCAN_INTERVAL = "2s"
# The CapacityBuffer API (cluster-autoscaler 1.34+): v1beta1 is stored, v1alpha1 served too.
BUFFER_GROUP = "autoscaling.x-k8s.io"
BUFFER_VERSIONS = ("v1alpha1", "v1beta1")
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@dataclasses.dataclass(frozen=True)
class NodeGroup:
    """A node group: the fleet's CPU or GPU Node shape, from min_size up to max_size."""

    name: str
    max_size: int
    gpu: bool = False
    min_size: int = 0

    @property
    def allocatable(self) -> dict:
        return GPU_NODE if self.gpu else CPU_NODE

    def template(self) -> dict:
        node = node_manifest(f"template-{self.name}", 0, self.gpu)
        node["metadata"]["labels"][GROUP_LABEL] = self.name
        del node["metadata"]["labels"]["kubernetes.io/hostname"]
        if self.gpu:
            node["metadata"]["labels"][GPU_LABEL] = GPU_TYPE
        node["metadata"]["annotations"].update(
            {
                "cluster-autoscaler.kwok.nodegroup/min-count": str(self.min_size),
                "cluster-autoscaler.kwok.nodegroup/max-count": str(self.max_size),
            }
        )
        return node


def provider_config() -> dict:
    return {
        "apiVersion": "v1alpha1",
        "readNodesFrom": "configmap",
        "nodegroups": {"fromNodeLabelKey": GROUP_LABEL},
        "nodes": {
            "skipTaint": True,
            "gpuConfig": {"gpuLabelKey": GPU_LABEL, "availableGPUTypes": {GPU_TYPE: {}}},
        },
        "configmap": {"name": TEMPLATES_CONFIG_MAP},
    }


def _rule(groups, resources, verbs) -> dict:
    return {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}


_READ = ("get", "list", "watch")
# What cluster-autoscaler 1.36.1 reads and writes without buffers (as the ClusterRole and
# Role of its cloudprovider examples grant it, its leader lease and status ConfigMap
# included), and what its kwok provider does: create and delete Nodes, read its ConfigMaps.
AUTOSCALER_RULES = (
    _rule([""], ["events", "endpoints"], ["create", "patch"]),
    _rule([""], ["pods/eviction"], ["create"]),
    _rule([""], ["pods/status"], ["update"]),
    _rule([""], ["nodes"], [*_READ, "update", "create", "delete"]),
    _rule(
        [""],
        [
            "namespaces",
            "pods",
            "services",
            "replicationcontrollers",
            "persistentvolumeclaims",
            "persistentvolumes",
        ],
        _READ,
    ),
    _rule(["policy"], ["poddisruptionbudgets"], ["list", "watch"]),
    _rule(["apps"], ["statefulsets", "replicasets", "daemonsets"], _READ),
    _rule(["resource.k8s.io"], ["deviceclasses", "resourceslices", "resourceclaims"], _READ),
    _rule(
        ["storage.k8s.io"],
        ["storageclasses", "csinodes", "csidrivers", "csistoragecapacities", "volumeattachments"],
        _READ,
    ),
    _rule(["batch"], ["jobs"], [*_READ, "patch"]),
    _rule(["coordination.k8s.io"], ["leases"], ["create", "get", "update"]),
    _rule([""], ["configmaps"], [*_READ, "create", "update", "delete"]),
)
# What the CapacityBuffer controller and pod injection add (its capacitybuffer/client): the
# buffers and their status; PodTemplates, read and its own copy written; ResourceQuotas
# and Deployments watched (its informers must sync before the autoscaler's first loop);
# and pods created as a server-side dry run, to resolve a template as admission would.
BUFFER_RULES = (
    _rule([BUFFER_GROUP], ["capacitybuffers"], ["list", "watch"]),
    _rule([BUFFER_GROUP], ["capacitybuffers/status"], ["update"]),
    _rule([""], ["podtemplates"], [*_READ, "create", "update"]),
    _rule([""], ["resourcequotas"], ["list", "watch"]),
    _rule(["apps"], ["deployments"], ["list", "watch"]),
)
DRY_RUN_RULE = _rule([""], ["pods"], ["create"])


def buffers_path(version: str, namespace: str, name: str = "") -> str:
    path = f"/apis/{BUFFER_GROUP}/{version}/namespaces/{namespace}/capacitybuffers"
    return f"{path}/{name}" if name else path


def install_capacity_buffer_crd(api, timeout: float = 30.0) -> list[str]:
    """Create the CapacityBuffer CRD of the pinned release (the file its source tarball has)
    and wait until it is Established and discovery lists capacitybuffers in each version the
    CRD serves; returns those versions."""
    crd = yaml.safe_load(capacity_buffer_crd().read_text())
    api.create(CRDS, crd)
    served = [v["name"] for v in crd["spec"]["versions"] if v["served"]]
    deadline = time.monotonic() + timeout

    def listed(version):
        # A version not served yet answers 404 with a plain-text body.
        got = api.request("GET", f"/apis/{BUFFER_GROUP}/{version}", ok=(200, 404))
        resources = got.get("resources", []) if isinstance(got, dict) else []
        return any(r.get("name") == "capacitybuffers" for r in resources)

    def ready():
        got = api.get(f"{CRDS}/{crd['metadata']['name']}")
        established = any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (got.get("status") or {}).get("conditions") or []
        )
        return established and all(listed(v) for v in served)

    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"CapacityBuffer CRD not served as {served} after {timeout:.0f}s")
        time.sleep(0.2)
    return served


class ClusterAutoscaler:
    """`buffers`: the CapacityBuffer controller and its fake-pod injection on (both off by
    default in the autoscaler); the CRD must be installed first. The buffers' pods are
    resolved by a server-side dry-run create (the autoscaler's default), as admission would
    make them: the admin kubeconfig allows it."""

    def __init__(
        self, fleet: Fleet, groups: list[NodeGroup], extra_args=(), buffers=False, kubeconfig=None
    ):
        self.fleet = fleet
        # The admin's unless given (a service account's, to hold it to its rules).
        self.kubeconfig = kubeconfig or fleet.kubeconfig
        self.groups = {g.name: g for g in groups}
        self.extra_args = list(extra_args)
        self.buffers = buffers
        self.proc: Proc | None = None

    def _config_maps(self):
        base = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
        templates = {"apiVersion": "v1", "kind": "List", "items": []}
        templates["items"] = [g.template() for g in self.groups.values()]
        for name, data in (
            (CONFIG_MAP, {"config": yaml.safe_dump(provider_config())}),
            (TEMPLATES_CONFIG_MAP, {"templates": yaml.safe_dump(templates)}),
        ):
            self.fleet.admin.request("POST", base, {"metadata": {"name": name}}, ok=(201, 409))
            self.fleet.admin.merge_patch(f"{base}/{name}", {"data": data})

    def argv(self) -> list[str]:
        return [
            cluster_autoscaler_binary(),
            "--cloud-provider=kwok",
            f"--kubeconfig={self.kubeconfig}",
            f"--namespace={NAMESPACE}",
            "--leader-elect=false",
            f"--scan-interval={SCAN_INTERVAL}",
            # Scale-up only: nodes going away mid-story would be another story.
            "--scale-down-enabled=false",
            "--max-node-provision-time=2m",
            "--address=127.0.0.1:0",
            # 1: the version it logs at start (it has no --version flag); 2: why it scales.
            "--v=2",
            *(
                ("--capacity-buffer-controller-enabled", "--capacity-buffer-pod-injection-enabled")
                if self.buffers
                else ()
            ),
            *self.extra_args,
        ]

    def start(self) -> ClusterAutoscaler:
        self._config_maps()
        # The provider makes its own client: KWOK_PROVIDER_MODE=local reads KUBECONFIG
        # instead of the in-cluster service account.
        env = {
            **os.environ,
            "POD_NAMESPACE": NAMESPACE,
            "KWOK_PROVIDER_CONFIGMAP": CONFIG_MAP,
            "KWOK_PROVIDER_MODE": "local",
            "KUBECONFIG": self.kubeconfig,
        }
        self.proc = Proc(self.argv(), self.fleet.workdir / "cluster-autoscaler.log", env=env)
        return self

    def restart(self, groups: list[NodeGroup] = (), kubeconfig=None) -> ClusterAutoscaler:
        """Start again with these node groups (a max raised, say: the kwok provider reads its
        groups at start only), or as another user. The old process is killed (SIGKILL) rather than stopped: on
        SIGTERM the kwok provider's cleanup deletes every Node it added, which no real cloud
        provider does to a cluster's nodes."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.popen.wait(10)
            self.proc = None
        self.groups.update({g.name: g for g in groups})
        self.kubeconfig = kubeconfig or self.kubeconfig
        return self.start()

    @property
    def version(self) -> str:
        """The release the running binary logs at start ("Cluster Autoscaler 1.36.1")."""
        deadline = time.monotonic() + 10
        while True:
            found = re.search(r"Cluster Autoscaler (\S+)", self.proc.log_tail(400))
            if found:
                return found.group(1)
            if time.monotonic() > deadline:
                raise RuntimeError(f"no version in the autoscaler's log:\n{self.proc.log_tail(10)}")
            time.sleep(0.2)

    def logged(self, text: str) -> bool:
        """Whether the autoscaler's log (this run and any before a restart) has `text`."""
        with open(self.fleet.workdir / "cluster-autoscaler.log", errors="replace") as f:
            return any(text in line for line in f)

    def group_size(self, name: str) -> int:
        """Nodes of group `name` in the API, Ready or not."""
        nodes = self.fleet.admin.get("/api/v1/nodes", labelSelector=f"{GROUP_LABEL}={name}")
        return len(nodes["items"])

    def check_alive(self):
        if self.proc is not None and not self.proc.alive():
            raise RuntimeError(f"cluster-autoscaler exited:\n{self.proc.log_tail(30)}")

    def stop(self):
        if self.proc is not None:
            self.proc.stop()
            self.proc = None


__all__ = [
    "AUTOSCALER_RULES",
    "BUFFER_RULES",
    "BUFFER_VERSIONS",
    "DRY_RUN_RULE",
    "GPU_RESOURCE",
    "ClusterAutoscaler",
    "NodeGroup",
    "buffers_path",
    "install_capacity_buffer_crd",
]
