"""N nodes' worth of scrapes, as Prometheus would have stored them, in OpenMetrics text.

Every node target gets the node template's series plus the five series Prometheus adds
per target (up, scrape_*), with the target labels Prometheus adds (instance, job, node);
the cluster Deployment is one more target. Values move the way a fleet does:

- neighbor tables: ordinary nodes hold a few hundred entries against tuned thresholds; 2%
  of nodes still run the kernel defaults (gc_thresh3 1024), and half of those climb
  towards it in 2 h cycles, crossing 80% and 95% and overflowing at the top;
- image pulls: every node pulls now and then; 1% carry a backlog of 3-7 queued pulls
  behind a 17 GB image (oldest pull ages in 1 h saw-teeth); 0.3% have a stalled download;
  two thirds keep the kubelet's serialized pulls;
- etcd: main grows ~20 kB/s against 8 GiB, events ~4 kB/s against 2 GiB (so its quota
  prediction fires), in-use bytes saw-tooth with compaction;
- balloons: 48 of 50 Running; every 20 min a burst preempts 6-12 that refill over ~10 min.

The output is grouped by family (OpenMetrics requires it) and written as it is made, so
memory stays flat whatever N is.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from bench.scale.template import Series, Template

NODE_JOB = "kube-scale-exporter-node"
CLUSTER_JOB = "kube-scale-exporter-cluster"
EXPORTER_PORT = 9808
TARGET_SERIES = (
    "up",
    "scrape_duration_seconds",
    "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling",
    "scrape_series_added",
)


def node_name(i: int) -> str:
    return f"gpu-pool-a-{i:05d}.us-central1-b.internal"


def node_labels(i: int) -> dict[str, str]:
    return {
        "instance": f"10.{64 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}:{EXPORTER_PORT}",
        "job": NODE_JOB,
        "node": node_name(i),
    }


CLUSTER_LABELS = {"instance": f"10.80.0.17:{EXPORTER_PORT}", "job": CLUSTER_JOB}


@dataclass(frozen=True)
class Roles:
    """Which part a node plays in the fleet's story; a fixed function of its index."""

    i: int

    @property
    def h(self) -> int:
        return zlib.crc32(str(self.i).encode())

    @property
    def kernel_default_thresholds(self) -> bool:
        return self.i % 50 == 0

    @property
    def neighbor_hot(self) -> bool:
        return self.i % 100 == 0

    @property
    def pull_backlog(self) -> bool:
        return self.i % 100 == 37

    @property
    def pull_stalled(self) -> bool:
        return self.i % 331 == 7

    @property
    def serialized_pulls(self) -> bool:
        return self.i % 3 != 0

    @property
    def preload_missing(self) -> bool:
        return self.i % 173 == 2


def _phase(h: int, period: float) -> float:
    return float(h % int(period))


def _counter(rate: float, t: np.ndarray, start: float = 0.0) -> np.ndarray:
    return np.floor(start + rate * t)


def _neighbor_entries(r: Roles, family: str, t: np.ndarray) -> np.ndarray:
    scale = 1.0 if family == "ipv4" else 0.2
    if r.neighbor_hot:
        cycle = ((t + _phase(r.h, 7200)) % 7200) / 7200  # 0..1 over 2 h
        return np.floor(scale * (560 + 480 * cycle))  # up to 1040 > 1024: full at the top
    base = scale * (120 + r.h % 400)
    return np.floor(base * (1 + 0.1 * np.sin(2 * np.pi * (t + _phase(r.h, 3600)) / 3600)))


def _thresholds(r: Roles, name: str) -> float:
    level = {
        "kubescale_neighbor_gc_thresh1": 0,
        "kubescale_neighbor_gc_thresh2": 1,
        "kubescale_neighbor_gc_thresh3": 2,
    }[name]
    return (
        (128.0, 512.0, 1024.0)[level]
        if r.kernel_default_thresholds
        else (80000.0, 90000.0, 100000.0)[level]
    )


