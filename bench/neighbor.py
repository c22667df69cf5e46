"""Neighbor collectors at 100,000 entries, next to node_exporter's arp collector.

A throwaway namespace gets a veth link and 100,000 PERMANENT IPv4 entries (PERMANENT so
that the host's shared table, gc_thresh3 1024 by default, never overflows). In it run:
  - kube-scale-exporter with only the O(1) `neighbor` collector,
  - kube-scale-exporter with `neighbor` and the `neighbor_gc` collector (table read + dump),
  - Debian's prometheus-node-exporter with only --collector.arp (it reads /proc/net/arp),
each on a free loopback port of the namespace, scraped from inside it. Prints scrape wall
times, each collector's own duration, ratios and the exporter's RSS, writes
bench/results/neighbor.md, and deletes the namespace. Run as root: python -m bench neighbor
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import requests

from testbed.exporter import exporter_argv
from testbed.metrics import parse_exposition, sample
from testbed.netns import NetNS, neighbor_adds
from testbed.ports import free_port
from testbed.procs import Proc, rss_mib, wait_for_port

ENTRIES = 100_000
SCRAPES = 30
NODE_EXPORTER_SCRAPES = 3
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench/results/neighbor.md"
TARGET_O1_MS, TARGET_DUMP_MS, TARGET_RSS_MIB = 5, 150, 40


def scrape_many(url: str, n: int, collector_metric: str, collector: str):
    """Wall time of each scrape and the collector's own reported duration (seconds)."""
    walls, durations = [], []
    with requests.Session() as session:
        for _ in range(n):
            start = time.perf_counter()
            text = session.get(url, timeout=120).text
            walls.append(time.perf_counter() - start)
            durations.append(sample(parse_exposition(text), collector_metric, collector=collector))
    return walls, durations, text


def start_in(ns: NetNS, argv: list[str], port: int, log: Path) -> Proc:
    proc = Proc(["ip", "netns", "exec", ns.name, *argv], log, cwd=REPO)
    ns.run(wait_for_port, port, "127.0.0.1", 30.0, proc)
    return proc


def median_ms(values) -> float:
    return statistics.median(values) * 1000


def max_ms(values) -> float:
    return max(values) * 1000


