"""What our series cost Prometheus' memory, measured on a live server scraping a fleet.

One Prometheus with the mixin's rules runs first with only its self-scrape (the baseline),
then its config is reloaded with N node targets and the cluster target served by
bench.scale.target. After the fleet has been scraped for `settle` seconds (rate windows
full, every rule group evaluated many times) we read, from the same process: RSS (the
kernel's VmRSS), the Go heap in use, head series and chunks, and each rule group's own
evaluation time as Prometheus reports it. The difference from the baseline is what the
exporter's series, their 7,500 scrape loops and the mixin's rules add.

Then, over one cycle of the slowest rule group (every group evaluates a whole number of
times in it), Prometheus' own CPU and allocation profiles: the CPU its rule evaluation
used (bench.scale.gocpu), records written and alerts kept included, with no query of ours
in between.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.scale import gocpu, queries, template
from bench.scale.measure import group_cost
from bench.scale.synth import REALISTIC
from bench.scale.prom import SCRAPE_INTERVAL, Prometheus
from bench.scale.target import scrape_configs
from testbed.ports import free_port
from testbed.procs import Proc, wait_for_port


@dataclass
class Memory:
    rss: float
    heap_inuse: float
    head_series: float
    head_chunks: float


@dataclass
class LiveRun:
    nodes: int
    settle_s: float
    baseline: Memory
    loaded: Memory
    expected_series: int
    rule_groups: dict[str, dict]  # name -> {"last": s, "max": s} Prometheus' own evaluationTime
    scrape_duration_max: float
    target_rss: int
    ramp_s: float
    prometheus_cores: float  # CPU Prometheus used over the settle period, in cores
    load_average: str  # the machine's 1/5/15-min load when the settle period ended
    # The groups' expressions run by hand on the live head right after the settle period
    # (bench.scale.measure.group_cost): CPU and wall seconds per group, best of 3.
    head_group_cost: dict[str, dict[str, float]]
    missed_iterations: float  # prometheus_rule_group_iterations_missed_total, all groups
    # Prometheus' rule evaluation over PROFILED_CYCLES cycles of the slowest group, from
    # its profiles: all of them (gocpu.Share.as_dict, summed), each one, and the load
    # average at the end.
    rules_profiled: dict
    rules_profiled_load: str
    rules_profiled_cycles: list[dict]
    fleet: str = REALISTIC  # the target's story (bench.scale.synth.FLEETS)

    @property
    def added_rss(self) -> float:
        return self.loaded.rss - self.baseline.rss

    @property
    def added_heap(self) -> float:
        return self.loaded.heap_inuse - self.baseline.heap_inuse

    @property
    def added_series(self) -> float:
        return self.loaded.head_series - self.baseline.head_series

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "added_rss": self.added_rss,
            "added_heap": self.added_heap,
            "added_series": self.added_series,
        }


def _memory(prom: Prometheus, samples: int = 6, every: float = 5.0) -> Memory:
    """Readings over half a minute: RSS at its highest, heap and head at their median."""
    rss, heap, series, chunks = [], [], [], []
    for _ in range(samples):
        rss.append(prom.rss_bytes())
        heap.append(prom.metric("go_memstats_heap_inuse_bytes"))
        series.append(prom.metric("prometheus_tsdb_head_series"))
        chunks.append(prom.metric("prometheus_tsdb_head_chunks"))
        time.sleep(every)
    return Memory(
        max(rss), statistics.median(heap), statistics.median(series), statistics.median(chunks)
    )


# The rule groups' evaluation, from the group's tick to the records appended and alerts
# sent: rules.(*Group).Eval and the goroutines it starts for rules evaluated concurrently
# (Eval.func1), not EvalTimestamp.
RULE_EVALUATION = re.compile(r"/rules\.\(\*Group\)\.Eval\b")
# Where it goes: the rules' queries, and the alerting rules' labels and annotations, each
# expanded as a Go template for every alert at every evaluation.
RULE_EVALUATION_PARTS = {
    "queries": re.compile(r"/promql\.\(\*Engine\)\.exec\b"),
    "templates": re.compile(r"/template\.Expander\.Expand\b"),
}


# Two cycles: the run-to-run spread of one figure, at 4 more minutes.
PROFILED_CYCLES = 2


def _summed(cycles: list[dict]) -> dict:
    """The cycles' shares as one over all their seconds; the GC share by the bytes."""
    total = {k: sum(c[k] for c in cycles) for k in ("seconds", "cpu", "part", "gc_background")}
    attributed = sum(c["attributed"] for c in cycles)
    gc_share = attributed - total["part"]
    within = {k: sum(c["within"][k] for c in cycles) for k in cycles[0]["within"]}
    return {
        **total,
        "alloc_fraction": gc_share / total["gc_background"] if total["gc_background"] else 0.0,
        "attributed": attributed,
        "within": within,
    }


