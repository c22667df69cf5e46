"""The neighbor table read and the 100,000-entry dump: our raw netlink beside pyroute2.

    python -m bench.neighbor_pyroute2 [--entries 100000] [--rounds 20] [--peer-rounds 3]

A throwaway namespace gets a veth link and `--entries` PERMANENT IPv4 entries (as
bench/neighbor.py: PERMANENT, so the host's shared table never overflows), then each side
runs in a fresh interpreter inside it (`ip netns exec`):

- import: time and RSS after importing the netlink code;
- table read (what the `neighbor` collector does each scrape): both families' tables,
  thresholds and counters; ours kube_scale_exporter/netlink's read_tables(), pyroute2's
  IPRoute.get_ntables();
- dump (what `neighbor_gc` does each scrape): every entry, counted per family with the
  GC-exempt ones (PERMANENT, externally learned, managed); ours count_entries(),
  pyroute2's IPRoute.get_neighbours() and the same count over its messages;
- peak RSS, and which of the kernel's counters each side reads.

Writes bench/results/neighbor_pyroute2.md and deletes the namespace. Run as root.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time

from bench import peers
from testbed.netns import NetNS, neighbor_adds

RESULTS = peers.ROOT / "bench" / "results" / "neighbor_pyroute2.md"
PYROUTE2 = ("pyroute2", "0.9.7")

COMMON = r"""
import json, sys, time
cfg = json.loads(sys.argv[1])
RSS
t0 = time.perf_counter()
IMPORTS
import_ms = (time.perf_counter() - t0) * 1e3
rss_import = rss_mib()
def timed(fn, rounds):
    walls, cpus = [], []
    for _ in range(rounds):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append((time.perf_counter() - w) * 1e3); cpus.append((time.process_time() - c) * 1e3)
    return walls, cpus, out
table_walls, table_cpus, tables = timed(read_tables, cfg["rounds"])
dump_walls, dump_cpus, counts = timed(count_entries, cfg["rounds"])
close()
print(json.dumps({"import_ms": import_ms, "rss_import": rss_import,
                  "table_walls": table_walls, "table_cpus": table_cpus,
                  "dump_walls": dump_walls, "dump_cpus": dump_cpus,
                  "stats": sorted(tables["ipv4"]), "entries": tables["ipv4"]["entries"],
                  "counts": counts,
                  "peak_rss": peak_mib()}))
"""

OURS = COMMON.replace(
    "IMPORTS",
    r"""
from kube_scale_exporter.netlink.neighbor import count_entries as _count, read_tables as _read
from kube_scale_exporter.netlink.route import RouteSocket
sock = RouteSocket()
def read_tables():
    return {family: dict(t.stats, entries=t.entries) for family, t in _read(sock).items()}
def count_entries():
    return {family: [c.entries, c.entries - c.gc_eligible] for family, c in _count(sock).items()}
close = sock.close
""",
)

PEER = COMMON.replace(
    "IMPORTS",
    r"""
