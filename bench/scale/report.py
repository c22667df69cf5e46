"""bench/results/scale.md from the saved phases (fit, full, live) of a bench run."""

from __future__ import annotations

from bench.scale import budget, queries, template
from bench.scale.measure import Run
from bench.scale.synth import FLEETS, REALISTIC


def _mb(b: float) -> str:
    return f"{b / 2**20:,.0f} MiB"


def _h(seconds: int) -> str:
    hours, minutes = divmod(int(seconds) // 60, 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def _n(v: float) -> str:
    return f"{v:,.0f}"


def _segment_length(seconds: int) -> str:
    """Why a fit segment is as long as it is: what queries.history_needed sizes it from, read
    from the rules and dashboards as they are now (another length came from --fit-window)."""
    h = queries.history(queries.load_rule_groups(), queries.dashboards())
    if h.seconds != seconds:
        return (
            f"each segment is {_h(seconds)} long (--fit-window; the rules and dashboards now "
            f"need {_h(h.seconds)} so that no query reaches into the other segment)"
        )
    alerts = f"the {_h(h.alert_range)} that `{h.alert}` reads (the longest range of any alert)"
    dashboards = (
        f"the dashboards' {_h(h.dashboard_range)} range plus the {_h(h.record_range)} that "
        f"`{h.record}` reads (the longest range of any recording rule)"
    )
    longer, shorter = (
        (alerts, dashboards)
        if h.alert_range >= h.dashboard_range + h.record_range
        else (dashboards, alerts)
    )
    return (
        f"each segment is long enough that no query reaches into the other: {longer}, longer "
        f"than {shorter}, plus Prometheus' {_h(h.lookback)} lookback for the rules and again "
        "for the queries"
    )


def _group_samples(full: Run | None) -> tuple[list[str], list[str]]:
    """Rule groups over budget.GROUP_SAMPLES as the full run measured them at 7,500 nodes:
    (over budget, on the fleet that bound is defined on; notes, on another fleet, saying the
    bound is not that fleet's and how the budget it stands in for fared)."""
    over: list[str] = []
    notes: list[str] = []
    if not full or full.segments[0].nodes != budget.TARGET_NODES:
        return over, notes
    seg = full.segments[0]
    for name, g in sorted(seg.groups().items()):
        if g["samples"] <= budget.GROUP_SAMPLES:
            continue
        if full.fleet == budget.GROUP_SAMPLES_FLEET:
            over.append(
                f"rule group {name} touches {g['samples']:,} samples per evaluation at "
                f"{seg.nodes:,} nodes, measured (> {budget.GROUP_SAMPLES:,})"
            )
            continue
        cpu = seg.group_cost.get(name, {}).get("cpu")
        held = (
            f"{cpu:.2f} CPU-seconds per evaluation, measured: "
            + ("holds" if cpu < budget.GROUP_SECONDS else "over (above)")
            if cpu is not None
            else "not measured"
        )
        notes.append(
            f"Rule group {name} touches {g['samples']:,} samples per evaluation on this "
            f"fleet, above GROUP_SAMPLES ({budget.GROUP_SAMPLES:,}): not a budget of this "
            f"fleet. That bound is the CI test's stand-in for < {budget.GROUP_SECONDS:g} CPU-second "
            f"per group, projected to {budget.TARGET_NODES:,} nodes on the "
            f"{budget.GROUP_SAMPLES_FLEET} fleet only (bench/scale/budget.py, "
            f"tests/scale/test_budgets.py); the budget it stands in for, here: {held}."
        )
    return over, notes


def _profiled(p: dict, live: dict) -> str:
    """Prometheus' own rule evaluation over one cycle, from its CPU and allocs profiles."""
    per_cycle = p["attributed"] * budget.CYCLE / p["seconds"]
    cycles = live.get("rules_profiled_cycles", [p])
    return (
        f"**Prometheus' own evaluation of the rules (live, from its profiles).** Over "
        f"{p['seconds']:.0f} s of the live run, "
        + (f"{len(cycles)} cycles" if len(cycles) > 1 else "one cycle")
        + " of the slowest group (every group "
        f"evaluated a whole number of times), Prometheus' CPU profile put {p['part']:.2f} CPU-s on "
        "rule evaluation (rules.(*Group).Eval and the goroutines it starts: the queries, the "
        "records appended, the alerts kept and sent), and its background garbage collection "
        f"({p['gc_background']:.2f} CPU-s) {p['gc_background'] * p['alloc_fraction']:.2f} more, "
        f"its share of the bytes allocated ({p['alloc_fraction']:.0%})"
        + (
            f"; of the {p['part']:.2f}, {p['within']['queries']:.2f} in the rules' queries and "
            f"{p['within']['templates']:.2f} expanding the alerts' labels and annotations (Go "
            "templates, for every alert at every evaluation)"
            if "within" in p
            else ""
        )
        + f": **{per_cycle:.2f} CPU-s "
        f"per {budget.CYCLE} s**"
        + (
            " (the cycles one by one: "
            + ", ".join(f"{c['attributed'] * budget.CYCLE / c['seconds']:.2f}" for c in cycles)
            + ")"
            if len(cycles) > 1
            else ""
        )
        + f" against the {budget.CYCLE_SECONDS:g} CPU-second budget, with "
        f"no query of ours in between. Prometheus used {p['cpu']:.1f} CPU-s in all meanwhile, "
        f"ingesting {live['nodes']:,} targets (load average "
        f"{live.get('rules_profiled_load', '?')} at the end)."
    )


def _verdict(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return "yes" if seconds < budget.GROUP_SECONDS else "**NO**"


def render(
    meta: dict, fit: Run | None, full: Run | None, live: dict | None, day: Run | None = None
) -> str:
    out = [
        "# What kube-scale-exporter and its mixin cost Prometheus at 7,500 nodes",
        "",
        (
            "Generated by `python -m bench.scale` (bench/scale/). Real Prometheus "
            f"{meta.get('prometheus', '2.42')} and promtool on this machine ({meta.get('cpus')} cores, "
            "24 GiB, shared with other jobs; load averages per phase below)."
        ),
        "",
    ]
    fleets = sorted(
        {r.fleet for r in (fit, full, day) if r}
        | ({live.get("fleet", REALISTIC)} if live else set())
    )
    out += [
        "Fleet: "
        + "; ".join(f"**{name}**, {FLEETS[name]}" for name in fleets)
        + " (bench/scale/synth.py).",
        "",
    ]
    phases = [
        f"{name} {m['started']} to {m['finished'][-9:]} (load {m['load_before']} / {m['load_after']})"
        for name, m in meta.items()
        if isinstance(m, dict)
    ]
    if phases:
        out += ["Phases: " + "; ".join(phases) + ".", ""]
    out += ["## What ran", ""]
    if fit:
        segs = ", ".join(f"N={s.nodes}" for s in fit.segments)
        out.append(
            f"- **Fit run**: two back-to-back segments of history ({segs}), each "
            f"{_h(fit.segments[0].end - fit.segments[0].start)} at 30 s: {_n(fit.samples_written)} samples "
            f"synthesized in {fit.synth_seconds:.0f} s ({fit.openmetrics_bytes / 1e9:.1f} GB OpenMetrics), "
            f"backfilled by promtool in {fit.backfill_seconds:.0f} s; recording rules backfilled by "
            f"`promtool tsdb create-blocks-from rules` in {len(fit.rule_passes)} dependency passes "
            f"({sum(p['seconds'] for p in fit.rule_passes):.0f} s). Every query is evaluated at the end of "
            "each segment at its real range and step; "
            f"{_segment_length(fit.segments[0].end - fit.segments[0].start)}. Costs at 7,500 "
            "nodes are projected linearly from the two sizes."
        )
    if full:
        s = full.segments[0]
        out.append(
            f"- **Full run**: N={s.nodes} nodes, {_h(s.end - s.start)} of history at 30 s: "
            f"{_n(full.samples_written)} samples ({full.openmetrics_bytes / 1e9:.1f} GB OpenMetrics) "
            f"synthesized in {full.synth_seconds:.0f} s, backfilled in {full.backfill_seconds:.0f} s "
            f"({full.samples_written / full.backfill_seconds:,.0f} samples/s), recording rules in "
            f"{sum(p['seconds'] for p in full.rule_passes):.0f} s. The rules and alerts read per-node series "
            "over 5 min at most, so their costs here are measured at full N, not projected (the 1 h "
            "deriv and 6 h predict_linear read 8 fleet-level etcd series: the fit run has them whole). "
            f"Dashboard panels are evaluated at their 6 h range too but only {_h(s.end - s.start)} of it "
            "holds data: those rows are lower bounds; the fit run's projection is the 6 h figure."
        )
        out += [f"- {n}" for n in full.notes]
    if day:
        s = day.segments[0]
        per_node = day.template_series["node"] + 5  # plus up and scrape_* per target
        out.append(
            f"- **Day run**: N={s.nodes} nodes over {_h(s.end - s.start)} at 30 s: "
            f"{_n(day.samples_written)} samples ({day.openmetrics_bytes / 1e9:.1f} GB OpenMetrics), "
            f"backfilled in {day.backfill_seconds:.0f} s, recording rules in "
            f"{sum(p['seconds'] for p in day.rule_passes):.0f} s; every query ran at its end. The TSDB "
            f"(raw and recorded blocks, as written, before Prometheus compacts them) took "
            f"{day.tsdb_bytes / 2**20:,.0f} MiB: {day.tsdb_bytes / day.samples_written:.2f} bytes per raw "
            f"sample, so a day of 7,500 nodes ({_n(7500 * per_node * 2880)} raw samples) needs about "
            f"{7500 * per_node * 2880 * day.tsdb_bytes / day.samples_written / 2**30:.1f} GiB of disk."
        )
    if live:
        out.append(
            f"- **Live run**: Prometheus with the mixin's rules scraping {live['nodes']:,} node targets "
            f"and the cluster target (bench/scale/target.py) every 30 s for {live['settle_s']:.0f} s after "
            f"all series arrived ({live['ramp_s']:.0f} s ramp), compared with the same process before "
            "the targets were added."
        )
    out.append("")
    src = fit or full
    if src:
        out += [
            "## Series per target",
            "",
            "Template sources: "
            + "; ".join(
                f"{mode}: "
                + ", ".join(f"{c} ({where})" for c, where in src.template_sources[mode].items())
                for mode in ("node", "cluster")
            )
            + ".",
            "",
            "| target | exporter series | budget | with Prometheus' per-target series (up, scrape_*) |",
            "|---|---:|---:|---:|",
        ]
        seg = src.segments[-1]
        opt_in = template.opt_in_count("node")
        out.append(
            f"| node (default collectors) | {seg.node_series_max - opt_in} | {budget.NODE_SERIES} | {seg.node_series_prometheus - opt_in} |"
        )
        out.append(
            f"| node, as synthesized (+ opt-in {', '.join(sorted(template.OPT_IN_FAMILIES))}) | {seg.node_series_max} | | {seg.node_series_prometheus} |"
        )
        out.append(
            f"| cluster (every collector) | {seg.cluster_series} | {budget.CLUSTER_SERIES} | {seg.cluster_series + 5} |"
        )
        out.append("")
    if live:
        b, loaded = live["baseline"], live["loaded"]
        out += [
            "## Prometheus memory our series add (live, measured)",
            "",
            "| | baseline (self-scrape + rules) | with the fleet | added |",
            "|---|---:|---:|---:|",
            f"| head series | {_n(b['head_series'])} | {_n(loaded['head_series'])} | {_n(live['added_series'])} |",
            f"| RSS (VmRSS, max of 6 readings) | {_mb(b['rss'])} | {_mb(loaded['rss'])} | {_mb(live['added_rss'])} |",
            f"| Go heap in use (median) | {_mb(b['heap_inuse'])} | {_mb(loaded['heap_inuse'])} | {_mb(live['added_heap'])} |",
            "",
            (
                f"Per added head series: {live['added_rss'] / max(live['added_series'], 1):,.0f} bytes RSS, "
                f"{live['added_heap'] / max(live['added_series'], 1):,.0f} bytes heap. Slowest target scrape: "
                f"{live['scrape_duration_max'] * 1000:.0f} ms. The synthetic target process itself: "
                f"{_mb(live['target_rss'])} (not Prometheus)."
            ),
            "",
        ]
    if full or live:
        out += [
            "## Rule groups at 7,500 nodes",
            "",
            "- samples: the group's rules as instant queries at the end of the full run (stats=all);",
            (
                "- CPU / wall (blocks): Prometheus' CPU seconds (from /proc) and the wall time to evaluate the "
                "group's expressions one after another on the full run's backfilled blocks, each wrapped in "
                "count() so JSON encoding is left out; the cheapest of 3 rounds, each repeating the group until "
                "Prometheus has used 0.25 CPU-s (/proc counts in 10 ms ticks) and taking the mean. CPU seconds are what the "
                "group costs whatever else the shared machine runs: on a free core, its evaluation time;"
            ),
            "- Prometheus last / max: the group's own `evaluationTime` in the live run, while the same 2 "
            f"cores also ingested {live['nodes']:,} targets and ran the synthetic fleet and other jobs "
            f"(Prometheus used {live.get('prometheus_cores', 0):.2f} cores on average; load average "
            f"{live.get('load_average', '?')}; {live.get('missed_iterations', 0):.0f} missed iterations). Max includes the first "
            "evaluations after 7,500 targets appeared at once;"
            if live
            else "- Prometheus last / max: not measured (no live run).",
            "",
            (
                "- CPU / wall (head): the same by-hand evaluation on the live Prometheus' head right after the "
                "settle period, while it kept scraping: its CPU includes the concurrent ingestion (about a "
                "quarter of a core), so it overstates the group;"
            ),
            (
                "- verdicts: `CPU` on the blocks figure (the group alone); `live` on Prometheus' own last "
                "evaluationTime, the wall time on this shared machine."
            ),
            "",
            (
                "- interval / CPU per 30 s: the group's evaluation interval and its CPU (blocks) per "
                f"{budget.CYCLE} s of Prometheus' time (per evaluation x {budget.CYCLE} s / interval); "
                f"the last row sums them against the {budget.CYCLE_SECONDS:g} CPU-second budget."
            ),
            "",
            (
                "| group | rules | interval | samples touched | CPU (blocks) | CPU per 30 s | wall (blocks) | "
                "CPU (head) | wall (head) | Prometheus last | Prometheus max | < 1 s CPU | < 1 s live |"
            ),
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|:-:|",
        ]
        seg = full.segments[0] if full else None
        groups = seg.groups() if seg else {}
        costs = seg.group_cost if seg else {}
        live_groups = (live or {}).get("rule_groups", {})
        head_costs = (live or {}).get("head_group_cost", {})

        def ms(cost, key):
            return f"{cost[key] * 1000:.0f} ms" if cost else ""

        for name in sorted(set(groups) | set(live_groups)):
            g, c, h, lg = (
                groups.get(name, {}),
                costs.get(name),
                head_costs.get(name),
                live_groups.get(name, {}),
            )
            cycle = f"{budget.per_cycle(c) * 1000:.0f} ms" if c else ""
            interval = f"{c.get('interval', budget.CYCLE):.0f} s" if c else ""
            out.append(
                f"| {name} | {g.get('rules', '')} | {interval} | {_n(g.get('samples', 0))} | "
                f"{ms(c, 'cpu')} | {cycle} | {ms(c, 'wall')} | {ms(h, 'cpu')} | {ms(h, 'wall')} | "
                f"{lg.get('last', 0) * 1000:.0f} ms | {lg.get('max', 0) * 1000:.0f} ms | "
                f"{_verdict(c['cpu'] if c else None)} | {_verdict(lg.get('last'))} |"
            )
        if costs:
            total = sum(budget.per_cycle(c) for c in costs.values())
            out.append(
                f"| **all groups** | {sum(g.get('rules', 0) for g in groups.values())} | | "
                f"{_n(sum(g.get('samples', 0) for g in groups.values()))} | "
                f"{sum(c['cpu'] for c in costs.values()) * 1000:.0f} ms | **{total * 1000:.0f} ms** | "
                f"| | | | | {'yes' if total <= budget.CYCLE_SECONDS else '**NO**'} (<= "
                f"{budget.CYCLE_SECONDS:g} s per 30 s) | |"
            )
            floor = seg.query_floor_cpu
            if floor:
                per_cycle = sum(
                    groups.get(name, {}).get("rules", 0)
                    * budget.CYCLE
                    / c.get("interval", budget.CYCLE)
                    for name, c in costs.items()
                )
                out += [
                    "",
                    (
                        f"Each figure above includes the HTTP API's own cost per query: "
                        f"`count(vector(1))`, measured the same way, took {floor * 1000:.2f} ms "
                        f"of CPU. The groups run {per_cycle:.1f} rules per {budget.CYCLE} s, so "
                        f"about **{floor * per_cycle * 1000:.0f} ms** of the total per 30 s is that "
                        "floor, which Prometheus' own evaluation of a rule does not pay (it still "
                        "pays the engine's setup per rule, part of the floor)."
                    ),
                ]
        profiled = (live or {}).get("rules_profiled")
        if profiled:
            out += ["", _profiled(profiled, live)]
        out.append("")
    projections = budget.project(fit.segments[0], fit.segments[1]) if fit else []
    full_by_key = {budget.key(m): m for m in full.segments[0].measured} if full else {}
    if projections or full_by_key:
        n1, n2 = (fit.segments[0].nodes, fit.segments[1].nodes) if fit else (0, 0)
        nf = full.segments[0].nodes if full else 0
        out += [
            "## Every query",
            "",
            (
                f"samples = totalQueryableSamples, most in one step = the largest of totalQueryableSamplesPerStep "
                f"(promql-per-step-stats), peak = peakSamples (stats=all), series returned. "
                f"Fit columns at N={n1} and N={n2}; 7,500 proj. = linear projection; the full-run columns are "
                f"measured at N={nf} ({'rules and alerts: exact; panels: over the data the window holds' if full else ''}). "
                "Panel budgets: <= 5,000,000 samples and <= 50 series (topk-capped tables exempt from the series cap)."
            ),
            "",
            (
                "| kind | group | query | range/step | samples N1 | samples N2 | samples 7,500 proj. | series 7,500 proj. | "
                f"samples N={nf} | most in one step N={nf} | peak N={nf} | series N={nf} | wall N={nf} | budget |"
            ),
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|",
        ]
        rows = projections or []
        keys = [(p.kind, p.group, p.name) for p in rows] or list(full_by_key)
        by_key = {(p.kind, p.group, p.name): p for p in rows}
        for k in keys:
            p = by_key.get(k)
            fm = full_by_key.get(k)
            f = fm.result if fm else None
            q = fm.query if fm else p
            rs = (
                "instant"
                if q.kind != "panel" or getattr(q, "instant", False)
                else f"{_h(q.range_s)}/{q.step_s}s"
            )
            if q.kind == "panel" and getattr(q, "instant", False):
                rs = f"instant ({_h(q.range_s)} dashboard)"
            ok = ""
            if p and p.kind == "panel":
                good = p.samples_target <= budget.PANEL_SAMPLES and (
                    p.capped or p.series_target <= budget.PANEL_SERIES
                )
                ok = "ok" if good else "**OVER**"
            out.append(
                "| "
                + " | ".join(
                    [
                        k[0],
                        k[1].replace("kube-scale-exporter-", "").replace(".json", ""),
                        k[2].replace("|", "\\|"),
                        rs,
                        _n(p.samples[0]) if p else "",
                        _n(p.samples[1]) if p else "",
                        _n(p.samples_target) if p else "",
                        _n(p.series_target) + (" (topk)" if p and p.capped else "") if p else "",
                        _n(f.samples) if f else "",
                        _n(f.max_step_samples) if f else "",
                        _n(f.peak) if f else "",
                        _n(f.series) if f else "",
                        f"{f.wall * 1000:.0f} ms" if f else "",
                        ok,
                    ]
                )
                + " |"
            )
        out.append("")
    if projections and full_by_key:
        errors = []
        for p in projections:
            m = full_by_key.get((p.kind, p.group, p.name))
            if m and p.kind != "panel" and m.result.samples and p.per_node_samples > 0:
                errors.append(abs(p.samples_target - m.result.samples) / m.result.samples)
        out += [
            "## Projection check",
            "",
            (
                f"For the {len(errors)} rules and alerts whose cost grows with the fleet, samples projected from "
                f"N={fit.segments[0].nodes} and N={fit.segments[1].nodes} against those measured at "
                f"N={full.segments[0].nodes}: largest difference {max(errors, default=0):.1%}. (Those over "
                "fleet-level series cost the same at any N; the full run's 75 min cannot hold their 6 h "
                "windows, the fit run can.)"
            ),
            "",
        ]
    if full and full.segments[0].capped_fresh_series:
        out += [
            "## topk-capped tables",
            "",
            (
                "Rows from the rule's latest evaluation at 7,500 nodes (an instant query over backfilled "
                "recorded series also returns, for the 5 min lookback, nodes that just left the topk: "
                "promtool writes no staleness markers; a live Prometheus does):"
            ),
            "",
        ]
        out += [
            f"- {name}: {rows}"
            for name, rows in sorted(full.segments[0].capped_fresh_series.items())
        ]
        out.append("")
    if fit or full:
        seg = (fit or full).segments[-1]
        found = budget.violations(
            projections, seg.node_series_max - template.opt_in_count("node"), seg.cluster_series
        )
        found += [
            f"rule group {name} costs {c['cpu']:.2f} CPU-seconds per evaluation at {budget.TARGET_NODES} "
            f"nodes (budget < {budget.GROUP_SECONDS:g} s)"
            for name, c in sorted((full.segments[0].group_cost if full else {}).items())
            if c["cpu"] >= budget.GROUP_SECONDS
        ]
        found += [
            f"rule group {name}: Prometheus' own evaluation took {g['last']:.2f} s (last; max "
            f"{g['max']:.2f} s) at {budget.TARGET_NODES} nodes on this shared 2-core machine "
            f"(budget < {budget.GROUP_SECONDS:g} s)"
            for name, g in sorted((live or {}).get("rule_groups", {}).items())
            if g["last"] >= budget.GROUP_SECONDS
        ]
        over, notes = _group_samples(full)
        found += over
        if not fit:
            notes.append(
                "Not checked without a fit run: the dashboards' samples and series budgets "
                "(projected from two fleet sizes)."
            )
        out += ["## Budgets", ""]
        out += [f"- **OVER**: {v}" for v in found] or [
            "- Every budget holds at 7,500 nodes."
            if fit
            else "- Every budget checked holds at 7,500 nodes: series per target, and each "
            "rule group's CPU per evaluation (measured)."
        ]
        out += [f"- {n}" for n in notes]
        out.append("")
    return "\n".join(out)
