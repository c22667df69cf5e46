"""Metric families and their exposition: ours (metrics.py, web/exposition.py, process.py)
beside prometheus_client, which the package used before.

    python -m bench.exposition [--repeats 30] [--rounds 5] [--copies 40]

Each side runs in fresh interpreters, prometheus_client from a directory of its own
(bench/peers.py):

- import: RSS the families, the encoders and the process series add to a bare
  interpreter (ours: kube_scale_exporter.metrics, .web.exposition, .process; the peer:
  `prometheus_client`, whose package __init__ any of its imports runs); and the node
  pod's own imports (POD_IMPORTS), without and with prometheus_client imported first,
  as the package did before;
- encode: the families of every golden exposition in tests/golden (each collector's,
  built from fixed input), and a scrape `--copies` times that size (each series repeated
  with other label values), encoded `--repeats` times in each format; the median of
  `--rounds`. Both sides' bytes must be equal, or the bench fails.

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
# The node pod's imports: the command line, the HTTP side `serve` adds, then what the
# default pod's collectors add (bench/node_pod.py's IMPORT_STEPS): the libraries beside
# prometheus_client that import the same standard library modules.
POD_IMPORTS = (
    "kube_scale_exporter.cli",
    "kube_scale_exporter.cli, kube_scale_exporter.web.routes",
    ",".join(modules for _, modules in IMPORT_STEPS),
)

# What a side imports before `bare` is read is json alone (the package imports it too).
SIDE = r"""
import json, sys
RSS
cfg = json.loads(sys.argv[1])
ours = cfg["side"] == "ours"
bare = rss_mib()
if "modules" in cfg:
    import importlib
    if not ours:
        import prometheus_client
    for module in cfg["modules"]:
        importlib.import_module(module)
    print(json.dumps({"rss": rss_mib() - bare}))
    raise SystemExit
if ours:
    from kube_scale_exporter import metrics, process
    from kube_scale_exporter.web import exposition
    def family(name, doc, typ):
        return metrics.Family(name, doc, typ)
    def add(f, name, labels, value):
        f.samples.append(metrics.Sample(name, labels, value))
    encoders = {"text": exposition.encode_text, "openmetrics": exposition.encode_openmetrics}
else:
    import prometheus_client
    from prometheus_client.core import Metric
    from prometheus_client.exposition import generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics
    class Collected:
        def __init__(self, families):
            self.families = families
        def collect(self):
            return iter(self.families)
    def family(name, doc, typ):
        return Metric(name, doc, typ)
    def add(f, name, labels, value):
        f.add_sample(name, labels, value)
    encoders = {
        "text": lambda fs: generate_latest(Collected(fs)),
        "openmetrics": lambda fs: openmetrics(Collected(fs)),
    }
rss_import = rss_mib() - bare
import hashlib, statistics, time
out = {"rss_import": rss_import}
with open(cfg["sets"]) as sets:
    sets = json.load(sets)
for size, specs in sets.items():
    families = []
    for name, doc, typ, samples in specs:
        f = family(name, doc, typ)
        for sample_name, labels, value in samples:
            add(f, sample_name, labels, value)
        families.append(f)
    for fmt, encode in encoders.items():
        rounds = []
        for _ in range(cfg["rounds"]):
            start = time.perf_counter()
            for _ in range(cfg["repeats"]):
                body = encode(families)
            rounds.append((time.perf_counter() - start) / cfg["repeats"])
        out[f"{size} {fmt}"] = {
            "us": statistics.median(rounds) * 1e6,
            "bytes": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
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
    code = SIDE.replace("RSS\n", peers.RSS_MIB)
    pod = {
        (modules, side): peers.run(
            code,
            {"modules": [m.strip() for m in modules.split(",")], "side": side},
            *([peer_dir] if side == "peer" else []),
        )["rss"]
        for modules in POD_IMPORTS
        for side in ("ours", "peer")
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json") as sets_file:
        json.dump(sets, sets_file)
        sets_file.flush()
        cfg = {"what": "encode", "sets": sets_file.name}
        cfg.update(repeats=opts.repeats, rounds=opts.rounds)
        ours = peers.run(code, dict(cfg, side="ours"))
        theirs = peers.run(code, dict(cfg, side="peer"), peer_dir)
    for key, mine in ours.items():
        if key != "rss_import" and mine["sha256"] != theirs[key]["sha256"]:
            raise SystemExit(f"{key}: the two encodings differ")
    samples = {name: sum(len(s[3]) for s in chosen) for name, chosen in sets.items()}
    write(opts, ours, theirs, pod, samples, peers.versions(peer_dir)["prometheus-client"])


def write(opts, ours: dict, theirs: dict, pod: dict, samples: dict, version: str) -> None:
    from kube_scale_exporter import metrics, process  # noqa: PLC0415
    from kube_scale_exporter.web import exposition  # noqa: PLC0415

    lines_ours = sum(peers.code_lines(m) for m in (metrics, exposition, process))
    rows = [
        (
            "RSS of importing the families, encoders and process series, MiB",
            ours["rss_import"],
            theirs["rss_import"],
        ),
        *(
            (f"RSS of `import {modules}`, MiB", pod[modules, "ours"], pod[modules, "peer"])
            for modules in POD_IMPORTS[:2]
        ),
        (
            "RSS of the default node pod's imports (bench/node_pod.py's IMPORT_STEPS: the "
            "above, yaml, requests, the Kubernetes client), MiB",
            pod[POD_IMPORTS[2], "ours"],
            pod[POD_IMPORTS[2], "peer"],
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
    for key, mine in ours.items():
        if key == "rss_import":
            continue
        size, fmt = key.rsplit(" ", 1)
        peer = theirs[key]["us"]
        lines.append(
            f"| encode {samples[size]} samples ({size}, {fmt}, {mine['bytes']} bytes), us "
            f"| {mine['us']:.0f} | {peer:.0f} | {peer - mine['us']:+.0f} | {peer / mine['us']:.2f}x |"
        )
    lines += [
        "",
        f"Encode: the families of every file in tests/golden, and each of their series {opts.copies} "
        f"times with a `copy` label, built once, then encoded {opts.repeats} times per round; the "
        f"median of {opts.rounds} rounds, each side in a fresh interpreter. Both sides' bytes "
        "were equal for every row (compared by SHA-256). The pod's import: ours imports the "
        "package alone; the peer's row imports prometheus_client first, as the package "
        "did before (its package __init__ brings http.server, urllib.request, wsgiref and the "
        "rest whatever one imports of it). At 7,500 nodes each MiB per node pod is 7.3 GiB "
        f"of the fleet. Ours is {lines_ours} lines of code (metrics.py, web/exposition.py, "
        "process.py).",
    ]
    peers.report(RESULTS, lines)


if __name__ == "__main__":
    main()
