"""A soak under churn: the exporter's resources over time, in each of its modes.

    flock -w 5 /var/lock/kse-bigrun.lock python -m bench.soak [--minutes 60]

On this host: a real kube-apiserver on its own etcd, a real containerd pulling from a
local docker-registry through a throttling proxy, and three exporters scraped every
SCRAPE_SECONDS as Prometheus would:
- node mode, imagepull reading containerd's socket (`--image-pull.source=socket`);
- node mode, imagepull reading the ingest directory (the default pod's source);
- cluster mode, every cluster collector (balloon, imagepull_events, etcd).

Meanwhile the churn: a pod on the node created every CHURN_SECONDS, its container
waiting for an image, and the pod of KEEP_PODS churns ago deleted, with a Pulled event
for it; an image of fresh layers fetched every PULL_SECONDS (`ctr content fetch`: the
ingests both node exporters read); a balloon preemption cycle every BALLOON_SECONDS (two
balloons Running, one marked DisruptionTarget/PreemptionByScheduler by hand, as the
scheduler does, then both deleted); an etcd defragmentation every DEFRAG_SECONDS.

Every SAMPLE_SECONDS, for each exporter: RSS, open files, threads, its TCP connections to
the API server (its list and watch requests: a leaked watch shows here) and the watches
it reports up. No kubelet and no scheduler run (pods are API objects, their statuses
written by hand), so this is the exporter's side of the e2e cluster's soak, not the
cluster's. Results in bench/results/soak.md and stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import secrets
import statistics
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import requests

from bench.imagepull import pod_status
from testbed.containerd_server import ContainerdServer
from testbed.exporter import start_exporter
from testbed.kube_apiserver import apiserver_on_new_etcd, pod_manifest
from testbed.metrics import parse_exposition
from testbed.procs import Proc, rss_mib
from testbed.registry_server import RegistryServer
from testbed.throttle_proxy import ThrottleProxy

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "soak.md"
NODE = "soak-node"
NS = "default"
SCRAPE_SECONDS = 5.0
SAMPLE_SECONDS = 30.0
CHURN_SECONDS = 3.0
KEEP_PODS = 10
PULL_SECONDS = 20.0
BALLOON_SECONDS = 120.0
DEFRAG_SECONDS = 300.0
PULL_RATE = 4 << 20  # bytes per second and connection through the proxy
LAYERS = (6 << 20, 2 << 20)
KUBELET_CONFIG = (
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
    "serializeImagePulls: false\n"
)


FIGURES = (
    ("rss_mib", "RSS, MiB"),
    ("fds", "open files"),
    ("threads", "threads"),
    ("api_conns", "API connections"),
    ("watches_up", "watches up"),
)


def samples_named(text: str, name: str) -> list:
    """The samples called `name` in a scrape's text."""
    return [s for family in parse_exposition(text) for s in family.samples if s.name == name]


def sample_every(minutes: float, take) -> None:
    """take(elapsed seconds) every SAMPLE_SECONDS for `minutes`, at the start and at the
    end included; it returns what to print beside the minute."""
    began = time.monotonic()
    end = began + minutes * 60
    while True:
        elapsed = time.monotonic() - began
        print(f"{elapsed / 60:5.1f} min {take(elapsed)}", flush=True)
        if time.monotonic() >= end:
            return
        time.sleep(min(SAMPLE_SECONDS, max(0.0, end - time.monotonic())))


def every(stop: threading.Event, counts: dict, period: float, step) -> None:
    """step() every `period` seconds, give or take a fifth, until `stop`; a failure is
    counted in counts["errors"] and shown, and the soak goes on."""
    while not stop.wait(period * random.uniform(0.8, 1.2)):
        try:
            step()
        except Exception as exc:  # noqa: BLE001  (counted and shown: the soak goes on)
            counts["errors"] += 1
            print(f"churn {step.__name__}: {type(exc).__name__}: {exc}"[:300], flush=True)


def report_text(title, setting, counts, failures, rows, figures, more="") -> str:
    """A soak's report: its title, where it ran, the churn done and the failed scrapes,
    `more`, then the tables."""
    summary = (
        f"{setting} Churn done: "
        + ", ".join(f"{v} {k}" for k, v in counts.items())
        + f". Scrapes every {SCRAPE_SECONDS:g} s; failed scrapes: "
        + (", ".join(f"{name}: {n}" for name, n in failures.items()) or "none")
        + "."
        + more
    )
    return "\n".join([f"# {title}", "", summary, "", *tables(rows, figures)]) + "\n"


