"""The e2e cluster's node: the bridge and its CNI config, containerd, the kubelet, kube-proxy.

Functions that write the node's files and return its command lines; testbed/cluster.py
starts and stops the processes. What this host takes:
- root lacks CAP_SYS_RESOURCE, so runc cannot set oom_score_adj below ours: containerd's
  CRI runs with restrict_oom_score_adj, kubelet and kube-proxy with --oom-score-adj 0;
- no registry.k8s.io: the sandbox image is the source tree's pause.c built static;
- pods cannot use an API server on loopback, so the bridge `kse0` gets 10.217.0.1/16 and
  that is the node IP, the API server's address and the pods' gateway;
- cgroupfs driver (no systemd here).
"""

import json
import os
import pathlib
import time

import requests
import yaml

from kube_scale_exporter.kube.quantity import parse_quantity, pod_requests

from .builds import containerd_dir
from .host import (
    BRIDGE,
    CNI_BIN,
    CNI_CONF,
    CNI_CONF_DIR,
    CONTAINERD_ROOT,
    CONTAINERD_SOCK,
    CONTAINERD_STATE,
    KUBELET_DIR,
    run,
)

NODE_NAME = "kse-e2e-node"
NODE_IP = "10.217.0.1"
POD_CIDR = "10.217.0.0/16"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
KUBELET_CONFIG = KUBELET_DIR / "config.yaml"
MAX_PARALLEL_IMAGE_PULLS = 2


def create_network(ipam_dir):
    """The bridge with the node IP, and the CNI config that puts the pods on it."""
    run("ip", "link", "add", BRIDGE, "type", "bridge")
    run("ip", "addr", "add", f"{NODE_IP}/16", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")
    CNI_CONF_DIR.mkdir(parents=True, exist_ok=True)
    CNI_CONF.write_text(
        json.dumps(
            {
                "cniVersion": "0.4.0",
                "name": "kse-e2e",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": BRIDGE,
                        "isGateway": True,
                        "isDefaultGateway": True,
                        "ipMasq": False,
                        "hairpinMode": True,
                        "ipam": {
                            "type": "host-local",
                            "dataDir": str(ipam_dir),
                            "ranges": [
                                [
                                    {
                                        "subnet": POD_CIDR,
                                        "rangeStart": "10.217.1.1",
                                        "rangeEnd": "10.217.255.254",
                                        "gateway": NODE_IP,
                                    }
                                ]
                            ],
                        },
                    }
                ],
            },
            indent=1,
        )
    )


# ---------------------------------------------------------------- containerd


# containerd 2.3, the LTS (.ci/setup.d/50-containerd.sh, from the Go module proxy), with its
# own shim (PATH below) and bookworm's runc.
NODE_CONTAINERD = "2.3"


def containerd_bin() -> pathlib.Path:
    """Looked up when the node starts, so that importing this module needs no binary."""
    return pathlib.Path(containerd_dir(NODE_CONTAINERD))


# containerd's own metrics (its CRI pull gauges and counters), which tests/e2e reads beside
# the exporter's; loopback only, at containerd's customary port.
CONTAINERD_METRICS = "127.0.0.1:1338"
RUNC = "/usr/sbin/runc"

# Config version 3 (containerd 2.x): the CRI is two plugins, images and runtime. Pulls go
# through the transfer service, as a 2.x node's do by default.
# Its root is containerd's default, /var/lib/containerd, where the product's DaemonSet
# reads the content store's ingest directory from the host.
CONTAINERD_CONFIG = """\
version = 3
root = "{root}"
state = "{state}"
oom_score = 0
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = "{state}/debug.sock"
  level = "info"
[metrics]
  address = "{metrics}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{work}/opt"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{pause}"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{work}/certs.d"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{runc}"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{cni_conf}"
"""


def containerd_argv(config):
    return [str(containerd_bin() / "containerd"), "--config", str(config)]


def containerd_env():
    """containerd finds its shim on PATH: the one of its own package first."""
    return dict(os.environ, PATH=f"{containerd_bin()}:{os.environ.get('PATH', '/usr/bin:/bin')}")


def write_containerd_config(work):
    """WORK/containerd.toml, and the WORK/certs.d it reads registries from; returns its path."""
    config = work / "containerd.toml"
    config.write_text(
        CONTAINERD_CONFIG.format(
            work=work,
            root=CONTAINERD_ROOT,
            state=CONTAINERD_STATE,
            sock=CONTAINERD_SOCK,
            pause=PAUSE_IMAGE,
            cni_bin=CNI_BIN,
            cni_conf=CNI_CONF_DIR,
            runc=RUNC,
            metrics=CONTAINERD_METRICS,
        )
    )
    (work / "certs.d").mkdir()
    return config


def ctr(*args, check=True):
    """ctr against the node's containerd, in the CRI's namespace."""
    return run(
        str(containerd_bin() / "ctr"),
        "--address",
        str(CONTAINERD_SOCK),
        "-n",
        "k8s.io",
        *args,
        check=check,
    )


