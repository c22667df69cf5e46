"""python -m bench.scale: measure the exporter's and the mixin's cost on a real Prometheus.

Phases (each saves its raw figures to bench/results/raw/scale-PHASE.json, git-ignored: the
report, bench/results/scale.md, is what is committed; `--phases report` renders it again
from the raw files of the last run):
  fit   two fleet sizes over the dashboards' full range: every query's cost, projected
  full  the target fleet over the window the rules read: rules/alerts measured at full N
  live  Prometheus scraping the target fleet: memory added, rule groups' own eval time
  day   a smaller fleet over 24 h: the whole pipeline on a day of history, disk per sample

--fleet picks the synthetic fleet's story (bench/scale/synth.py): realistic (the default)
or thresholds, every node at the per-node alerts' thresholds. A thresholds run keeps its own
raw files (raw/scale-thresholds-PHASE.json) and report (scale-thresholds.md), so the two
fleets' phases never mix in one report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.scale import live, measure, prom, queries, report
from bench.scale.queries import duration_seconds
from bench.scale.synth import FLEETS, REALISTIC

RESULTS = Path(__file__).resolve().parents[1] / "results"
RAW = RESULTS / "raw"


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    p.add_argument(
        "--phases",
        default="full,live,fit,day",
        help="comma-separated: full, live, fit, day, report",
    )
    p.add_argument("--fit-nodes", default="250,1000", help="the two fleet sizes of the fit run")
    p.add_argument(
        "--fit-window",
        default=None,
        help="history per fit segment (default: what the dashboards and rules need)",
    )
    p.add_argument("--nodes", type=int, default=7500, help="fleet size of the full and live runs")
    p.add_argument("--full-window", default="75m", help="history of the full run")
    p.add_argument("--settle", default="5m", help="live run: scrape time before measuring")
    p.add_argument("--day-nodes", type=int, default=250, help="fleet size of the 24 h run")
    p.add_argument(
        "--compact", action="store_true", help="wait for Prometheus to merge blocks before querying"
    )
    p.add_argument(
        "--prometheus",
        default=None,
        help="the Prometheus binary (promtool beside it); default: the newest release the "
        "tests run (.ci/setup.d/15-prometheus.sh)",
    )
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument(
        "--reuse",
        type=Path,
        default=None,
        metavar="DIR",
        help="full run: keep the raw blocks in DIR, or reuse those kept there (only the "
        "recording rules' backfill and the queries run again: compare rule layouts or "
        "Prometheus versions on the same history)",
    )
    p.add_argument(
        "--rules",
        type=Path,
        default=None,
        metavar="DIR",
        help="full run: measure DIR's prometheus_rules.yaml and prometheus_alerts.yaml instead "
        "of rules/ (another commit's layout, with --reuse to compare on the same history)",
    )
    p.add_argument(
        "--fleet",
        choices=FLEETS,
        default=REALISTIC,
        help="the synthetic fleet: realistic spread, or every node at the alerts' thresholds",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="default: bench/results/scale.md (scale-FLEET.md)"
    )
    args = p.parse_args(argv)
    if args.prometheus:
        prom.use(args.prometheus)
    phases = args.phases.split(",")
    stem = "scale" if args.fleet == REALISTIC else f"scale-{args.fleet}"
    out = args.out or RESULTS / f"{stem}.md"
    RAW.mkdir(parents=True, exist_ok=True)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kubescale-bench-"))
    meta_path = RAW / f"{stem}-meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if set(phases) - {"report"}:
        meta.update(
            cpus=os.cpu_count(),
            prometheus=prom.version(),
            fleet=args.fleet,
        )

    def log(*a):
        print(time.strftime("%H:%M:%S"), *a, flush=True)

    for phase in phases:
        if phase == "report":
            continue
        began = {
            "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_before": _load(),
        }
        if phase == "fit":
            sizes = [int(x) for x in args.fit_nodes.split(",")]
            window = (
                int(duration_seconds(args.fit_window))
                if args.fit_window
                else queries.history_needed(queries.load_rule_groups(), queries.dashboards())
            )
            segs = measure.plan(sizes, window, fleet=args.fleet)
            run = measure.run(workdir / "fit", segs, compact=args.compact, log=log)
            (RAW / f"{stem}-fit.json").write_text(run.to_json())
        elif phase == "full":
            stored = measure.stored_history(args.reuse) if args.reuse else None
            if stored and stored["segments"][0].fleet != args.fleet:
                p.error(f"{args.reuse} holds the {stored['segments'][0].fleet} fleet's history")
            segs = (
                stored["segments"]
                if stored
                else measure.plan(
                    [args.nodes], int(duration_seconds(args.full_window)), fleet=args.fleet
                )
            )
            run = measure.run(
                workdir / "full",
                segs,
                rule_files=(
                    tuple(args.rules / f.name for f in queries.RULE_FILES)
                    if args.rules
                    else queries.RULE_FILES
                ),
                compact=args.compact,
                log=log,
                reuse=args.reuse,
            )
            (RAW / f"{stem}-full.json").write_text(run.to_json())
        elif phase == "day":
            segs = measure.plan([args.day_nodes], 24 * 3600, fleet=args.fleet)
            run = measure.run(workdir / "day", segs, compact=args.compact, log=log)
            (RAW / f"{stem}-day.json").write_text(run.to_json())
        elif phase == "live":
            lr = live.run(
                workdir / "live",
                args.nodes,
                settle_s=duration_seconds(args.settle),
                log=log,
                fleet=args.fleet,
            )
            (RAW / f"{stem}-live.json").write_text(json.dumps(lr.as_dict(), indent=1))
        meta[phase] = {
            **began,
            "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_after": _load(),
        }
    meta_path.write_text(json.dumps(meta, indent=1))

    def saved(name):
        path = RAW / f"{stem}-{name}.json"
        return path.read_text() if path.exists() else None

    fit, full, day, live_saved = saved("fit"), saved("full"), saved("day"), saved("live")
    text = report.render(
        meta,
        measure.run_from_json(fit) if fit else None,
        measure.run_from_json(full) if full else None,
        json.loads(live_saved) if live_saved else None,
        measure.run_from_json(day) if day else None,
    )
    out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
