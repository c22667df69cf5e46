"""No pod of the default install (`kubectl apply -k deploy/`) runs with group 0, mounts a
host path it could write, or mounts a container runtime's socket: any of these makes
whoever takes the pod over root on its node (issue 25). The socket source stays an
opt-in component, named as what it is."""

import copy

import pytest

from tests.deploy.conftest import compose
from tests.deploy.test_manifests import pods

pytestmark = pytest.mark.integration

# Where container runtimes listen: holding any of these is holding the node.
RUNTIME_SOCKET_DIRS = ("/run/containerd", "/var/run/containerd", "/run/crio", "/var/run/crio")
RUNTIME_SOCKETS = ("/run/docker.sock", "/var/run/docker.sock")


def _is_runtime_socket(host_path: dict) -> bool:
    path = host_path["path"].rstrip("/")
    return (
        host_path.get("type") == "Socket"
        or path.endswith(".sock")
        or path in RUNTIME_SOCKETS
        or any(path == d or path.startswith(d + "/") for d in RUNTIME_SOCKET_DIRS)
        # a parent of a runtime's socket directory holds the socket too
        or any(d.startswith(path + "/") for d in RUNTIME_SOCKET_DIRS)
    )


def escalations(pod: dict) -> list[str]:
    """What in this pod spec lets its taker act as root on the node."""
    found = []
    pod_sc = pod.get("securityContext") or {}
    if 0 in (pod_sc.get("supplementalGroups") or ()):
        found.append("supplementalGroups holds 0")
    for field in ("fsGroup", "runAsGroup"):
        if pod_sc.get(field) == 0:
            found.append(f"pod {field} 0")
    host = {v["name"]: v["hostPath"] for v in pod.get("volumes", ()) if "hostPath" in v}
    for name, h in host.items():
        if _is_runtime_socket(h):
            found.append(f"volume {name}: runtime socket {h['path']}")
    for c in [*pod.get("initContainers", ()), *pod["containers"]]:
        if (c.get("securityContext") or {}).get("runAsGroup") == 0:
            found.append(f"container {c['name']} runAsGroup 0")
        for m in c.get("volumeMounts", ()):
            if m["name"] in host and m.get("readOnly") is not True:
                found.append(f"container {c['name']}: host path {host[m['name']]['path']} writable")
    return found


def test_no_default_pod_can_act_as_root_on_its_node(manifests):
    default = pods(manifests)
    assert {"kube-scale-exporter-node", "kube-scale-exporter-etcd-node"} <= set(default)
    assert {name: escalations(pod) for name, pod in default.items()} == dict.fromkeys(default, [])


def test_the_default_node_pods_read_image_pulls_from_the_ingest_directory(manifests):
    for name in ("kube-scale-exporter-node", "kube-scale-exporter-etcd-node"):
        pod = pods(manifests)[name]
        args = pod["containers"][0]["args"]
        assert "--collector.imagepull" in args
        assert [a for a in args if a.startswith("--image-pull.source")] == [
            "--image-pull.source=ingest"
        ]
        host = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
        assert "/var/lib/containerd/io.containerd.content.v1.content/ingest" in host


def test_the_socket_component_is_caught_for_what_it_grants(tmp_path):
    """The check above can fail: the opt-in socket source trips it on both node pods."""
    objs = compose(tmp_path, ["etcd-node", "imagepull-socket"])
    for name in ("kube-scale-exporter-node", "kube-scale-exporter-etcd-node"):
        assert escalations(pods(objs)[name]) == [
            "supplementalGroups holds 0",
            "volume containerd-socket: runtime socket /run/containerd/containerd.sock",
        ], name


@pytest.mark.parametrize(
    "change, found",
    [
        (lambda p: p["containers"][0]["volumeMounts"][0].pop("readOnly"), "writable"),
        (lambda p: p["containers"][0]["volumeMounts"][0].update(readOnly=False), "writable"),
        (lambda p: p["securityContext"].update(fsGroup=0), "pod fsGroup 0"),
        (lambda p: p["securityContext"].update(runAsGroup=0), "pod runAsGroup 0"),
        (
            lambda p: p["containers"][0]["securityContext"].update(runAsGroup=0),
            "container exporter runAsGroup 0",
        ),
        (
            lambda p: p["volumes"].append(
                {"name": "run", "hostPath": {"path": "/run", "type": "Directory"}}
            ),
            "runtime socket /run",
        ),
        (
            lambda p: p["volumes"].append(
                {"name": "crio", "hostPath": {"path": "/var/run/crio/crio.sock"}}
            ),
            "runtime socket /var/run/crio/crio.sock",
        ),
    ],
)
def test_each_escalation_is_caught(manifests, change, found):
    pod = copy.deepcopy(pods(manifests)["kube-scale-exporter-node"])
    assert escalations(pod) == []
    change(pod)
    assert any(found in e for e in escalations(pod)), escalations(pod)


def test_the_node_memory_bench_runs_the_default_node_pods_args(manifests):
    """bench/node_memory.py judges the 28 MiB target on the pod it starts from the image:
    the DaemonSet's own args, or the figure is of another pod."""
    from bench.node_pod import IMAGE_POD_FLAGS  # noqa: PLC0415  (bench code, this test only)

    assert pods(manifests)["kube-scale-exporter-node"]["containers"][0]["args"] == IMAGE_POD_FLAGS
