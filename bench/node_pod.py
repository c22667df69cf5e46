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
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import requests

from testbed.containerd_server import ContainerdServer
from testbed.exporter import start_exporter
from testbed.procs import Proc, cpu_seconds, rss_mib, wait_for_port

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


REPO = Path(__file__).resolve().parent.parent
LOG_DIR = REPO / "bench/results/logs"


def parse_args(doc: str, scrapes: int, argv: list[str] | None) -> argparse.Namespace:
    """The node benches' flags: --scrapes, --no-pod-watch, --node-exporter."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=scrapes)
    parser.add_argument(
        "--no-pod-watch",
        dest="pod_watch",
        action="store_false",
        help="leave out the pod watch (no API server)",
    )
    parser.add_argument("--node-exporter", help="node_exporter binary to run beside ours")
    args = parser.parse_args(argv)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    return args


@dataclass
class Pod:
    """What the default pod needs beside the exporter, and the flags that point at it."""

    containerd: ContainerdServer
    imagepull_flags: list[str]
    watch_flags: list[str] = field(default_factory=list)

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
        )
        if pod_watch:
            pod.watch_flags = stack.enter_context(_node_pods(workdir / "api"))
        yield pod


@contextlib.contextmanager
def _node_pods(workdir: Path) -> Iterator[list[str]]:
    """An API server holding MAX_PODS running pods on NODE; the flags of a watch on them."""
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
        kubeconfig = api.write_kubeconfig(str(workdir / "kubeconfig"))
        yield [f"--kube.kubeconfig={kubeconfig}", f"--kube.node-name={NODE}"]


@dataclass
class Run:
    """One server under `scrapes` sequential scrapes over one kept-alive connection."""

    scrapes: int
    cpu_s: float  # the server's user + system CPU over the scrapes
    wall_p50_ms: float
    rss_first: float  # MiB after the first scrape
    rss_last: float  # MiB after the last
    peak: float
    samples: int  # lines of the last answer that are samples

    @property
    def cpu_ms_per_scrape(self) -> float:
        return self.cpu_s * 1000 / self.scrapes


def scrape_process(pid: int, url: str, scrapes: int) -> Run:
    walls = []
    with requests.Session() as session:
        text = session.get(url, timeout=60).text
        first = rss_mib(pid)[0]
        cpu = cpu_seconds(pid)
        for _ in range(scrapes):
            started = time.perf_counter()
            reply = session.get(url, timeout=60)
            walls.append(time.perf_counter() - started)
            reply.raise_for_status()
            text = reply.text
        used = cpu_seconds(pid) - cpu
    rss, peak = rss_mib(pid)
    samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return Run(scrapes, used, statistics.median(walls) * 1000, first, rss, peak, samples)


def run_ours(flags: list[str], scrapes: int, log_dir: Path) -> Run:
    exporter = start_exporter(flags, log_dir)
    try:
        return scrape_process(exporter.proc.pid, exporter.url + "/metrics", scrapes)
    finally:
        exporter.proc.stop()


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
