"""The default node pod's memory, collector by collector, beside node_exporter's.

Each configuration runs as its own exporter process on this host (hostNetwork, as the
DaemonSet does) and takes --scrapes sequential scrapes (default 10,000); its RSS is read
after the first and the last. From the interpreter alone to the default pod of deploy/:
`neighbor`, + `neighbor_gc`, + `imagepull` on a real containerd (with the kubelet's config
file), + its pod watch of MAX_PODS pods on a real API server; then the default pod once
more as deployed: from the image testbed/image.py builds from this tree, which the target
is judged on. node_exporter (its version printed) runs with its default collectors under
the same scrapes. Results: bench/results/node_memory.md.

Run as root: python -m bench.node_memory [--scrapes N] [--no-pod-watch] [--no-image]
[--node-exporter PATH]. The rows before the image's run on the interpreter running this;
run it with Debian's python3.11 (the image's, e.g. in a venv) to compare them.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench import versions
from bench.node_pod import (
    LOG_DIR,
    REPO,
    IMAGEPULL,
    MAX_PODS,
    NEIGHBOR,
    NEIGHBOR_GC,
    default_pod,
    import_costs,
    interpreter_alone,
    load_average,
    parse_args,
    run_binary,
    run_in_image,
    run_ours,
)
from testbed import node_exporter
from testbed.ports import free_port

RESULTS = REPO / "bench/results/node_memory.md"
TARGET_MIB = 28  # the default node pod after 10,000 scrapes, in its image when it ran there
IMAGE_ROW = (
    "the default node pod in its image, as the DaemonSet runs it (its args with "
    "--web.kube-rbac, read-only root, uid 65534, host paths and service account mounted; "
    "each scrape with a reviewed token)"
)
FLEET_NODES = 7_500


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, 10_000, argv, image=True)
    peer_bin = node_exporter.binary(args.node_exporter)
    load_before = load_average()
    rows = [("the interpreter alone (`python -c 'import time; time.sleep(30)'`)", None)]
    bare = interpreter_alone()
    imports = import_costs()
    with tempfile.TemporaryDirectory(prefix="kse-node-memory-") as work:
        with default_pod(Path(work), args.pod_watch) as pod:
            layers = [
                ("`neighbor`", pod.flags(NEIGHBOR)),
                ("`neighbor`, `neighbor_gc`", pod.flags(NEIGHBOR, NEIGHBOR_GC)),
                (
                    "`neighbor`, `neighbor_gc`, `imagepull` (containerd, no pod watch)",
                    pod.flags(NEIGHBOR, NEIGHBOR_GC, IMAGEPULL),
                ),
            ]
            if args.pod_watch:
                layers.append(
                    (
                        f"the default node pod: the above + the pod watch ({MAX_PODS} pods)",
                        pod.default,
                    )
                )
            for label, flags in layers:
                rows.append((label, run_ours(flags, args.scrapes, LOG_DIR)))
            if args.pod_watch and args.image:
                rows.append((IMAGE_ROW, run_in_image(pod, args.scrapes, LOG_DIR)))
    port = free_port()
    peer = run_binary(
        node_exporter.argv(peer_bin, port, []), port, args.scrapes, LOG_DIR / "node-exporter.log"
    )
    report = render(
        bare,
        rows,
        imports,
        peer,
        node_exporter.version(peer_bin),
        args,
        load_before,
        load_average(),
    )
    print(report)
    RESULTS.write_text(report)


def render(bare, rows, imports, peer, peer_version, args, load_before, load_after) -> str:
    name = peer_version.split(" (")[0]
    lines = [
        "# The node pod's memory, collector by collector",
        "",
        f"`python -m bench.node_memory` on {versions.host()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        f"Ran: {versions.ours()} on {versions.interpreter()}; peer: `{peer_version}`.",
        f"Each row is one process on this host taking {args.scrapes:,} sequential scrapes "
        "over a kept-alive connection; RSS after the first scrape and after the last.",
        "",
        "| process | RSS after 1 scrape MiB | RSS after the last MiB | peak MiB "
        "| over the interpreter MiB | CPU ms / scrape | samples |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, run in rows:
        if run is None:
            lines.append(f"| {label} | {bare:.1f} | | | 0 | | |")
            continue
        lines.append(
            f"| {label} | {run.rss_first:.1f} | {run.rss_last:.1f} | {run.peak:.1f} "
            f"| {run.rss_last - bare:.1f} | {run.cpu_ms_per_scrape:.2f} | {run.samples} |"
        )
    lines.append(
        f"| {name}, default collectors | {peer.rss_first:.1f} | {peer.rss_last:.1f} "
        f"| {peer.peak:.1f} | | {peer.cpu_ms_per_scrape:.2f} | {peer.samples} |"
    )
    default_label, default = rows[-1]
    full = args.pod_watch
    lines += [
        "",
        f"Target: the default node pod at most {TARGET_MIB} MiB after 10,000 scrapes: "
        + (
            f"{default.rss_last:.1f} MiB {'met' if default.rss_last <= TARGET_MIB else 'MISSED'}"
            if full
            else "not measured here (run without the pod watch)"
        )
        + f". At {FLEET_NODES:,} nodes each MiB per pod is "
        f"{FLEET_NODES / 1024:.1f} GiB of the fleet; node_exporter / the last row "
        f"{peer.rss_last / default.rss_last:.2f}.",
        "",
        "What the imports cost, one after the other in a fresh interpreter, in the order "
        "the default pod imports them (RSS each adds, MiB):",
        "",
        "| import | MiB |",
        "|---|---:|",
        *(f"| {label} | {cost:.1f} |" for label, cost in imports),
        f"| all of them | {sum(cost for _, cost in imports):.1f} |",
        "",
        f"Other jobs shared the machine while this ran (1-minute load average "
        f"{load_before:.1f} at the start, {load_after:.1f} at the end).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
