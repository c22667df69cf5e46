"""Metric families and their exposition: ours (metrics.py, web/exposition.py, process.py)
beside prometheus_client, which the package used before.

    python -m bench.exposition [--repeats 30] [--rounds 5] [--copies 40]

prometheus_client comes from a directory of its own (bench/peers.py):

- import, each in a fresh interpreter: RSS the families, the encoders and the process
  series add to a bare interpreter (ours: kube_scale_exporter.metrics, .web.exposition,
  .process; the peer:
  `prometheus_client`, whose package __init__ any of its imports runs); and the node
  pod's own imports (POD_IMPORTS), without and with prometheus_client imported first,
  as the package did before;
- encode: the families of every golden exposition in tests/golden (each collector's,
  built from fixed input), and a scrape `--copies` times that size (each series repeated
  with other label values), encoded `--repeats` times in each format; the median of
  `--rounds`, both sides' rounds alternating in one interpreter and timed in its CPU
  time (a loaded machine then slows neither more). Both sides' bytes must be equal, or
  the bench fails.

Writes bench/results/exposition.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile

from bench import peers
from bench.node_pod import IMPORT_STEPS

RESULTS = peers.ROOT / "bench" / "results" / "exposition.md"
GOLDEN = peers.ROOT / "tests" / "golden"
PEER = ("prometheus-client", "0.26.0")
# What replaced prometheus_client; the peer's side of this row imports prometheus_client alone.
LIBRARY = (
    "kube_scale_exporter.metrics,kube_scale_exporter.web.exposition,kube_scale_exporter.process"
)
# The node pod's imports: the command line, the HTTP side `serve` adds, then what the
# default pod's collectors add (bench/node_pod.py's IMPORT_STEPS): the libraries beside
# prometheus_client that import the same standard library modules.
POD_IMPORTS = (
    "kube_scale_exporter.cli",
    "kube_scale_exporter.cli,kube_scale_exporter.web.routes",
    ",".join(modules for _, modules in IMPORT_STEPS),
)

# RSS a fresh interpreter adds by importing cfg["modules"], prometheus_client first on the
# peer's side. Nothing but json is imported before `bare` is read (the package imports it).
IMPORT = r"""
import importlib, json, sys
RSS
cfg = json.loads(sys.argv[1])
bare = rss_mib()
if cfg["side"] == "peer":
    import prometheus_client
for module in cfg["modules"]:
    importlib.import_module(module)
print(json.dumps({"rss": rss_mib() - bare}))
"""

# Both encoders in one interpreter, their rounds alternating, timed in CPU seconds of this
# process: other jobs on the machine then slow neither side more than the other.
ENCODE = r"""
import json, statistics, sys, time
from kube_scale_exporter import metrics
from kube_scale_exporter.web import exposition
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics
cfg = json.loads(sys.argv[1])
class Collected:
    def __init__(self, families):
        self.families = families
    def collect(self):
        return iter(self.families)
def ours(specs):
    families = []
    for name, doc, typ, samples in specs:
        families.append(metrics.Family(name, doc, typ))
        families[-1].samples.extend(metrics.Sample(*s) for s in samples)
    return families
def peers(specs):
    families = []
    for name, doc, typ, samples in specs:
        families.append(Metric(name, doc, typ))
        for s in samples:
            families[-1].add_sample(*s)
    return families
encoders = {
    "text": (exposition.encode_text, lambda fs: generate_latest(Collected(fs))),
    "openmetrics": (exposition.encode_openmetrics, lambda fs: openmetrics(Collected(fs))),
}
with open(cfg["sets"]) as sets:
    sets = json.load(sets)
out = {}
for size, specs in sets.items():
    families = {"ours": ours(specs), "peer": peers(specs)}
    for fmt, (encode_ours, encode_peer) in encoders.items():
        sides = {"ours": encode_ours, "peer": encode_peer}
        seconds, bodies = {"ours": [], "peer": []}, {}
        for _ in range(cfg["rounds"]):
            for side, encode in sides.items():
                start = time.process_time()
                for _ in range(cfg["repeats"]):
                    bodies[side] = encode(families[side])
                seconds[side].append((time.process_time() - start) / cfg["repeats"])
        out[f"{size} {fmt}"] = {
            **{side: statistics.median(s) * 1e6 for side, s in seconds.items()},
            "bytes": len(bodies["ours"]),
            "equal": bodies["ours"] == bodies["peer"],
        }
