"""Load: many concurrent scrapers against a real exporter process, with a peer beside it.

    python -m bench.load [--duration 60] [--concurrency 20] [--neighbors 100000]
                         [--active-pulls 10] [--peer node_exporter] [-- EXTRA EXPORTER FLAGS]

Fills a throwaway network namespace with PERMANENT neighbor entries (they count in the
host-global table but never against gc_thresh3), starts `python -m kube_scale_exporter` in node mode
with the extra flags, and runs `--concurrency` keep-alive scrapers for `--duration`
seconds. With `--active-pulls N` it also starts a real containerd, a docker-registry and a
throttling proxy, and keeps N layer downloads in progress (`ctr content fetch`) so the
imagepull collector has live ingests to report; with 0 the imagepull collector is off. A
scrape counts as failed when it is not HTTP 200 or when any collector reports
kubescale_scrape_collector_success 0. It prints scrapes, failures, p50/p99 latency, CPU seconds per scrape and RSS at
start, after 10,000 scrapes and at the end; with `--peer node_exporter` it runs
node_exporter (testbed/node_exporter.py: `--node-exporter`, $NODE_EXPORTER_BIN or Debian
sid's, the current release; its arp collector alone, inside the namespace) under the same
load for comparison, and names the version that ran.
Results go to bench/results/load.md as well as stdout.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from testbed import node_exporter
from testbed.exporter import exporter_argv
from testbed.netns import NetNS, neighbor_adds
from testbed.ports import free_port
from testbed.procs import Proc, cpu_seconds, rss_mib, wait_for_port
from testbed.throttle_proxy import ThrottleProxy
from testbed.registry_server import RegistryServer
from testbed.containerd_server import ContainerdServer

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "bench" / "results" / "load.md"
FAILED_COLLECTOR = re.compile(rb'kubescale_scrape_collector_success\{collector="([^"]+)"\} 0\.0')
LAYERS_PER_IMAGE = 5
LAYER_SIZE = 4 << 20
PULL_RATE = 16 << 10  # bytes/s per connection: a 4 MiB layer stays in progress for minutes


class Load:
    """`concurrency` threads scraping over keep-alive connections until `duration` ends."""

    def __init__(self, port: int, path: str, pid: int, concurrency: int, duration: float):
        self.port, self.path, self.pid = port, path, pid
        self.concurrency, self.duration = concurrency, duration
        self.latencies: list[float] = []
        self.failures: dict[str, int] = {}
        self.rss_at_10k: float | None = None
        self._lock = threading.Lock()

    def _worker(self, stop_at: float):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        while time.monotonic() < stop_at:
            start = time.monotonic()
            try:
                conn.request(
                    "GET", self.path, headers={"X-Prometheus-Scrape-Timeout-Seconds": "10"}
                )
                reply = conn.getresponse()
                body = reply.read()
                outcome = None if reply.status == 200 else f"HTTP {reply.status}"
                failed = FAILED_COLLECTOR.search(body) if outcome is None else None
                if failed:
                    outcome = f"collector {failed.group(1).decode()} failed"
            except (OSError, http.client.HTTPException) as exc:
                outcome = type(exc).__name__
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            took = time.monotonic() - start
            with self._lock:
                if outcome:
                    self.failures[outcome] = self.failures.get(outcome, 0) + 1
                else:
                    self.latencies.append(took)
                    if len(self.latencies) == 10_000:
                        self.rss_at_10k = rss_mib(self.pid)[0]
        conn.close()

    def run(self) -> dict:
        rss_start = rss_mib(self.pid)[0]
        cpu_start = cpu_seconds(self.pid)
        stop_at = time.monotonic() + self.duration
        threads = [
            threading.Thread(target=self._worker, args=(stop_at,)) for _ in range(self.concurrency)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        scrapes = len(self.latencies)
        lat = sorted(self.latencies)
        return {
            "scrapes": scrapes,
            "failed": sum(self.failures.values()),
            "failures": dict(self.failures),
            "p50_ms": 1000 * statistics.median(lat) if lat else float("nan"),
            "p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))] if lat else float("nan"),
            "cpu_per_scrape_ms": 1000 * (cpu_seconds(self.pid) - cpu_start) / max(1, scrapes),
            "rss_start": rss_start,
            "rss_10k": self.rss_at_10k,
            "rss_end": rss_mib(self.pid)[0],
        }


class ActivePulls:
    """Real containerd + registry + throttling proxy with `n` layer downloads in progress."""

    def __init__(self, workdir: str, n: int):

        self._started = []
        try:
            self.containerd = self._keep(ContainerdServer(f"{workdir}/cd").start())
            registry = self._keep(RegistryServer(f"{workdir}/reg").start())
            proxy = self._keep(ThrottleProxy(workdir, registry.port, PULL_RATE))
            for i in range(max(1, n // LAYERS_PER_IMAGE)):
                repo = f"load{i}-{os.urandom(3).hex()}"
                registry.push_image(repo, "v1", [LAYER_SIZE] * LAYERS_PER_IMAGE)
                self._keep(
                    self.containerd.fetch(f"{proxy.host}/{repo}:v1", f"{workdir}/fetch{i}.log")
                )
            self.active = self.containerd.layers_downloading(n)
        except BaseException:
            self.stop()
            raise

    def _keep(self, thing):
        self._started.append(thing)
        return thing

    def flags(self) -> list[str]:
        return ["--containerd.address", self.containerd.address]

    def stop(self) -> None:
        for thing in reversed(self._started):
            thing.stop()


def measure(name: str, argv: list[str], port: int, args, ns: NetNS, workdir: str) -> dict:
    """Run the server inside the namespace and load it from there (node_exporter's arp
    collector counts the entries of its own namespace)."""
    # `ip netns exec` execs the command in place, so the PID is the server's.
    proc = Proc(["ip", "netns", "exec", ns.name, *argv], os.path.join(workdir, f"{name}.log"))
    try:
        ns.run(wait_for_port, port, "127.0.0.1", 30.0, proc)
        # Threads started by a thread inside the namespace stay in it.
        result = ns.run(Load(port, "/metrics", proc.pid, args.concurrency, args.duration).run)
        result["name"] = name
        return result
    finally:
        proc.stop()


def table(rows: list[dict]) -> str:
    head = (
        "| target | scrapes | failed | p50 ms | p99 ms | CPU ms/scrape | RSS start MiB "
        "| RSS @10k MiB | RSS end MiB |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        at10k = f"{r['rss_10k']:.1f}" if r["rss_10k"] is not None else "n/a (<10k)"
        cpu = f"{r['cpu_per_scrape_ms']:.2f}" if r["scrapes"] else "n/a (no scrape served)"
        lines.append(
            f"| {r['name']} | {r['scrapes']} | {r['failed']} | {r['p50_ms']:.2f} | "
            f"{r['p99_ms']:.2f} | {cpu} | {r['rss_start']:.1f} | "
            f"{at10k} | {r['rss_end']:.1f} |"
        )
    return head + "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--neighbors", type=int, default=100_000)
    parser.add_argument(
        "--active-pulls",
        type=int,
        default=10,
        help="layer downloads kept in progress in a real containerd (0: imagepull off)",
    )
    parser.add_argument("--peer", choices=["none", "node_exporter"], default="node_exporter")
    parser.add_argument("--node-exporter", help="the peer's binary (default: see testbed)")
    parser.add_argument("extra", nargs="*", help="flags passed to the exporter (after --)")
    args = parser.parse_args()
    peer_bin = peer_version = None
    if args.peer == "node_exporter":
        peer_bin = node_exporter.binary(args.node_exporter)
        peer_version = node_exporter.version(peer_bin)

    rows = []
    pulls = None
    workdir = tempfile.mkdtemp(prefix="load-", dir="/tmp")  # short: containerd's socket path
    try:
        with NetNS("kse-load") as ns:
            ns.batch(neighbor_adds(args.neighbors, "ipv4", "permanent"))
            extra = list(args.extra)
            if args.active_pulls:
                pulls = ActivePulls(workdir, args.active_pulls)
                extra += pulls.flags()
            else:
                extra.append("--no-collector.imagepull")
            port = free_port()
            rows.append(
                measure("kube-scale-exporter", exporter_argv(port, extra), port, args, ns, workdir)
            )
            active_after = pulls.containerd.layers_downloading(0, timeout=0) if pulls else 0
            if pulls:
                pulls.stop()
                pulls = None
            if args.peer == "node_exporter":
                port = free_port()
                argv = node_exporter.argv(
                    peer_bin, port, ["--collector.disable-defaults", "--collector.arp"]
                )
                rows.append(measure("node_exporter (arp)", argv, port, args, ns, workdir))
    finally:
        if pulls:
            pulls.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    ours = rows[0]
    pulls_text = (
        f", {args.active_pulls} layer downloads in progress in a real containerd "
        f"({active_after} still active at the end)"
        if args.active_pulls
        else ""
    )
    report = (
        f"# Load: {args.concurrency} concurrent scrapers for {args.duration:.0f} s, "
        f"{args.neighbors} neighbor entries{pulls_text}\n\n"
        f"Exporter flags: `{' '.join(extra)}`; machine: {os.cpu_count()} cores, "
        f"shared, load average {os.getloadavg()[0]:.1f} at the end."
        + (f" Peer: `{peer_version}` ({peer_bin})." if peer_version else "")
        + "\n\n"
        + table(rows)
    )
    if len(rows) == 2 and rows[1]["scrapes"]:
        peer = rows[1]
        report += (
            f"\nRatios (ours / node_exporter): p50 {ours['p50_ms'] / peer['p50_ms']:.2f}, "
            f"p99 {ours['p99_ms'] / peer['p99_ms']:.2f}, CPU per scrape "
            f"{ours['cpu_per_scrape_ms'] / peer['cpu_per_scrape_ms']:.2f}, scrapes served "
            f"{ours['scrapes'] / peer['scrapes']:.2f}\n"
        )
    if ours["failures"]:
        report += f"\nFailures: {ours['failures']}\n"
    print(report)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(report)
    return 1 if ours["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