def _pull_in_progress(r: Roles, t: np.ndarray) -> np.ndarray:
    if r.pull_backlog or r.pull_stalled:
        return np.ones_like(t)
    return (((t + _phase(r.h, 1800)) % 1800) < 90).astype(float)


def node_values(s: Series, r: Roles, t: np.ndarray) -> np.ndarray:
    """Values of one node series at offsets t (seconds from the window start)."""
    labels = dict(s.labels)
    name, family = s.name, labels.get("family", "ipv4")
    if name == "kubescale_neighbor_entries":
        return _neighbor_entries(r, family, t)
    if name == "kubescale_neighbor_gc_eligible_entries":
        return np.floor(_neighbor_entries(r, family, t) * 0.97)
    if name.startswith("kubescale_neighbor_gc_thresh"):
        return np.full_like(t, _thresholds(r, name))
    if name == "kubescale_neighbor_table_overflows_total":
        if not r.neighbor_hot:
            return np.zeros_like(t)
        full = _neighbor_entries(r, family, t) >= 1024 * (1.0 if family == "ipv4" else 0.2)
        return np.cumsum(full * 7.0)
    if name == "kubescale_neighbor_forced_gc_runs_total":
        return _counter(0.05 if r.neighbor_hot else 0.0005, t, r.h % 7)
    if name == "kubescale_neighbor_allocations_total":
        return _counter(0.4 if family == "ipv4" else 0.08, t, s.value + r.h % 1000)
    if name == "kubescale_neighbor_destroys_total":
        allocs = _counter(0.4 if family == "ipv4" else 0.08, t, s.value + r.h % 1000)
        return allocs - _neighbor_entries(r, family, t)
    if name in (
        "kubescale_neighbor_unresolved_discards_total",
        "kubescale_neighbor_resolution_failures_total",
    ):
        return _counter(0.002, t, s.value)
    if name == "kubescale_image_pulls_in_progress":
        return _pull_in_progress(r, t)
    if name == "kubescale_image_pulls_queued":
        return np.full_like(t, 3 + r.h % 5) if r.pull_backlog else np.zeros_like(t)
    if name == "kubescale_image_pull_oldest_seconds":
        if r.pull_backlog:
            return np.floor((t + _phase(r.h, 3600)) % 3600)
        return np.floor(((t + _phase(r.h, 1800)) % 1800) * _pull_in_progress(r, t))
    if name == "kubescale_image_pull_expected_bytes":
        size = 17e9 if r.pull_backlog else 2.1e9
        return size * _pull_in_progress(r, t)
    if name == "kubescale_image_pull_downloaded_bytes":
        if r.pull_stalled:
            return np.full_like(t, 7.3e8)
        speed = 1e7 if r.pull_backlog else 2.5e7
        age = (t + _phase(r.h, 3600 if r.pull_backlog else 1800)) % (
            3600 if r.pull_backlog else 1800
        )
        return np.floor(
            np.minimum(age * speed, 17e9 if r.pull_backlog else 2.1e9) * _pull_in_progress(r, t)
        )
    if name == "kubescale_image_pull_stalled":
        return np.full_like(t, 1.0 if r.pull_stalled else 0.0)
    if name == "kubescale_kubelet_serialize_image_pulls":
        return np.full_like(t, 1.0 if r.serialized_pulls else 0.0)
    if name == "kubescale_kubelet_max_parallel_image_pulls":
        return np.full_like(t, 0.0 if r.serialized_pulls else 5.0)
    if name == "kubescale_image_preload_missing":
        return np.full_like(t, 1.0 if r.preload_missing else 0.0)
    if name == "kubescale_kube_last_sync_age_seconds":
        return np.floor((t + _phase(r.h, 60)) % 60)
    if name == "kubescale_scrape_collector_duration_seconds":
        return np.round(s.value * (1 + 0.3 * np.sin(t / 97.0 + r.h)), 6)
    return _default(s, t)