print(json.dumps(out))
"""


def golden_specs() -> list:
    """[name, HELP, type, [[sample name, labels, value]]] of every golden family."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    specs = []
    for path in sorted(GOLDEN.glob("*.prom")):
        for f in text_string_to_metric_families(path.read_text()):
            samples = [[s.name, s.labels, s.value] for s in f.samples]
            specs.append([f.name, f.documentation, f.type, samples])
    return specs


def copied(specs: list, copies: int) -> list:
    """Each family's series `copies` times, told apart by a label value."""
    return [
        [
            name,
            doc,
            typ,
            [[n, {**labels, "copy": str(i)}, v] for i in range(copies) for n, labels, v in samples],
        ]
        for name, doc, typ, samples in specs
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--copies", type=int, default=40)
    opts = parser.parse_args()
    peer_dir = peers.install(*PEER)
    specs = golden_specs()
    sets = {"golden": specs, f"golden x{opts.copies}": copied(specs, opts.copies)}
    imports = {
        (modules, side): peers.run(
            IMPORT.replace("RSS\n", peers.RSS_MIB),
            {
                "modules": [] if (modules, side) == (LIBRARY, "peer") else modules.split(","),
                "side": side,
            },
            *([peer_dir] if side == "peer" else []),
        )["rss"]
        for modules in (LIBRARY, *POD_IMPORTS)
        for side in ("ours", "peer")
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json") as sets_file:
        json.dump(sets, sets_file)
        sets_file.flush()
        cfg = {"sets": sets_file.name, "repeats": opts.repeats, "rounds": opts.rounds}
        encoded = peers.run(ENCODE, cfg, peer_dir)
    unequal = [key for key, row in encoded.items() if not row["equal"]]
    if unequal:
        raise SystemExit(f"the two encodings differ: {unequal}")
    samples = {name: sum(len(s[3]) for s in chosen) for name, chosen in sets.items()}
    write(opts, imports, encoded, samples, peers.versions(peer_dir)["prometheus-client"])


def write(opts, imports: dict, encoded: dict, samples: dict, version: str) -> None:
    from kube_scale_exporter import metrics, process  # noqa: PLC0415
    from kube_scale_exporter.web import exposition  # noqa: PLC0415

    lines_ours = sum(peers.code_lines(m) for m in (metrics, exposition, process))
    rows = [
        (
            "RSS of importing the families, encoders and process series, MiB",
            imports[LIBRARY, "ours"],
            imports[LIBRARY, "peer"],
        ),
        *(
            (f"RSS of `import {modules}`, MiB", imports[modules, "ours"], imports[modules, "peer"])
            for modules in POD_IMPORTS[:2]
        ),
        (
            "RSS of the default node pod's imports (bench/node_pod.py's IMPORT_STEPS: the "
            "above, yaml, requests, the Kubernetes client), MiB",
            imports[POD_IMPORTS[2], "ours"],
            imports[POD_IMPORTS[2], "peer"],
        ),
    ]
    lines = [
        "# Metric families and their exposition: ours beside prometheus_client",
        "",
        f"`python -m bench.exposition` on {platform.node()} (Python {platform.python_version()}); "
        f"ours: {peers.ours()}; peer: prometheus_client {version} (pure Python). "
        "Machine: 2 cores, shared.",
        "",
        "| measure | ours | prometheus_client | prometheus_client - ours | prometheus_client / ours |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, mine, peer in rows:
        lines.append(
            f"| {label} | {mine:.1f} | {peer:.1f} | {peer - mine:+.1f} | {peer / mine:.1f}x |"
        )
    for key, row in encoded.items():
        size, fmt = key.rsplit(" ", 1)
        mine, peer = row["ours"], row["peer"]
        lines.append(
            f"| CPU to encode {samples[size]} samples ({size}, {fmt}, {row['bytes']} bytes), us "
            f"| {mine:.0f} | {peer:.0f} | {peer - mine:+.0f} | {peer / mine:.2f}x |"
        )
    lines += [
        "",
        f"Encode: the families of every file in tests/golden, and each of their series {opts.copies} "
        f"times with a `copy` label, built once, then encoded {opts.repeats} times per round; the "
        f"median of {opts.rounds} rounds, the two sides' rounds alternating in one interpreter, "
        "in CPU time of that process. Both sides' bytes were equal for every row. Imports: "
        "each in a fresh interpreter; ours imports the "
        "package alone; the peer's row imports prometheus_client first, as the package "
        "did before (its package __init__ brings http.server, urllib.request, wsgiref and the "
        "rest whatever one imports of it). At 7,500 nodes each MiB per node pod is 7.3 GiB "
        f"of the fleet. Ours is {lines_ours} lines of code (metrics.py, web/exposition.py, "
        "process.py).",
    ]
    peers.report(RESULTS, lines)


if __name__ == "__main__":
    main()
