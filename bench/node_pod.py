"""The default node pod as deploy/ runs it, for the node benches (node_memory, scrape_cost).

deploy/ runs node mode with `neighbor`, `neighbor_gc` and `imagepull` (its ingest source:
containerd's ingest directory read-only, containerd's config, the kubelet's config file,
and a pod watch on this node's pods). Here: the host's own neighbor tables (hostNetwork),
a real containerd in a work dir, a kubelet config file, and, unless the bench is told
otherwise, a real API server holding MAX_PODS pods bound to this node for the pod watch.
Every piece is stopped by PID on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import requests

from kube_scale_exporter.collectors.imagepull.kubelet import DEFAULT_KUBELET_CONFIG
from kube_scale_exporter.containerd.config import DEFAULT_CONFIG as DEFAULT_CONTAINERD_CONFIG
from kube_scale_exporter.containerd.ingestdir import DEFAULT_INGEST_DIR
from kube_scale_exporter.kube.config import SERVICE_ACCOUNT_DIR
from bench.scraping import Run, scrape_process
from testbed.containerd_server import ContainerdServer
from testbed.exporter import start_exporter
from testbed.metrics import parse_exposition, wait_until
from testbed.ports import free_port
from testbed.procs import Proc, rss_mib, wait_for_port

NODE = "bench-node"
MAX_PODS = 110  # the kubelet's default maxPods: a full node's pod watch
KUBELET_CONFIG = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
serializeImagePulls: true
maxPods: 110
"""
# Layers, from the bare node mode to the default pod: the flags each adds.
NEIGHBOR = ["--collector.neighbor"]
NEIGHBOR_GC = ["--collector.neighbor_gc"]
IMAGEPULL = ["--collector.imagepull"]


# The default DaemonSet's args (deploy/base/node.yaml with components/imagepull and
# kube-rbac; tests/deploy holds them equal): in the image its paths are the defaults, where
# deploy/ mounts them, and every scrape brings a token the API server reviews.
IMAGE_POD_FLAGS = [
    "--mode=node",
    "--collector.disable-defaults",
    *NEIGHBOR,
    *NEIGHBOR_GC,
    *IMAGEPULL,
    "--image-pull.source=ingest",
    "--web.kube-rbac",
]

REPO = Path(__file__).resolve().parent.parent
LOG_DIR = REPO / "bench/results/logs"


