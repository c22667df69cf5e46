"""One measured run on backfilled history: synthesize, backfill, serve, query everything.

History is laid out as segments back to back (oldest first), each with its own fleet size,
so one TSDB answers "what does each query cost at N1 nodes and at N2 nodes": every query
is evaluated at the end of each segment, and the segment is long enough that no query
evaluated there reaches into the one before (dashboard range + the longest range vector).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.scale import backfill, queries, synth, template
from bench.scale.prom import SCRAPE_INTERVAL, Prometheus, Result
from bench.scale.synth import CLUSTER_JOB, NODE_JOB, REALISTIC, Segment

GAP_SECONDS = 600  # between segments: more than the 5 min lookback, so they never mix


def plan(
    fleet_sizes: list[int],
    window_s: int,
    interval: int = SCRAPE_INTERVAL,
    now: float | None = None,
    fleet: str = REALISTIC,
) -> list[Segment]:
    """Segments of `window_s` for each fleet size, the last ending a minute before now."""
    now = time.time() if now is None else now
    end = int(now - 60) // interval * interval
    segments = []
    for nodes in reversed(fleet_sizes):
        start = end - window_s
        segments.append(Segment(nodes, start, end, interval, fleet))
        end = start - GAP_SECONDS // interval * interval
    return list(reversed(segments))


@dataclass
class Measured:
    query: queries.Query
    result: Result


@dataclass
class SegmentReport:
    nodes: int
    start: int
    end: int
    measured: list[Measured]
    node_series_max: int  # our exporter's series per node target (max over nodes)
    node_series_prometheus: int  # plus what Prometheus adds per target (up, scrape_*)
    cluster_series: int
    variables: dict[str, dict[str, str]]
    # Rows a topk-capped table shows from the rule's latest evaluation only. promtool's rule
    # backfill writes no staleness markers, so an instant query also returns, for 5 min,
    # series that left the topk; a live Prometheus marks those stale at once.
    capped_fresh_series: dict[str, int] = field(default_factory=dict)
    # Per rule group: Prometheus' CPU seconds and wall seconds to evaluate the group's
    # expressions one after another, each wrapped in count() so encoding a 15,000-series
    # answer as JSON is not counted. CPU time is what the group costs whatever else the
    # shared machine runs; on a free core it is the evaluation time.
    group_cost: dict[str, dict[str, float]] = field(default_factory=dict)
    # The HTTP API's own CPU seconds per query, measured as the groups are on a query that
    # reads nothing: what each rule's figure above carries and an evaluation inside
    # Prometheus does not pay.
    query_floor_cpu: float = 0.0

    def groups(self) -> dict[str, dict]:
        """Per rule group: queries, samples, the sum of wall and engine times."""
        out: dict[str, dict] = {}
        for m in self.measured:
            if m.query.kind == "panel":
                continue
            g = out.setdefault(
                m.query.group, {"rules": 0, "samples": 0, "wall": 0.0, "engine": 0.0}
            )
            g["rules"] += 1
            g["samples"] += m.result.samples
            g["wall"] += m.result.wall
            g["engine"] += m.result.engine
        return out


@dataclass
class Run:
    segments: list[SegmentReport]
    samples_written: int
    synth_seconds: float
    openmetrics_bytes: int
    backfill_seconds: float
    rule_passes: list[dict]
    tsdb_bytes: int
    template_sources: dict[str, dict[str, str]]
    template_series: dict[str, int]
    notes: list[str] = field(default_factory=list)
    fleet: str = REALISTIC  # the synthesized fleet's story (bench.scale.synth.FLEETS)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, default=str)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _count(prom: Prometheus, expr: str, at: int) -> int:
    return int(prom.scalar(expr, at))


# Prometheus' CPU per round of a group, at least: /proc counts it in 10 ms ticks, so a group
# of a few milliseconds is repeated until the ticks add up, and its cost is the mean.
ROUND_CPU_SECONDS = 0.25
ROUND_MAX_RUNS = 100


def _round(prom: Prometheus, rules: list[dict], at: int) -> tuple[float, float]:
    """CPU and wall seconds of one evaluation of `rules`, the mean of as many as one round runs."""
    cpu, began, runs = prom.cpu_seconds(), time.monotonic(), 0
    while True:
        for r in rules:
            prom.query(f"count({r['expr'].strip()})", at)
        runs += 1
        used = prom.cpu_seconds() - cpu
        if used >= ROUND_CPU_SECONDS or runs >= ROUND_MAX_RUNS:
            return used / runs, (time.monotonic() - began) / runs


def group_cost(
    prom: Prometheus, groups: list[dict], at: int, rounds: int = 3
) -> dict[str, dict[str, float]]:
    """The cheapest of `rounds` rounds of each group (the others met a busy machine)."""
    out = {}
    for g in groups:
        best_cpu, best_wall = min(_round(prom, g["rules"], at) for _ in range(rounds))
        interval = queries.duration_seconds(g["interval"]) if "interval" in g else SCRAPE_INTERVAL
        out[g["name"]] = {"cpu": best_cpu, "wall": best_wall, "interval": interval}
    return out


def query_floor(prom: Prometheus, at: int, rounds: int = 3) -> float:
    """CPU seconds of the cheapest query through the API, the cheapest of `rounds` rounds."""
    return min(_round(prom, [{"expr": "vector(1)"}], at)[0] for _ in range(rounds))


def evaluate(
    prom: Prometheus, groups: list[dict], dashboards: list[Path], seg: Segment
) -> SegmentReport:
    at = seg.end
    measured = [Measured(q, prom.query(q.expr, at)) for q in queries.rule_queries(groups)]
    costs = group_cost(prom, groups, at)
    chosen: dict[str, dict[str, str]] = {}
    fresh: dict[str, int] = {}
    for path in dashboards:
        variables = {}
        for var in queries.variable_defaults(path):
            values = prom.label_values(var["label"], var["match"])
            variables[var["name"]] = queries.choose(var, values)
        chosen[path.name] = variables
        for q in queries.dashboard_queries(path, variables):
            end = at // q.step_s * q.step_s
            if q.instant:
                measured.append(Measured(q, prom.query(q.expr, end)))
                if q.capped:
                    latest = f"timestamp({q.expr}) == scalar(max(timestamp({q.expr})))"
                    fresh[f"{path.name} / {q.name}"] = _count(prom, f"count({latest})", end)
            else:
                measured.append(
                    Measured(q, prom.query_range(q.expr, end - q.range_s, end, q.step_s))
                )
    ours = '__name__=~"kubescale_[^:]*"'
    return SegmentReport(
        nodes=seg.nodes,
        start=seg.start,
        end=seg.end,
        measured=measured,
        node_series_max=_count(prom, f'max(count by (node) ({{job="{NODE_JOB}", {ours}}}))', at),
        node_series_prometheus=_count(
            prom, f'max(count by (node) ({{job="{NODE_JOB}", __name__!~".*:.*"}}))', at
        ),
        cluster_series=_count(prom, f'count({{job="{CLUSTER_JOB}", {ours}}})', at),
        variables=chosen,
        capped_fresh_series=fresh,
        group_cost=costs,
        query_floor_cpu=query_floor(prom, at),
    )


def wait_compacted(prom: Prometheus, data_dir: Path, timeout: float) -> float:
    """Wait until Prometheus has merged overlapping blocks (its first compaction runs a
    minute after start), so query timings are not taken during a compaction."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        metas = []
        for meta in data_dir.glob("*/meta.json"):
            try:
                m = json.loads(meta.read_text())
            except (OSError, ValueError):
                continue
            metas.append((m["minTime"], m["maxTime"]))
        metas.sort()
        overlapping = any(b[0] < a[1] for a, b in itertools.pairwise(metas))
        if not overlapping and prom.metric("prometheus_tsdb_blocks_loaded") == len(metas):
            return time.monotonic() - began
        time.sleep(2)
    raise TimeoutError("blocks still overlapping after the compaction wait")