def tables(rows: dict[str, list[tuple[float, dict]]], figures) -> list[str]:
    """The report's two tables: each figure's first, median, last and largest value per
    exporter, then every sample."""

    def fmt(value) -> str:
        return f"{value:.1f}" if isinstance(value, float) else f"{value:g}"

    lines = [
        "| exporter | figure | first | median | last | max | last - first |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, samples in rows.items():
        for key, title in figures:
            values = [s[key] for _, s in samples]
            lines.append(
                f"| {name} | {title} | {fmt(values[0])} | {fmt(statistics.median(values))} | "
                f"{fmt(values[-1])} | {fmt(max(values))} | {fmt(values[-1] - values[0])} |"
            )
    lines += [
        "",
        "Samples (minute: " + " / ".join(title for _, title in figures) + "):",
        "",
        "| minute | " + " | ".join(rows) + " |",
        "|---:|" + "---|" * len(rows),
    ]
    first = next(iter(rows.values()))
    for i, (elapsed, _) in enumerate(first):
        cells = [" / ".join(fmt(r[i][1][key]) for key, _ in figures) for r in rows.values()]
        lines.append(f"| {elapsed / 60:.1f} | " + " | ".join(cells) + " |")
    return lines


def exporters(work: Path, api, containerd: ContainerdServer) -> dict[str, list[str]]:
    kubeconfig = api.write_kubeconfig(str(work / "kubeconfig"))
    kubelet = work / "kubelet.yaml"
    kubelet.write_text(KUBELET_CONFIG)
    ingest = Path(containerd.workdir, "root", "io.containerd.content.v1.content", "ingest")
    ingest.mkdir(parents=True, exist_ok=True)
    node = [
        "--mode=node",
        "--collector.disable-defaults",
        "--collector.imagepull",
        f"--kube.kubeconfig={kubeconfig}",
        f"--kube.node-name={NODE}",
        f"--containerd.config={containerd.config}",
        f"--kubelet.config-file={kubelet}",
    ]
    return {
        "node, socket": [
            *node,
            "--image-pull.source=socket",
            f"--containerd.address={containerd.address}",
        ],
        "node, ingest": [*node, "--image-pull.source=ingest", f"--containerd.ingest-dir={ingest}"],
        "cluster": [
            "--mode=cluster",
            f"--kube.kubeconfig={kubeconfig}",
            "--balloon.selector=run=overprovisioning",
            "--collector.balloon",
            "--collector.imagepull_events",
            "--collector.etcd",
            f"--etcd.cluster=main={api.etcd.client_url}",
        ],
    }


def resources(pid: int, api_ports: set[int], text: str) -> dict:
    """What one exporter process holds now; `text` is a scrape of it just taken."""
    fds = os.listdir(f"/proc/{pid}/fd")
    sockets = set()
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                sockets.add(target[8:-1])
    to_api = 0
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port in api_ports and fields[3] == "01" and fields[9] in sockets:
                    to_api += 1
    with open(f"/proc/{pid}/status") as f:
        threads = int(next(line.split()[1] for line in f if line.startswith("Threads:")))
    watches = sum(s.value for s in samples_named(text, "kubescale_kube_watch_up"))
    return {
        "rss_mib": rss_mib(pid)[0],
        "fds": len(fds),
        "threads": threads,
        "api_conns": to_api,
        "watches_up": int(watches),
    }


class Churn:
    """The pods, pulls, balloons and defragmentations, each on its own thread."""

    def __init__(self, api, registry, proxy, containerd, work: Path):
        self.api, self.registry, self.proxy = api, registry, proxy
        self.containerd, self.work = containerd, work
        self.stop = threading.Event()
        self.counts = {"pods": 0, "pulls": 0, "balloon cycles": 0, "defrags": 0, "errors": 0}
        self._threads = [
            threading.Thread(target=every, args=(self.stop, self.counts, period, step), daemon=True)
            for period, step in (
                (CHURN_SECONDS, self._pod),
                (PULL_SECONDS, self._pull),
                (BALLOON_SECONDS, self._balloons),
                (DEFRAG_SECONDS, self._defrag),
            )
        ]
        self._pods: list[str] = []
        self._fetches: list[Proc] = []

    def start(self):
        self.api.admin.create(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "overprovisioning"},
                "value": -1,
            },
        )
        for t in self._threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self._threads:
            t.join(60)
        for fetch in self._fetches:
            fetch.stop()

    def _pod(self):
        name = f"churn-{secrets.token_hex(4)}"
        base = f"/api/v1/namespaces/{NS}/pods"
        image = f"{self.proxy.host}/churn/{name}:v1"
        pod = pod_manifest(name, node=NODE)
        pod["spec"]["containers"][0]["image"] = image
        self.api.admin.create(base, pod)
        waiting = {"waiting": {"reason": "ContainerCreating"}}
        self.api.admin.merge_patch(f"{base}/{name}/status", pod_status(image, waiting))
        self._pods.append(name)
        self.counts["pods"] += 1
        if len(self._pods) > KEEP_PODS:
            old = self._pods.pop(0)
            self.api.admin.delete(f"{base}/{old}")
            now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            self.api.admin.create(
                f"/api/v1/namespaces/{NS}/events",
                {
                    "metadata": {"name": f"{old}.pulled"},
                    "involvedObject": {"kind": "Pod", "namespace": NS, "name": old},
                    "reason": "Pulled",
                    "type": "Normal",
                    "message": f'Successfully pulled image "{image}" in 2.1s (4.3s including '
                    "waiting). Image size: 8388608 bytes.",
                    "source": {"component": "kubelet", "host": NODE},
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "count": 1,
                },
            )

    def _pull(self):
        for done in [f for f in self._fetches if not f.alive()]:
            done.stop()  # reaped, its log closed
            self._fetches.remove(done)
        repo = f"soak{secrets.token_hex(4)}"
        self.registry.push_image(repo, "v1", list(LAYERS))
        self._fetches.append(
            self.containerd.fetch(f"{self.proxy.host}/{repo}:v1", self.work / f"{repo}.log")
        )
        self.counts["pulls"] += 1

    def _balloons(self):
        base = f"/api/v1/namespaces/{NS}/pods"
        names = [f"balloon-{secrets.token_hex(3)}" for _ in range(2)]
        for name in names:
            self.api.admin.create(
                base,
                pod_manifest(
                    name,
                    node=NODE,
                    labels={"run": "overprovisioning"},
                    requests={"cpu": "100m"},
                    priority_class="overprovisioning",
                ),
            )
            self.api.admin.merge_patch(f"{base}/{name}/status", {"status": {"phase": "Running"}})
        self.stop.wait(10)
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "soak: preempted",
        }
        self.api.admin.merge_patch(
            f"{base}/{names[0]}/status", {"status": {"conditions": [condition]}}
        )
        for name in names:
            self.api.admin.delete(f"{base}/{name}")
        self.counts["balloon cycles"] += 1

    def _defrag(self):
        reply = requests.post(
            f"{self.api.etcd.client_url}/v3/maintenance/defragment", json={}, timeout=60
        )
        reply.raise_for_status()
        self.counts["defrags"] += 1


