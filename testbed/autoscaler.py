"""cluster-autoscaler with its kwok cloud provider, on a Fleet's control plane (testbed/fleet.py):
the autoscaler adds Nodes to node groups, kwok makes them Ready, the scheduler places pods.

    with fleet(tmp, FleetSize(nodes=0, gpu_nodes=0, pods=0, gpu_pods=0)) as f:
        ca = ClusterAutoscaler(f, [NodeGroup("cpu", max_size=4), NodeGroup("gpu", 1, gpu=True)])
        ca.start()
        ca.group_size("cpu")               # Nodes of that group in the API
        ca.stop()                          # by PID; the Nodes it added stay

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

import yaml

from .builds import cluster_autoscaler_binary
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


class ClusterAutoscaler:
    def __init__(self, fleet: Fleet, groups: list[NodeGroup], extra_args=()):
        self.fleet = fleet
        self.groups = {g.name: g for g in groups}
        self.extra_args = list(extra_args)
        self.proc: Proc | None = None

    def _config_maps(self):
        base = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
        templates = {"apiVersion": "v1", "kind": "List", "items": []}
        templates["items"] = [g.template() for g in self.groups.values()]
        for name, data in (
            (CONFIG_MAP, {"config": yaml.safe_dump(provider_config())}),
            (TEMPLATES_CONFIG_MAP, {"templates": yaml.safe_dump(templates)}),
        ):
            self.fleet.admin.create(base, {"metadata": {"name": name}, "data": data})

    def argv(self) -> list[str]:
        return [
            cluster_autoscaler_binary(),
            "--cloud-provider=kwok",
            f"--kubeconfig={self.fleet.kubeconfig}",
            f"--namespace={NAMESPACE}",
            "--leader-elect=false",
            f"--scan-interval={SCAN_INTERVAL}",
            # Scale-up only: nodes going away mid-story would be another story.
            "--scale-down-enabled=false",
            "--max-node-provision-time=2m",
            "--address=127.0.0.1:0",
            "--v=2",
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
            "KUBECONFIG": self.fleet.kubeconfig,
        }
        self.proc = Proc(self.argv(), self.fleet.workdir / "cluster-autoscaler.log", env=env)
        return self

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


__all__ = ["GPU_RESOURCE", "ClusterAutoscaler", "NodeGroup"]