def main() -> None:
    load_before = os.getloadavg()[0]
    logdir = REPO / "bench/results/logs"
    logdir.mkdir(parents=True, exist_ok=True)
    rows, procs = [], []
    with NetNS("kst-bench") as ns:
        start = time.perf_counter()
        ns.batch(neighbor_adds(ENTRIES, "ipv4", "permanent"))
        fill_s = time.perf_counter() - start
        try:
            runs = {}
            for flags, collector in (
                (["--collector.neighbor"], "neighbor"),
                (["--collector.neighbor", "--collector.neighbor_gc"], "neighbor_gc"),
            ):
                port = free_port()
                proc = start_in(
                    ns,
                    exporter_argv(port, ["--collector.disable-defaults", *flags]),
                    port,
                    logdir / f"exporter-{collector}.log",
                )
                procs.append(proc)
                walls, durations, text = ns.run(
                    scrape_many,
                    f"http://127.0.0.1:{port}/metrics",
                    SCRAPES,
                    "kubescale_scrape_collector_duration_seconds",
                    collector,
                )
                runs[collector] = (walls, durations, rss_mib(proc.pid), text)
                proc.stop()
            port = free_port()
            node = start_in(
                ns,
                [
                    "prometheus-node-exporter",
                    "--collector.disable-defaults",
                    "--collector.arp",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                port,
                logdir / "node-exporter.log",
            )
            procs.append(node)
            nwalls, ndurations, ntext = ns.run(
                scrape_many,
                f"http://127.0.0.1:{port}/metrics",
                NODE_EXPORTER_SCRAPES,
                "node_scrape_collector_duration_seconds",
                "arp",
            )
            node_rss = rss_mib(node.pid)
            node.stop()
        finally:
            for p in procs:
                p.stop()
    node_entries = sample(parse_exposition(ntext), "node_arp_entries", device="v0")
    our_entries = sample(
        parse_exposition(runs["neighbor"][3]), "kubescale_neighbor_entries", family="ipv4"
    )
    eligible = sample(
        parse_exposition(runs["neighbor_gc"][3]),
        "kubescale_neighbor_gc_eligible_entries",
        family="ipv4",
    )

    node_ms = median_ms(ndurations)
    for label, key in (
        ("kube-scale-exporter, `neighbor` only (O(1))", "neighbor"),
        ("kube-scale-exporter, `neighbor_gc` (table read + dump, with `neighbor`)", "neighbor_gc"),
    ):
        walls, durations, (rss, hwm), _ = runs[key]
        rows.append(
            (
                label,
                median_ms(walls),
                max_ms(walls),
                min(durations) * 1000,
                median_ms(durations),
                max_ms(durations),
                node_ms / median_ms(durations),
                rss,
                hwm,
            )
        )
    rows.append(
        (
            "prometheus-node-exporter 1.5 `--collector.arp`",
            median_ms(nwalls),
            max_ms(nwalls),
            min(ndurations) * 1000,
            node_ms,
            max_ms(ndurations),
            1.0,
            *node_rss,
        )
    )

    o1 = median_ms(runs["neighbor"][1])
    dump = median_ms(runs["neighbor_gc"][1])
    worst_rss = max(runs[k][2][1] for k in runs)
    lines = [
        "# Neighbor collectors at 100,000 entries",
        "",
        f"`python -m bench neighbor` on {platform.node()} ({platform.machine()}, kernel "
        f"{platform.release()}, Python {platform.python_version()}), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        f"A throwaway namespace with {ENTRIES:,} PERMANENT IPv4 entries on a veth link "
        f"(added in {fill_s:.1f} s); every exporter runs and is scraped inside it. "
        f"{SCRAPES} scrapes per kube-scale-exporter run, {NODE_EXPORTER_SCRAPES} for "
        "node_exporter (each takes seconds).",
        "",
        "| exporter / collector | scrape median ms | scrape max ms | collector min ms "
        "| collector median ms | collector max ms | scrape - collector ms "
        "| node_exporter arp / this | RSS MiB | peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {r[0]} | {r[1]:.1f} | {r[2]:.1f} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.2f} "
            f"| {r[1] - r[4]:.1f} | {r[6]:,.0f}x | {r[7]:.1f} | {r[8]:.1f} |"
            for r in rows
        ),
        "",
        "Entries each one reports: kube-scale-exporter "
        f'`kubescale_neighbor_entries{{family="ipv4"}}` {our_entries:,.0f} (the host\'s whole '
        f'table), `kubescale_neighbor_gc_eligible_entries{{family="ipv4"}}` {eligible:,.0f} '
        f"(the host's entries less this namespace's {ENTRIES:,} PERMANENT ones); node_exporter "
        f'`node_arp_entries{{device="v0"}}` '
        f"{node_entries:,.0f} (this namespace only, IPv4 only).",
        "",
        "Targets: "
        + "; ".join(
            [
                f"O(1) collector <= {TARGET_O1_MS} ms: {o1:.2f} ms "
                f"{'met' if o1 <= TARGET_O1_MS else 'MISSED'}",
                f"dump collector <= {TARGET_DUMP_MS} ms: {dump:.1f} ms "
                f"{'met' if dump <= TARGET_DUMP_MS else 'MISSED'}",
                f"faster than node_exporter's arp collector: {node_ms / dump:,.0f}x (dump), "
                f"{node_ms / o1:,.0f}x (O(1)) {'met' if dump < node_ms else 'MISSED'}",
                f"RSS <= {TARGET_RSS_MIB} MiB: peak {worst_rss:.1f} MiB "
                f"{'met' if worst_rss <= TARGET_RSS_MIB else 'MISSED'}",
            ]
        )
        + ".",
        "",
        "Scrape times are wall clock over a kept-alive HTTP connection, as Prometheus scrapes; "
        "`scrape - collector` is the exporter's HTTP and encoding overhead. Other jobs shared "
        f"the machine's {os.cpu_count()} cores while this ran (1-minute load average "
        f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end); medians are "
        "the figures to compare.",
    ]
    report = "\n".join(lines) + "\n"
    print(report)
    RESULTS.write_text(report)
    remaining = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert ns.name not in remaining, f"namespace {ns.name} still exists"


if __name__ == "__main__":
    main()