def _interval(group: dict) -> int:
    return int(queries.duration_seconds(group.get("interval", f"{SCRAPE_INTERVAL}s")))


def _proc_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def run(
    workdir: Path,
    nodes: int,
    settle_s: float = 300,
    baseline_s: float = 60,
    rule_files=queries.RULE_FILES,
    log=lambda *a: None,
    fleet: str = REALISTIC,
) -> LiveRun:
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    target = Proc(
        [
            sys.executable,
            "-m",
            "bench.scale.target",
            "--nodes",
            str(nodes),
            "--port",
            str(port),
            "--fleet",
            fleet,
        ],
        workdir / "target.log",
    )
    data = workdir / "live-data"
    prom = Prometheus(workdir, data, rule_files=rule_files)
    try:
        wait_for_port(port, proc=target)
        prom.start()
        time.sleep(baseline_s)
        baseline = _memory(prom)
        log(f"baseline: {baseline}")
        prom.reload(scrape_configs(nodes, port))
        expected = nodes * (len(template.load("node")) + 5) + len(template.load("cluster")) + 5
        ramp_began = time.monotonic()
        while prom.metric("prometheus_tsdb_head_series") < baseline.head_series + expected:
            if time.monotonic() - ramp_began > 600:
                raise TimeoutError(
                    f"head has {prom.metric('prometheus_tsdb_head_series')} series, "
                    f"expected {baseline.head_series + expected}"
                )
            time.sleep(2)
        ramp_s = time.monotonic() - ramp_began
        log(f"all {expected} series in the head after {ramp_s:.0f}s; settling {settle_s:.0f}s")
        groups: dict[str, dict] = {}
        cpu_began, settle_began = prom.cpu_seconds(), time.monotonic()
        settle_end = time.monotonic() + settle_s
        while time.monotonic() < settle_end:
            time.sleep(min(30, max(0.0, settle_end - time.monotonic())))
            for g in prom.rule_groups():
                entry = groups.setdefault(g["name"], {"last": 0.0, "max": 0.0})
                entry["last"] = g["evaluationTime"]
                entry["max"] = max(entry["max"], g["evaluationTime"])
        cores = (prom.cpu_seconds() - cpu_began) / (time.monotonic() - settle_began)
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        cycle = max(_interval(g) for g in queries.load_rule_groups(rule_files))
        cycles = []
        for i in range(PROFILED_CYCLES):
            log(f"profiling rule evaluation over {cycle}s ({i + 1} of {PROFILED_CYCLES})")
            profiles = gocpu.fetch(prom.url, cycle, workdir / f"profiles-{i}")
            one = gocpu.share(*profiles, RULE_EVALUATION, cycle).as_dict()
            one["within"] = gocpu.within(profiles[0], RULE_EVALUATION, RULE_EVALUATION_PARTS)
            log(f"rule evaluation: {one}")
            cycles.append(one)
        profiled = _summed(cycles)
        profiled_load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        loaded = _memory(prom)
        log(f"loaded: {loaded}")
        head_cost = group_cost(prom, queries.load_rule_groups(rule_files), int(time.time()))
        missed = prom.metric("prometheus_rule_group_iterations_missed_total")
        scrape_max = prom.scalar('max(scrape_duration_seconds{job=~"kube-scale-exporter-.*"})')
        return LiveRun(
            nodes,
            settle_s,
            baseline,
            loaded,
            expected,
            groups,
            scrape_max,
            _proc_rss(target.pid),
            ramp_s,
            cores,
            load,
            head_cost,
            missed,
            profiled,
            profiled_load,
            cycles,
            fleet,
        )
    finally:
        prom.stop()
        target.stop()