def _default(s: Series, t: np.ndarray) -> np.ndarray:
    """A family the story does not know (a new golden file): counters climb, gauges hold."""
    if s.kind == "counter" or s.name.endswith(("_total", "_count", "_sum", "_bucket")):
        return _counter(0.01, t, s.value)
    return np.full_like(t, s.value)


ETCD_QUOTA = {"main": 8 * 2**30, "events": 2 * 2**30}
ETCD_START = {"main": 3.5e9, "events": 1.55e9}
ETCD_GROWTH = {"main": 2e4, "events": 4e3}
BALLOONS = 50
BUCKET_SHARE = (0.05, 0.3, 0.5, 0.65, 0.8, 0.9, 0.96, 0.98, 0.995, 0.998, 0.999, 1.0)


def _balloons_preempted(t: np.ndarray) -> np.ndarray:
    """Balloons missing at t: a burst of 6-12 every 20 min, refilled one per minute."""
    since = t % 1200
    burst = 6 + (np.floor(t / 1200) % 7)
    return np.maximum(burst - np.floor(since / 60), 0) + 2


def cluster_values(s: Series, t: np.ndarray) -> np.ndarray:
    labels = dict(s.labels)
    name = s.name
    cluster = labels.get("etcd_cluster", "main")
    member = int(labels.get("member", "x-0").rsplit("-", 1)[-1] or 0) if "member" in labels else 0
    if name == "kubescale_etcd_db_size_bytes":
        return np.floor(ETCD_START[cluster] + ETCD_GROWTH[cluster] * t + 1e6 * member)
    if name == "kubescale_etcd_db_size_in_use_bytes":
        size = ETCD_START[cluster] + ETCD_GROWTH[cluster] * t
        return np.floor(size * (0.6 + 0.2 * ((t % 1800) / 1800)))
    if name == "kubescale_etcd_quota_bytes":
        return np.full_like(t, float(ETCD_QUOTA[cluster]))
    if name == "kubescale_etcd_raft_applied_index":
        return _counter(800.0 if cluster == "main" else 300.0, t, s.value)
    if name == "kubescale_etcd_keys":
        return np.floor(s.value * (1 + t / 86400 * 0.05))
    if name == "kubescale_balloon_pods":
        missing = _balloons_preempted(t)
        return {"Running": BALLOONS - missing, "Pending": missing}.get(
            labels.get("phase"), np.zeros_like(t)
        )
    if name == "kubescale_balloon_pending_oldest_seconds":
        return np.floor(t % 1200)
    if name == "kubescale_balloon_nodes":
        return BALLOONS - _balloons_preempted(t)
    if name == "kubescale_etcd_is_leader":
        return np.full_like(t, 1.0 if member == 0 else 0.0)
    if name in ("kubescale_etcd_up", "kubescale_etcd_member_up"):
        return np.ones_like(t)
    if name in ("kubescale_etcd_alarm_active", "kubescale_balloon_misconfigured"):
        return np.zeros_like(t)
    if name == "kubescale_balloon_reserved":
        per = {"cpu": 90.0, "memory": 1.6e12, "nvidia_com_gpu": 8.0, "hugepages_2Mi": 2**30}
        return (BALLOONS - _balloons_preempted(t)) * per.get(labels.get("resource"), 1.0)
    if name == "kubescale_balloon_preemptions_total":
        return np.floor(t / 1200) * 9 + 3
    if s.kind == "histogram":
        pulls = _counter(1.5, t, 1000.0)
        if name.endswith("_bucket"):
            le = labels["le"]
            shares = dict(
                zip(
                    (
                        "1.0",
                        "5.0",
                        "15.0",
                        "30.0",
                        "60.0",
                        "120.0",
                        "300.0",
                        "600.0",
                        "1200.0",
                        "1800.0",
                        "3600.0",
                        "+Inf",
                    ),
                    BUCKET_SHARE,
                    strict=True,
                )
            )
            return np.floor(pulls * shares.get(le, 1.0))
        if name.endswith("_count"):
            return pulls
        return np.floor(pulls * 45.0)
    return _default(s, t)


