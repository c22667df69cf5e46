"""Benchmark of the etcd collector against real 3-member etcd 3.5.30, 3.6 and 3.7 clusters on
loopback.

    python -m bench.etcd [--keys 100000] [--resources 50] [--runs 5] [--versions 3.5.30,3.6,3.7]

Prints, and writes to bench/results/etcd.md: requests the collector sends to etcd per
scrape and per minute (per member), how long a status refresh and a cached scrape
take, and the key count per resource with 100k keys in 50 resources, side by side with
the peer way of finding the same numbers: listing every key (keys only, paged by 1000
like `etcdctl get --prefix --keys-only`) and counting them here.
"""

from __future__ import annotations

import argparse
import base64
import os
import platform
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from kube_scale_exporter.cli import parse
from kube_scale_exporter.etcd.answers import encode_key
from kube_scale_exporter.etcd.client import prefix_end
from testbed.etcd_server import etcd_binary, put_many, start_cluster
from testbed.metrics import collect

ROOT = Path(__file__).resolve().parent.parent
RESULTS = os.path.join(os.path.dirname(__file__), "results", "etcd.md")


def skewed(total: int, n: int) -> list[int]:
    """n resource sizes summing to total, the largest ~ a fifth (pods, events, ...)."""
    weights = [1 / (i + 1) for i in range(n)]
    sizes = [int(total * w / sum(weights)) for w in weights]
    sizes[0] += total - sum(sizes)
    return sizes


class Meter:
    """Counts requests and bytes received on a requests session, per URL host:port."""

    def __init__(self, session):
        self.requests: Counter[str] = Counter()
        self.bytes = 0
        self._lock = threading.Lock()
        session.hooks["response"].append(self._seen)

    def _seen(self, reply, *args, **kwargs):
        with self._lock:
            self.requests[reply.url.split("/")[2]] += 1
            if "/metrics" not in reply.url:  # streamed and cut short; not counted
                self.bytes += len(reply.content)

    def total(self) -> int:
        return sum(self.requests.values())

    def reset(self):
        with self._lock:
            self.requests.clear()
            self.bytes = 0


def peer_listing(
    session, url: str, prefix: bytes, page: int = 1000
) -> tuple[dict[str, int], int, int, float]:
    """Count keys per resource by listing every key, paged: (counts, requests, bytes, s)."""
    counts: Counter[str] = Counter()
    key, end = prefix, prefix_end(prefix)
    sent = received = 0
    began = time.perf_counter()
    while True:
        reply = session.post(
            url + "/v3/kv/range",
            json={
                "key": encode_key(key),
                "range_end": encode_key(end),
                "keys_only": True,
                "limit": page,
                "serializable": True,
            },
            timeout=30,
        )
        sent += 1
        received += len(reply.content)
        doc = reply.json()
        kvs = doc.get("kvs", [])
        for kv in kvs:
            counts[base64.b64decode(kv["key"])[len(prefix) :].split(b"/")[0].decode()] += 1
        if not doc.get("more"):
            break
        key = base64.b64decode(kvs[-1]["key"]) + b"\x00"
    return dict(counts), sent, received, time.perf_counter() - began


def median_ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:.1f} ms"