import socket
from pyroute2 import IPRoute
FAMILIES = {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6"}
NUD_PERMANENT, NTF_EXT_LEARNED, NTF_EXT_MANAGED = 0x80, 0x10, 0x1
ipr = IPRoute()
def read_tables():
    tables = {}
    for msg in ipr.get_ntables():
        family = FAMILIES.get(msg["family"])
        if family is None or msg.get_attr("NDTA_THRESH1") is None:
            continue  # the per-device parms; the table's own message has thresholds
        stats = msg.get_attr("NDTA_STATS") or {}
        config = msg.get_attr("NDTA_CONFIG") or {}
        tables[family] = {
            **{k: v for k, v in stats.items() if k not in ("header",)},
            "entries": config["entries"],
        }
    return tables
def count_entries():
    counts = {"ipv4": [0, 0], "ipv6": [0, 0]}
    for msg in ipr.get_neighbours():
        family = FAMILIES.get(msg["family"])
        if family is None:
            continue
        counts[family][0] += 1
        managed = (msg.get_attr("NDA_FLAGS_EXT") or 0) & NTF_EXT_MANAGED
        if msg["state"] & NUD_PERMANENT or msg["flags"] & NTF_EXT_LEARNED or managed:
            counts[family][1] += 1
    return counts
close = ipr.close
""",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--peer-rounds", type=int, default=3)
    opts = ap.parse_args()
    peer_dir = peers.install(*PYROUTE2)
    load_before = os.getloadavg()[0]
    with NetNS("kst-pyroute2") as ns:
        start = time.perf_counter()
        ns.batch(neighbor_adds(opts.entries, "ipv4", "permanent"))
        fill_s = time.perf_counter() - start
        prefix = ("ip", "netns", "exec", ns.name)
        ours = peers.run(
            OURS.replace("RSS\n", peers.RSS_MIB), {"rounds": opts.rounds}, prefix=prefix
        )
        theirs = peers.run(
            PEER.replace("RSS\n", peers.RSS_MIB),
            {"rounds": opts.peer_rounds},
            peer_dir,
            prefix=prefix,
        )
    remaining = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert ns.name not in remaining, f"namespace {ns.name} still exists"
    print(ours, theirs, sep="\n")
    write(opts, ours, theirs, peers.versions(peer_dir)["pyroute2"], fill_s, load_before)


def write(opts, ours, theirs, version, fill_s, load_before) -> None:
    med = statistics.median
    rows = [
        ("import, ms", ours["import_ms"], theirs["import_ms"]),
        ("RSS after import, MiB", ours["rss_import"], theirs["rss_import"]),
        (
            "table read (`neighbor`), wall ms (median)",
            med(ours["table_walls"]),
            med(theirs["table_walls"]),
        ),
        (
            f"dump of {opts.entries:,} entries (`neighbor_gc`), wall ms (median)",
            med(ours["dump_walls"]),
            med(theirs["dump_walls"]),
        ),
        (
            f"dump of {opts.entries:,} entries, CPU ms (median)",
            med(ours["dump_cpus"]),
            med(theirs["dump_cpus"]),
        ),
        ("peak RSS, MiB", ours["peak_rss"], theirs["peak_rss"]),
    ]
    missing = sorted(set(ours["stats"]) - set(theirs["stats"]))
    lines = [
        f"# Neighbor table read and dump at {opts.entries:,} entries: raw netlink beside pyroute2",
        "",
        f"`python -m bench.neighbor_pyroute2` on {platform.node()} (kernel {platform.release()}, "
        f"Python {platform.python_version()}), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"ours: {peers.ours()}; peer: pyroute2 {version} (IPRoute). A throwaway namespace with {opts.entries:,} "
        f"PERMANENT IPv4 entries on a veth link (added in {fill_s:.1f} s); each side runs in a "
        f"fresh interpreter inside it: {opts.rounds} rounds for ours, {opts.peer_rounds} for "
        "pyroute2 (each takes seconds).",
        "",
        "| measure | kube-scale-exporter (kube_scale_exporter/netlink) | pyroute2 | pyroute2 / ours |",
        "|---|---:|---:|---:|",
    ]
    for name, a, b in rows:
        lines.append(f"| {name} | {a:,.1f} | {b:,.1f} | {b / a:,.1f}x |")
    lines += [
        "",
        "Both count the same entries (ipv4, ipv6: entries and GC-exempt ones): ours "
        f"{ours['counts']}, pyroute2 {theirs['counts']}; the table's entries: ours "
        f"{ours['entries']:,}, pyroute2 {theirs['entries']:,}.",
        "",
        f"Kernel counters read from NDTA_STATS: ours {len(ours['stats']) - 1}, pyroute2 "
        f"{len(theirs['stats']) - 1}; pyroute2 lacks {', '.join(missing) or 'none'} "
        "(`table_fulls` is what kubescale_neighbor_table_overflows_total exports).",
        "",
        f"Other jobs shared the machine's {os.cpu_count()} cores (1-minute load average "
        f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end): medians and "
        "ratios are the figures to compare.",
    ]
    peers.report(RESULTS, lines)


if __name__ == "__main__":
    main()
