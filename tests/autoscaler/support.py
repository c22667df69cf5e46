"""What the autoscaler stories share: the pods they make, the mixin rules they load, and how
they read CapacityBuffers, their conditions and the autoscaler's events on them."""

import time

import yaml

from testbed.autoscaler import buffers_path
from testbed.fleet import GPU_TAINT, POOL_LABEL
from tests.mixin.support import build

PAUSE = "registry.k8s.io/pause:3.10"


def pod_spec(requests_, *, gpu, priority_class=None):
    """A pause pod's spec for one node group (its pool's nodeSelector, the GPU taint
    tolerated), requesting `requests_` (extended resources as limits too, as they must be)."""
    spec = {
        "nodeSelector": {POOL_LABEL: "gpu" if gpu else "cpu"},
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [
            {
                "name": "pause",
                "image": PAUSE,
                "resources": {
                    "requests": requests_,
                    "limits": {k: v for k, v in requests_.items() if "/" in k},
                },
            }
        ],
    }
    if gpu:
        spec["tolerations"] = [{**GPU_TAINT, "operator": "Equal"}]
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def deployment(name, ns, replicas, requests_, *, labels, gpu, priority_class=None):
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": pod_spec(requests_, gpu=gpu, priority_class=priority_class),
            },
        },
    }


def apply_deployment(admin, manifest):
    """Create the Deployment, or set its replicas when it exists."""
    ns, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    path = f"/apis/apps/v1/namespaces/{ns}/deployments"
    admin.request("POST", path, manifest, ok=(201, 409))
    admin.merge_patch(f"{path}/{name}", {"spec": {"replicas": manifest["spec"]["replicas"]}})


def rule_files(workdir, knobs, keep):
    """The mixin's recording rules and alerts of the groups whose name `keep(name)` accepts,
    `knobs` merged over its config, one file each."""
    mixin = build.mixin_object(knobs)
    paths = []
    for kind in ("rules", "alerts"):
        groups = [g for g in mixin[kind]["groups"] if keep(g["name"])]
        assert groups, f"no {kind} groups kept of {[g['name'] for g in mixin[kind]['groups']]}"
        path = workdir / f"mixin-{kind}.yaml"
        path.write_text(yaml.safe_dump({"groups": groups}))
        paths.append(str(path))
    return paths


# ---- CapacityBuffers ----------------------------------------------------------------------


def pod_template(name, ns, requests_, *, gpu):
    """A PodTemplate, the shape of one replica of a buffer (`podTemplateRef`)."""
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": ns},
        "template": {
            "metadata": {"labels": {"buffer": name}},
            "spec": pod_spec(requests_, gpu=gpu),
        },
    }


def capacity_buffer(name, ns, template, replicas, version="v1beta1"):
    return {
        "apiVersion": f"autoscaling.x-k8s.io/{version}",
        "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"podTemplateRef": {"name": template}, "replicas": replicas},
    }


class Buffers:
    """Reads of the buffers in one namespace, as the API server and the autoscaler have
    them."""

    def __init__(self, admin, ns):
        self.admin, self.ns = admin, ns

    def create_template(self, name, requests_, *, gpu=False):
        self.admin.create(
            f"/api/v1/namespaces/{self.ns}/podtemplates",
            pod_template(name, self.ns, requests_, gpu=gpu),
        )

    def create(self, name, template, replicas, version="v1beta1"):
        created = time.monotonic()
        self.admin.create(
            buffers_path(version, self.ns),
            capacity_buffer(name, self.ns, template, replicas, version),
        )
        return created

    def get(self, name, version="v1beta1"):
        return self.admin.get(buffers_path(version, self.ns, name))

    def condition(self, name, kind):
        """(status, reason, message) of the buffer's condition `kind`, or None."""
        for c in self.get(name).get("status", {}).get("conditions", []):
            if c["type"] == kind:
                return c["status"], c["reason"], c.get("message", "")
        return None

    def provisioning(self, name):
        """Ready for provisioning and its fake pods injected, as the autoscaler says."""
        ready = self.condition(name, "ReadyForProvisioning")
        injected = self.condition(name, "Provisioning")
        return (
            ready is not None
            and ready[:2] == ("True", "AttributesSetSuccessfully")
            and injected is not None
            and injected[:2] == ("True", "FakePodsInjected")
        )

    def events(self, name, reason):
        """The autoscaler's events `reason` on the buffer (TriggeredScaleUp, NotTriggerScaleUp)."""
        return self.admin.get(
            f"/api/v1/namespaces/{self.ns}/events",
            fieldSelector=(
                f"involvedObject.kind=CapacityBuffer,involvedObject.name={name},reason={reason}"
            ),
        )["items"]


def wait_for(what, predicate, timeout, every=1.0, check=()):
    """Poll `predicate` until true (returns time.monotonic() then); each `check()` raises
    when a process it watches has died."""
    deadline = time.monotonic() + timeout
    while True:
        for alive in check:
            alive()
        if predicate():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f}s")
        time.sleep(every)