def bench_version(o, version: str, say) -> None:
    """Start a 3-member cluster of this etcd version, load it, and measure."""
    with tempfile.TemporaryDirectory(prefix="bench-etcd-") as work:
        members = start_cluster(work, size=3, version=version)
        try:
            sizes = skewed(o.keys, o.resources)
            names = [f"resource{i:02d}" for i in range(o.resources)]
            writer = members[0].session()
            began = time.perf_counter()
            put_many(
                writer,
                members[0].client_url,
                (
                    (f"/registry/{name}/ns{j % 20}/obj-{j:06d}", "v" * 64)
                    for name, n in zip(names, sizes, strict=True)
                    for j in range(n)
                ),
            )
            load_s = time.perf_counter() - began

            args, classes = parse(
                [
                    "--mode",
                    "cluster",
                    "--collector.disable-defaults",
                    "--etcd.cluster",
                    f"main={members[0].client_url}",
                ]
            )
            defaults = args.etcd_min_interval
            collector = classes[0](args)
            cluster = collector.clusters[0]
            meter = Meter(cluster.session)

            say(f"## etcd {version}\n")
            say(
                f"{etcd_binary(version)}, 3 members on loopback; "
                f"{o.keys:,} keys in {o.resources} resources (largest {sizes[0]:,}, smallest "
                f"{sizes[-1]:,}), 64-byte values, loaded in {load_s:.1f} s. Medians of {o.runs} runs.\n"
            )

            # Status refresh (what a scrape costs when the cache is older than --etcd.min-interval).
            first = time.perf_counter()
            collector.states()
            first_s = time.perf_counter() - first
            first_requests = dict(meter.requests)
            refresh, refresh_requests = [], None
            collector.min_interval = 0.0  # every call refreshes, to time refreshes
            for _ in range(o.runs):
                meter.reset()
                t = time.perf_counter()
                collector.states()
                refresh.append(time.perf_counter() - t)
                refresh_requests = dict(meter.requests)
            collector.min_interval = defaults
            cached = []
            meter.reset()
            for _ in range(o.runs * 20):
                t = time.perf_counter()
                collect(collector)
                cached.append(time.perf_counter() - t)
            assert meter.total() == 0, "a cached scrape must not reach etcd"

            # Key counts: the collector's walk vs the peer listing.
            walk, walk_requests, walk_bytes = [], 0, 0
            for _ in range(o.runs):
                meter.reset()
                t = time.perf_counter()
                collector.count_keys()
                walk.append(time.perf_counter() - t)
                walk_requests, walk_bytes = meter.total(), meter.bytes
            ours = collector.keys()["main"][0]
            peer = [
                peer_listing(writer, members[0].client_url, b"/registry/") for _ in range(o.runs)
            ]
            peer_counts, peer_requests, peer_bytes, _ = peer[0]
            assert ours == {k: v for k, v in peer_counts.items()}, "the two ways disagree"
            peer_s = [p[3] for p in peer]

            name_of = {m.client_url.split("/")[2]: m.name for m in members}

            def by_member(counts):
                return ", ".join(
                    f"{name_of[h]}: {n}"
                    for h, n in sorted(counts.items(), key=lambda kv: name_of[kv[0]])
                )

            say("### Requests to etcd\n")
            say("| what | requests | note |")
            say("|---|---|---|")
            say(
                f"| status refresh, 3 members | {sum(refresh_requests.values())} ({by_member(refresh_requests)}) | member list + "
                f"alarm list on one endpoint, Status and /metrics (quota, disk latency, reads) "
                f"on each member |"
            )
            say(
                f"| first refresh | {sum(first_requests.values())} ({by_member(first_requests)}) | "
                f"the same requests, new connections |"
            )
            say(
                "| scrape served from cache | 0 | any number of scrapers within --etcd.min-interval |"
            )
            say(
                f"| key count, {o.resources} resources | {walk_requests} | 1 member list + 2 per resource + 1 |"
            )
            refreshes_per_min = 60 / args.etcd_min_interval
            walks_per_min = 60 / args.etcd_keys_interval
            busiest = max(refresh_requests.values())
            say("")
            say(
                f"Per minute at the defaults (--etcd.min-interval {args.etcd_min_interval:g}s, "
                f"--etcd.keys-interval {args.etcd_keys_interval:g}s), whatever the number of "
                f"Prometheus replicas: at most {refreshes_per_min:g} refreshes, so "
                f"{refreshes_per_min:g} Status and {refreshes_per_min:g} /metrics requests per "
                f"member, plus "
                f"{refreshes_per_min * 2:g} member/alarm list requests on the endpoint that "
                f"answers them (busiest member: {busiest * refreshes_per_min:g}/min); key counting adds "
                f"{walk_requests * walks_per_min:.1f}/min on that endpoint. Without the cache, "
                f"2 Prometheus replicas "
                f"scraping every 15 s would send {2 * 4 * sum(refresh_requests.values())} requests a minute "
                f"instead of {4 * sum(refresh_requests.values())}.\n"
            )

            say("### Time\n")
            say("| what | ours | peer | ratio |")
            say("|---|---|---|---|")
            say(f"| first status refresh | {first_s * 1000:.1f} ms | | |")
            say(
                f"| status refresh, 3 members (Status and /metrics in parallel) | "
                f"{median_ms(refresh)} | | |"
            )
            say(f"| scrape from cache | {statistics.median(cached) * 1e6:.0f} us | | |")
            say(
                f"| key count per resource, {o.keys:,} keys | {median_ms(walk)}, {walk_requests} requests, "
                f"{walk_bytes / 1024:.0f} KiB received | {median_ms(peer_s)}, {peer_requests} requests, "
                f"{peer_bytes / 1024:.0f} KiB received (list all keys, pages of 1000) | "
                f"peer/ours: {statistics.median(peer_s) / statistics.median(walk):.2f}x the time, "
                f"{peer_bytes / max(walk_bytes, 1):.0f}x the bytes |"
            )
            collector.close()
        finally:
            for m in members:
                m.stop()


def main(argv=None) -> int:
    opts = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    opts.add_argument("--keys", type=int, default=100_000)
    opts.add_argument("--resources", type=int, default=50)
    opts.add_argument("--runs", type=int, default=5)
    opts.add_argument("--versions", default="3.5.30,3.6,3.7", help="etcd versions, comma-separated")
    o = opts.parse_args(argv)
    lines = []

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    say("# etcd collector benchmark\n")
    say(
        f"{platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} cores. "
        "Status and scrape times are medians; other work on the machine moves them by ~2x.\n"
    )
    for version in o.versions.split(","):
        bench_version(o, version, say)
        say()
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"\nwrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