def scrape_loop(urls: list[str], stop: threading.Event, failures: dict):
    with requests.Session() as session:
        while not stop.wait(SCRAPE_SECONDS):
            for url in urls:
                try:
                    session.get(url, timeout=10).raise_for_status()
                except requests.RequestException:
                    failures[url] = failures.get(url, 0) + 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    args = parser.parse_args()
    started_at = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows: dict[str, list[tuple[float, dict]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="soak-", dir="/tmp") as tmp,
        contextlib.ExitStack() as stack,
    ):
        work = Path(tmp)
        api = stack.enter_context(apiserver_on_new_etcd(work / "api"))
        registry = RegistryServer(f"{work}/registry").start()
        stack.callback(registry.stop)
        proxy = ThrottleProxy(str(work), registry.port, PULL_RATE)
        stack.callback(proxy.stop)
        containerd = ContainerdServer(f"{work}/cd").start()
        stack.callback(containerd.wipe)
        procs = {}
        for name, flags in exporters(work, api, containerd).items():
            exp = start_exporter(flags, work, timeout=30)
            stack.callback(exp.proc.stop)
            procs[name] = exp
            rows[name] = []
        api_port = int(api.server.rsplit(":", 1)[1])
        churn = Churn(api, registry, proxy, containerd, work)
        churn.start()
        stack.callback(churn.finish)
        stop, failures = threading.Event(), {}
        scraper = threading.Thread(
            target=scrape_loop,
            args=([e.url + "/metrics" for e in procs.values()], stop, failures),
            daemon=True,
        )
        scraper.start()
        stack.callback(stop.set)

        def take(elapsed: float) -> str:
            for name, exp in procs.items():
                if not exp.proc.alive():
                    raise SystemExit(f"{name} exited:\n{exp.proc.log_tail()}")
                text = requests.get(exp.url + "/metrics", timeout=30).text
                rows[name].append((elapsed, resources(exp.proc.pid, {api_port}, text)))
            return f"{churn.counts} " + "; ".join(f"{n}: {r[-1][1]}" for n, r in rows.items())

        sample_every(args.minutes, take)
        counts = dict(churn.counts)
        text = requests.get(procs["cluster"].url + "/metrics", timeout=30).text
        counts["preemptions counted"] = int(
            sum(s.value for s in samples_named(text, "kubescale_balloon_preemptions_total"))
        )
    text = report(args.minutes, started_at, rows, counts, failures)
    print(text)
    RESULTS.write_text(text)
    return 0


def report(minutes, started_at, rows, counts, failures) -> str:
    return report_text(
        f"Soak under churn, {minutes:g} minutes (`python -m bench.soak --minutes {minutes:g}`)",
        f"Started {started_at} on the shared 2-core machine.",
        counts,
        failures,
        rows,
        FIGURES,
    )


if __name__ == "__main__":
    raise SystemExit(main())