def containerd_answers():
    return CONTAINERD_SOCK.exists() and ctr("version", check=False).returncode == 0


def wait_containerd(proc, timeout=30):
    deadline = time.monotonic() + timeout
    while not containerd_answers():
        if not proc.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"containerd did not start:\n{proc.log_tail()}")
        time.sleep(0.1)


def add_registry(work, host, endpoint):
    """Let the CRI pull from a plain-HTTP registry (containerd reads hosts.toml per pull)."""
    d = work / "certs.d" / host
    d.mkdir(parents=True, exist_ok=True)
    (d / "hosts.toml").write_text(
        f'server = "{endpoint}"\n[host."{endpoint}"]\n  capabilities = ["pull", "resolve"]\n'
    )


def remove_containers():
    """Every container of the k8s.io namespace, with containerd still up."""
    if not containerd_answers():
        return
    tasks = ctr("tasks", "list", "-q", check=False).stdout.split()
    for task in tasks:
        ctr("tasks", "kill", "-a", "-s", "SIGKILL", task, check=False)
    for task in tasks:
        for _ in range(50):
            if ctr("tasks", "delete", task, check=False).returncode == 0:
                break
            time.sleep(0.1)
    for c in ctr("containers", "list", "-q", check=False).stdout.split():
        ctr("containers", "delete", c, check=False)


# ---------------------------------------------------------------- kubelet, kube-proxy


def kubelet_config(ca):
    """The KubeletConfiguration; `ca` verifies the API server's client certificates."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        # This host is cgroup v1 (hybrid); 1.34 only warns, 1.35 refuses unless told so.
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCK}",
        "oomScoreAdj": 0,
        # Parallel pulls with a limit, as current node images set it: the third pull at
        # once waits for a slot (tests/e2e/test_3_imagepull.py).
        "serializeImagePulls": False,
        "maxParallelImagePulls": MAX_PARALLEL_IMAGE_PULLS,
        "registryPullQPS": 0,
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "2%",
            "imagefs.available": "2%",
        },
        "maxPods": 110,
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "nodeStatusUpdateFrequency": "5s",
    }


def write_kubelet_config(config):
    """Where the product's DaemonSet reads it from the host."""
    KUBELET_DIR.mkdir(parents=True, exist_ok=True)
    KUBELET_CONFIG.write_text(yaml.safe_dump(config))


def kubelet_argv(binary, kubeconfig):
    return [
        binary,
        "--config",
        str(KUBELET_CONFIG),
        "--kubeconfig",
        str(kubeconfig),
        "--root-dir",
        str(KUBELET_DIR),
        f"--node-ip={NODE_IP}",
        f"--hostname-override={NODE_NAME}",
        "--cert-dir",
        str(KUBELET_DIR / "pki"),
        "--v=1",
    ]


def kube_proxy_argv(binary, kubeconfig):
    return [
        binary,
        "--kubeconfig",
        str(kubeconfig),
        f"--hostname-override={NODE_NAME}",
        f"--cluster-cidr={POD_CIDR}",
        "--proxy-mode=iptables",
        "--oom-score-adj=0",
        "--conntrack-max-per-core=0",
        "--conntrack-tcp-timeout-established=0",
        "--conntrack-tcp-timeout-close-wait=0",
        f"--healthz-bind-address={NODE_IP}:10256",
        f"--metrics-bind-address={NODE_IP}:10249",
        "--profiling=false",
    ]


def free_cpu(get) -> int:
    """The node's allocatable CPU less what its Pending and Running pods request (as the
    scheduler counts them, kube.quantity.pod_requests), in millicores; `get(path, **params)`
    reads the API as an admin."""
    node = get(f"/api/v1/nodes/{NODE_NAME}")
    pods = get("/api/v1/pods", fieldSelector=f"spec.nodeName={NODE_NAME}")["items"]
    used = sum(
        pod_requests(p).get("cpu", 0)
        for p in pods
        if p["status"].get("phase") in ("Pending", "Running")
    )
    return int((parse_quantity(node["status"]["allocatable"]["cpu"]) - used) * 1000)


def wait_ready(session, server, procs, timeout=120):
    """Until the node is Ready; fails at once if one of the cluster's `procs` exited."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            node = session.get(f"{server}/api/v1/nodes/{NODE_NAME}", timeout=5)
            if node.ok:
                conds = {c["type"]: c for c in node.json()["status"].get("conditions", [])}
                last = conds.get("Ready")
                if last and last["status"] == "True":
                    return
        except requests.RequestException as e:
            last = str(e)
        for name, proc in procs.items():
            if not proc.alive():
                raise RuntimeError(f"{name} exited:\n{proc.log_tail()}")
        time.sleep(0.5)
    raise TimeoutError(f"node not Ready: {last}\n{procs['kubelet'].log_tail()}")