def target_values(series_count: int, name: str, t: np.ndarray, h: int) -> np.ndarray:
    if name == "up":
        return np.ones_like(t)
    if name == "scrape_duration_seconds":
        return np.round(0.004 + 0.002 * np.abs(np.sin(t / 61.0 + h)), 6)
    if name in ("scrape_samples_scraped", "scrape_samples_post_metric_relabeling"):
        return np.full_like(t, float(series_count))
    return np.zeros_like(t)  # scrape_series_added: nothing new after the first scrape


def _fmt_labels(labels: dict[str, str]) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return "{" + body + "}"


def _fmt_value(v: float) -> str:
    return str(int(v)) if v == int(v) and abs(v) < 1e15 else repr(v)


def _write_series(out: TextIO, prefix: str, values: np.ndarray, stamps: list[str]) -> int:
    vals = values.tolist()
    if vals.count(vals[0]) == len(vals):
        v = _fmt_value(vals[0])
        out.write("".join([f"{prefix} {v} {ts}\n" for ts in stamps]))
    else:
        out.write(
            "".join(
                [f"{prefix} {_fmt_value(v)} {ts}\n" for v, ts in zip(vals, stamps, strict=False)]
            )
        )
    return len(vals)


def _openmetrics_family(s: Series) -> tuple[str, str]:
    """The family name and type for OpenMetrics (the parser already strips a counter's _total)."""
    return s.family, s.kind if s.kind in ("gauge", "counter", "histogram", "summary") else "unknown"


@dataclass(frozen=True)
class Segment:
    """A stretch of history with a fleet of `nodes` nodes, scraped every `interval` s."""

    nodes: int
    start: int
    end: int
    interval: int

    @property
    def stamps(self) -> np.ndarray:
        return np.arange(self.start, self.end + 1, self.interval, dtype=np.int64)


def write(out: TextIO, node: Template, cluster: Template, segments: list[Segment]) -> int:
    """Write the OpenMetrics text of every segment; returns the samples written.

    Values are functions of the time since the first segment began, so the cluster's series
    run on across segments while the node count changes between them.
    """
    origin = segments[0].start
    prepared = []
    for seg in segments:
        stamps = seg.stamps
        prepared.append((seg, [str(x) for x in stamps.tolist()], (stamps - origin).astype(float)))
    most = max(seg.nodes for seg in segments)
    roles = [Roles(i) for i in range(most)]
    labels = [node_labels(i) for i in range(most)]
    samples = 0

    groups: dict[str, list[tuple[Series, str, str]]] = {}
    for mode_series, mode in ((node.series, "node"), (cluster.series, "cluster")):
        for s in mode_series:
            fam, kind = _openmetrics_family(s)
            groups.setdefault(fam, []).append((s, mode, kind))

    for fam, members in groups.items():
        out.write(f"# TYPE {fam} {members[0][2]}\n")
        for s, mode, _ in members:
            own = dict(s.labels)
            for seg, stamps, t in prepared:
                if mode == "node":
                    for r, tl in zip(roles[: seg.nodes], labels, strict=False):
                        prefix = s.name + _fmt_labels({**own, **tl})
                        samples += _write_series(out, prefix, node_values(s, r, t), stamps)
                else:
                    prefix = s.name + _fmt_labels({**own, **CLUSTER_LABELS})
                    samples += _write_series(out, prefix, cluster_values(s, t), stamps)

    for name in TARGET_SERIES:
        out.write(f"# TYPE {name} gauge\n")
        for seg, stamps, t in prepared:
            for r, tl in zip(roles[: seg.nodes], labels, strict=False):
                samples += _write_series(
                    out, name + _fmt_labels(tl), target_values(len(node), name, t, r.h), stamps
                )
            samples += _write_series(
                out,
                name + _fmt_labels(CLUSTER_LABELS),
                target_values(len(cluster), name, t, 0),
                stamps,
            )
    out.write("# EOF\n")
    return samples
