"""CPU per scrape: the default node pod beside node_exporter with its default collectors.

Both run on this host and take the same --scrapes sequential scrapes (default 2,000) over
a kept-alive connection; the CPU each server used over them (user + system, from
/proc/PID/stat) divided by the scrapes is its cost per scrape. Ours is deploy/'s default
node pod: `neighbor`, `neighbor_gc`, `imagepull` on a real containerd with the kubelet's
config file, and its pod watch of MAX_PODS pods on a real API server (--no-pod-watch to
leave it out). node_exporter's version is printed. Results: bench/results/scrape_cost.md.

Run as root: python -m bench.scrape_cost [--scrapes N] [--no-pod-watch] [--node-exporter PATH]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench import versions
from bench.node_pod import (
    LOG_DIR,
    REPO,
    MAX_PODS,
    default_pod,
    load_average,
    parse_args,
    run_binary,
    run_ours,
)
from testbed import node_exporter
from testbed.ports import free_port

RESULTS = REPO / "bench/results/scrape_cost.md"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, 2_000, argv)
    peer_bin = node_exporter.binary(args.node_exporter)
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="kse-scrape-cost-") as work:
        with default_pod(Path(work), args.pod_watch) as pod:
            ours = run_ours(pod.default, args.scrapes, LOG_DIR)
    port = free_port()
    peer = run_binary(
        node_exporter.argv(peer_bin, port, []), port, args.scrapes, LOG_DIR / "node-exporter.log"
    )
    peer_version = node_exporter.version(peer_bin)
    name = peer_version.split(" (")[0]
    pod_label = (
        f"with its pod watch of {MAX_PODS} pods" if args.pod_watch else "without its pod watch"
    )
    lines = [
        "# CPU per scrape of a node",
        "",
        f"`python -m bench.scrape_cost` on {versions.host()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        f"Ran: {versions.ours()} on {versions.interpreter()}; peer: `{peer_version}`.",
        f"{args.scrapes:,} sequential scrapes each over a kept-alive connection; CPU is the "
        "server's user + system time over them.",
        "",
        "| server | CPU ms / scrape | scrape p50 ms | samples | RSS after MiB |",
        "|---|---:|---:|---:|---:|",
        f"| kube-scale-exporter, the default node pod ({pod_label}) "
        f"| {ours.cpu_ms_per_scrape:.2f} | {ours.wall_p50_ms:.2f} | {ours.samples} "
        f"| {ours.rss_last:.1f} |",
        f"| {name}, default collectors | {peer.cpu_ms_per_scrape:.2f} | {peer.wall_p50_ms:.2f} "
        f"| {peer.samples} | {peer.rss_last:.1f} |",
        "",
        f"Ratio, node_exporter / ours: {peer.cpu_ms_per_scrape / ours.cpu_ms_per_scrape:.2f}x "
        "CPU per scrape. At a 15 s scrape interval, ours costs "
        f"{ours.cpu_ms_per_scrape / 15:.3f} ms of CPU a second (node_exporter "
        f"{peer.cpu_ms_per_scrape / 15:.3f}); their series differ (node_exporter's defaults "
        "export the whole node's hardware and kernel), so the figure per sample is also: ours "
        f"{ours.cpu_ms_per_scrape * 1000 / ours.samples:.1f} us, node_exporter "
        f"{peer.cpu_ms_per_scrape * 1000 / peer.samples:.1f} us.",
        "",
        f"Other jobs shared the machine while this ran (1-minute load average "
        f"{load_before:.1f} at the start, {load_average():.1f} at the end).",
    ]
    report = "\n".join(lines) + "\n"
    print(report)
    RESULTS.write_text(report)


if __name__ == "__main__":
    main()