def parse_args(
    doc: str, scrapes: int, argv: list[str] | None, image: bool = False
) -> argparse.Namespace:
    """The node benches' flags: --scrapes, --no-pod-watch, --node-exporter; with `image`,
    --no-image."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=scrapes)
    parser.add_argument(
        "--no-pod-watch",
        dest="pod_watch",
        action="store_false",
        help="leave out the pod watch (no API server)",
    )
    parser.add_argument("--node-exporter", help="node_exporter binary to run beside ours")
    if image:
        parser.add_argument(
            "--no-image",
            dest="image",
            action="store_false",
            help="leave out the default pod run from the image (testbed/image.py's build)",
        )
    args = parser.parse_args(argv)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    return args


@dataclass
class Pod:
    """What the default pod needs beside the exporter, and the flags that point at it."""

    containerd: ContainerdServer
    imagepull_flags: list[str]
    watch_flags: list[str] = field(default_factory=list)
    # In the image: host path -> where the DaemonSet mounts it, and the pod's environment.
    volumes: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    # What a scrape of the in-image pod sends (--web.kube-rbac: a token to review).
    scrape_headers: dict[str, str] = field(default_factory=dict)

    def flags(self, *layers: Sequence[str], watch: bool = False) -> list[str]:
        """Node mode with only these collectors, as the DaemonSet passes them."""
        out = ["--mode=node", "--collector.disable-defaults"]
        for layer in layers:
            out += layer
        if IMAGEPULL in layers:
            out += self.imagepull_flags
            if watch:
                out += self.watch_flags
        return out

    @property
    def default(self) -> list[str]:
        return self.flags(NEIGHBOR, NEIGHBOR_GC, IMAGEPULL, watch=bool(self.watch_flags))


@contextlib.contextmanager
def default_pod(workdir: Path, pod_watch: bool) -> Iterator[Pod]:
    workdir.mkdir(parents=True, exist_ok=True)
    kubelet = workdir / "kubelet-config.yaml"
    kubelet.write_text(KUBELET_CONFIG)
    with contextlib.ExitStack() as stack:
        containerd = ContainerdServer(workdir / "cd").start()
        stack.callback(containerd.stop)
        ingest = Path(containerd.workdir, "root", "io.containerd.content.v1.content", "ingest")
        ingest.mkdir(parents=True, exist_ok=True)  # containerd makes it at its first pull
        pod = Pod(
            containerd,
            [
                "--image-pull.source=ingest",  # deploy/components/imagepull's
                f"--containerd.ingest-dir={ingest}",
                f"--containerd.config={containerd.config}",
                f"--kubelet.config-file={kubelet}",
            ],
            volumes={
                str(ingest): DEFAULT_INGEST_DIR,
                str(containerd.config): DEFAULT_CONTAINERD_CONFIG,
                str(kubelet): DEFAULT_KUBELET_CONFIG,
            },
            env={"NODE_NAME": NODE},
        )
        if pod_watch:
            api = stack.enter_context(_node_pods(workdir / "api"))
            kubeconfig = api.write_kubeconfig(str(workdir / "api" / "kubeconfig"))
            pod.watch_flags = [f"--kube.kubeconfig={kubeconfig}", f"--kube.node-name={NODE}"]
            account = workdir / "serviceaccount"  # what the kubelet mounts for the pod
            account.mkdir()
            (account / "token").write_text(api.admin_token)
            (account / "ca.crt").write_bytes(Path(api.ca).read_bytes())
            pod.volumes[str(account)] = SERVICE_ACCOUNT_DIR
            pod.scrape_headers = {"Authorization": f"Bearer {api.admin_token}"}
            pod.env |= {
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(api.port),
            }
        yield pod


@contextlib.contextmanager
def _node_pods(workdir: Path):
    """An API server holding MAX_PODS running pods on NODE."""
    from testbed.kube_apiserver import apiserver_on_new_etcd, pod_manifest  # noqa: PLC0415

    with apiserver_on_new_etcd(workdir) as api:
        base = "/api/v1/namespaces/default/pods"
        for i in range(MAX_PODS):
            name = f"p{i:03d}"
            api.admin.create(base, pod_manifest(name, node=NODE))
            api.admin.merge_patch(
                f"{base}/{name}/status",
                {"status": {"phase": "Running", "startTime": "2027-01-01T00:00:00Z"}},
            )
        yield api


def healthy(url: str, timeout: float = 60.0, headers: dict | None = None) -> None:
    """Wait until every collector succeeds and every watch is up, or fail: a row measured
    with a collector failing would be too light."""
    text = ""

    def all_up() -> bool:
        nonlocal text
        text = requests.get(url, timeout=10, headers=headers).text
        up = [
            s.value
            for family in parse_exposition(text)
            if family.name in ("kubescale_scrape_collector_success", "kubescale_kube_watch_up")
            for s in family.samples
        ]
        return bool(up) and all(v == 1 for v in up)

    if not wait_until(all_up, timeout):
        raise RuntimeError(f"{url}: a collector failing or a watch down:\n{text[-3000:]}")


def run_ours(flags: list[str], scrapes: int, log_dir: Path) -> Run:
    exporter = start_exporter(flags, log_dir)
    try:
        healthy(exporter.url + "/metrics")
        return scrape_process(exporter.proc.pid, exporter.url + "/metrics", scrapes)
    finally:
        exporter.proc.stop()


def run_in_image(pod: Pod, scrapes: int, log_dir: Path) -> Run:
    """The default pod as the DaemonSet runs it: the image testbed/image.py builds from this
    tree, unpacked (read-only root, its uid, no capabilities), the pod's host paths mounted
    read-only where deploy/ mounts them, in-cluster API access from a service account
    directory; hostNetwork, as here."""
    from testbed import container, image  # noqa: PLC0415  (only this row builds the image)

    with tempfile.TemporaryDirectory(prefix="kse-image-") as tmp:
        root = Path(tmp) / "root"
        config = container.unpack(image.build(), root)
        port = free_port()
        args = [*IMAGE_POD_FLAGS, f"--web.listen-address=127.0.0.1:{port}"]
        with open(log_dir / "exporter-image.log", "wb") as log:
            proc = container.start(root, config, args, env=pod.env, volumes=pod.volumes, stdout=log)
            try:
                wait_for_port(port)
                url = f"http://127.0.0.1:{port}/metrics"
                healthy(url, headers=pod.scrape_headers)
                return scrape_process(proc.pid, url, scrapes, pod.scrape_headers)
            finally:
                proc.terminate()
                proc.wait(timeout=30)


def run_binary(argv: list[str], port: int, scrapes: int, log: Path) -> Run:
    proc = Proc(argv, log)
    try:
        wait_for_port(port, proc=proc)
        return scrape_process(proc.pid, f"http://127.0.0.1:{port}/metrics", scrapes)
    finally:
        proc.stop()


def interpreter_alone() -> float:
    """RSS (MiB) of the interpreter that runs the exporter, importing nothing of ours."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(1.0)
        return rss_mib(proc.pid)[0]
    finally:
        proc.kill()
        proc.wait()


# What the default pod imports, in the order it does, grouped as it can be left out.
IMPORT_STEPS = (
    (
        "kube_scale_exporter: cli, the HTTP server (with ssl), the collectors' modules",
        "kube_scale_exporter.cli,kube_scale_exporter.web.routes",
    ),
    ("yaml (`imagepull`: the kubelet's config)", "yaml"),
    (
        "the Kubernetes client and informer, with their HTTP client",
        "kube_scale_exporter.kube.informer",
    ),
)
_IMPORT_COST = """\
import sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
before = rss()
for step in sys.argv[1:]:
    for name in step.split(","):
        __import__(name)
    now = rss()
    print(now - before)
    before = now
"""


def import_costs() -> list[tuple[str, float]]:
    """RSS (MiB) each of IMPORT_STEPS adds, one after the other in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_COST, *(modules for _, modules in IMPORT_STEPS)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    costs = [float(line) for line in done.stdout.split()]
    return [(label, cost) for (label, _), cost in zip(IMPORT_STEPS, costs, strict=True)]


def load_average() -> float:
    return os.getloadavg()[0]
