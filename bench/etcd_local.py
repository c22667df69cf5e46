"""What watching the local etcd member costs, without the key and with it, beside the peer:
Prometheus scraping the member's metrics listener itself (kube-prometheus' way).

    python -m bench.etcd_local [--runs 20] [--versions 3.5.30,3.6,3.7]

For each etcd version (one member with a plain metrics listener, as kubeadm runs it):
requests to etcd per refresh, the median refresh time, and the series each way puts in
Prometheus. Prints, and writes to bench/results/etcd_local.md. Times on a shared 2-core
machine are noisy: read the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import requests

from kube_scale_exporter.cli import parse
from testbed.etcd_server import EtcdServer, etcd_binary, put_many
from testbed.golden import render, series_count
from testbed.metrics import collect
from testbed.ports import free_ports

RESULTS = os.path.join(os.path.dirname(__file__), "results", "etcd_local.md")


def collector(*flags):
    args, classes = parse(["--mode", "node", "--collector.disable-defaults", *flags])
    return classes[0](args)


def refresh_ms(c, runs: int) -> float:
    """Median time of a refresh (the cache is bypassed by a minimal --etcd.min-interval)."""
    samples = []
    for _ in range(runs):
        time.sleep(0.002)
        began = time.perf_counter()
        c.observe()
        samples.append((time.perf_counter() - began) * 1000)
    return statistics.median(samples)


def direct_scrape(url: str, runs: int) -> tuple[int, int, float]:
    """(samples, bytes, median ms) of a whole GET of the member's /metrics: what a
    Prometheus job on the metrics listener ingests each scrape."""
    s = requests.Session()
    s.trust_env = False
    samples, took = 0, []
    for _ in range(runs):
        began = time.perf_counter()
        body = s.get(url + "/metrics", timeout=10).text
        took.append((time.perf_counter() - began) * 1000)
    samples = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
    return samples, len(body.encode()), statistics.median(took)


def bench_version(version: str, runs: int, say) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        client, peer, metrics = free_ports(3)
        etcd = EtcdServer(
            tmp, version=version, client_port=client, peer_port=peer, metrics_port=metrics
        ).start()
        try:
            put_many(
                etcd.session(), etcd.client_url, ((f"/registry/pods/p{i}", "x") for i in range(200))
            )
            fast = ("--etcd.min-interval", "0.001")
            keyless = collector("--etcd.local", f"main={etcd.metrics_url}", *fast)
            full = collector(
                "--etcd.local",
                f"main={etcd.client_url}",
                "--etcd.local-access=full",
                "--etcd.metrics-url",
                f"main={etcd.metrics_url}",
                *fast,
            )
            rows = []
            for name, c in (("ours, key-less (default)", keyless), ("ours, full access", full)):
                ms = refresh_ms(c, runs)
                sent = sum(cl.requests_sent() for cl in c.clusters) / runs
                if c is full:
                    c.count_keys()  # its key series are part of what it costs
                series = series_count(render(collect(c)))
                rows.append((name, sent, ms, series))
                c.close()
            samples, size, ms = direct_scrape(etcd.metrics_url, runs)
            rows.append(("peer: Prometheus scraping :2381 itself", 1, ms, samples))
            say(f"\n### etcd {version} ({etcd_binary(version)})\n")
            say(
                "| way | requests per refresh | median refresh (ms) | series in Prometheus | series vs key-less |"
            )
            say("|---|---:|---:|---:|---:|")
            base = rows[0][3]
            for name, sent, ms, series in rows:
                say(f"| {name} | {sent:.3g} | {ms:.1f} | {series} | {series / base:.1f}x |")
            say(f"\nThe page read each refresh: {size / 1024:.0f} KiB.")
        finally:
            etcd.stop()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--versions", default="3.5.30,3.6,3.7")
    o = p.parse_args(argv)
    lines = []

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    say("# The local etcd member: key-less, full access, and a direct scrape\n")
    say(f"{o.runs} refreshes each; one member with 200 keys, a plain metrics listener.")
    for version in o.versions.split(","):
        bench_version(version, o.runs, say)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