# In a --reuse directory: the raw blocks as promtool wrote them, before any rule ran on them,
# and what made them (segments, synthesis and backfill figures).
STORED_BLOCKS = "raw-blocks"
STORED_HISTORY = "history.json"


def stored_history(reuse: Path) -> dict | None:
    """The history an earlier run kept in `reuse` (None: nothing kept there yet)."""
    path = reuse / STORED_HISTORY
    if not path.exists() or not (reuse / STORED_BLOCKS).is_dir():
        return None
    stored = json.loads(path.read_text())
    stored["segments"] = [Segment(**s) for s in stored["segments"]]
    return stored


def _synthesize(workdir: Path, data: Path, segments: list[Segment], node_t, cluster_t, log) -> dict:
    om = workdir / "history.om"
    began = time.monotonic()
    with open(om, "w", buffering=1 << 22) as out:
        written = synth.write(out, node_t, cluster_t, segments)
    synth_s = time.monotonic() - began
    om_bytes = om.stat().st_size
    log(f"synthesized {written:,} samples ({om_bytes / 1e6:,.0f} MB) in {synth_s:.1f}s")
    backfill_s = backfill.openmetrics(om, data)
    om.unlink()
    log(f"promtool openmetrics backfill {backfill_s:.1f}s ({written / backfill_s:,.0f} samples/s)")
    return {
        "segments": [asdict(s) for s in segments],
        "samples_written": written,
        "synth_seconds": synth_s,
        "openmetrics_bytes": om_bytes,
        "backfill_seconds": backfill_s,
        "made": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def run(
    workdir: Path,
    segments: list[Segment],
    rule_files=queries.RULE_FILES,
    dashboard_dir: Path = queries.DASHBOARD_DIR,
    compact: bool = False,
    log=lambda *a: None,
    reuse: Path | None = None,
) -> Run:
    """Synthesize and backfill `segments`, backfill the recording rules, query everything.

    With `reuse`, the raw history is kept there after its backfill, and a later run given
    the same directory copies it instead of synthesizing again (its segments are the stored
    ones): only the recording rules' backfill and the queries run, so rule layouts (or
    Prometheus versions) are compared on the same blocks."""
    workdir.mkdir(parents=True, exist_ok=True)
    node_t, cluster_t = template.load("node"), template.load("cluster")
    data = workdir / "data"
    shutil.rmtree(data, ignore_errors=True)
    notes = []
    stored = stored_history(reuse) if reuse else None
    if stored:
        if stored["segments"] != segments:
            raise ValueError(f"{reuse} holds other segments than asked: {stored['segments']}")
        shutil.copytree(reuse / STORED_BLOCKS, data)
        history = stored
        notes.append(
            f"raw history reused from {reuse} (synthesized and backfilled {stored['made']})"
        )
        log(f"raw blocks copied from {reuse / STORED_BLOCKS}")
    else:
        history = _synthesize(workdir, data, segments, node_t, cluster_t, log)
        if reuse:
            shutil.rmtree(reuse / STORED_BLOCKS, ignore_errors=True)
            shutil.copytree(data, reuse / STORED_BLOCKS)
            (reuse / STORED_HISTORY).write_text(json.dumps(history, indent=1))
            log(f"raw blocks kept in {reuse / STORED_BLOCKS} for --reuse")
    groups = queries.load_rule_groups(rule_files)
    if tuple(rule_files) != queries.RULE_FILES:
        notes.append(f"rules and alerts read from {', '.join(str(f) for f in rule_files)}")
    passes = backfill.recording_rules(groups, data, workdir, segments[0].start, segments[-1].end)
    log(f"recording rules backfilled: {passes}")
    with Prometheus(workdir, data) as prom:
        if compact:
            waited = wait_compacted(prom, data, timeout=1800)
            notes.append(
                f"waited {waited:.0f}s for Prometheus to merge overlapping blocks before querying"
            )
        reports = []
        compactions = prom.metric("prometheus_tsdb_compactions_total")
        began = time.monotonic()
        for seg in segments:
            reports.append(evaluate(prom, groups, sorted(Path(dashboard_dir).glob("*.json")), seg))
            log(f"evaluated {len(reports[-1].measured)} queries at N={seg.nodes}")
        ran = prom.metric("prometheus_tsdb_compactions_total") - compactions
        notes.append(
            f"queries took {time.monotonic() - began:.0f}s; Prometheus ran {ran:.0f} compaction(s) "
            "meanwhile"
            + (" (their CPU competes with the queries: wall times are upper bounds)" if ran else "")
        )
    tsdb_bytes = _dir_bytes(data)
    if os.environ.get("KEEP_SCALE_TSDB") != "1":
        shutil.rmtree(data, ignore_errors=True)
    return Run(
        reports,
        history["samples_written"],
        history["synth_seconds"],
        history["openmetrics_bytes"],
        history["backfill_seconds"],
        passes,
        tsdb_bytes,
        {"node": node_t.sources, "cluster": cluster_t.sources},
        {"node": len(node_t), "cluster": len(cluster_t)},
        notes,
        segments[0].fleet,
    )


def run_from_json(text: str) -> Run:
    """A Run written by Run.to_json, back as objects (the report reads saved phases)."""
    raw = json.loads(text)
    segments = []
    for s in raw.pop("segments"):
        measured = [
            Measured(queries.Query(**m["query"]), Result(**m["result"])) for m in s.pop("measured")
        ]
        segments.append(SegmentReport(measured=measured, **s))
    return Run(segments=segments, **raw)
