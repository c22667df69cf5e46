"""N nodes' worth of scrapes, as Prometheus would have stored them, in OpenMetrics text.

Every node target gets the node template's series plus the five series Prometheus adds
per target (up, scrape_*), with the target labels Prometheus adds (instance, job, node);
the cluster Deployment is one more target. Values move the way a fleet does:

- neighbor tables: ordinary nodes hold a few hundred entries against tuned thresholds; 2%
  of nodes still run the kernel defaults (gc_thresh3 1024), and half of those climb
  towards it in 2 h cycles, crossing 80% and 95% and overflowing at the top;
- image pulls: every node pulls now and then; 1% carry a backlog of 3-7 queued pulls
  behind a 17 GB image (oldest pull ages in 1 h saw-teeth); 0.3% have a stalled download;
  1.6% hold containers whose pulls fail (ImagePullBackOff); two thirds keep the kubelet's
  serialized pulls;
- registry mirrors: 2.5% of nodes (a pool on an old node image) have the golden files'
  mirror directories that containerd ignores; the rest have the same directories used;
- etcd: main grows ~20 kB/s against 8 GiB, events ~4 kB/s against 2 GiB (so its quota
  prediction fires), in-use bytes saw-tooth with compaction; fsyncs and commits mostly
  under 2 ms on local SSDs, each member sending ~30 MB/s (main) or ~5 MB/s (events);
- balloons: 48 of 50 Running; every 20 min a burst preempts 6-12 that refill over ~10 min.

That is the realistic fleet (the default). The thresholds fleet is the worst case for the
rules: every node sits at or past each per-node alert's threshold (mixin/config.libsonnet),
so every per-node alert expression selects every node and the records and alerts that keep
only the nodes in trouble hold all of them:

- neighbor tables: both families on the kernel defaults (gc_thresh3 1024), GC-eligible
  entries at gc_thresh3 or a few below (never under 95%), overflowing at every scrape;
- image pulls: every node serializes pulls and holds 3-7 queued behind a stalled 17 GB
  download whose oldest pull is past 20 min; every node misses a preloaded image;
- a third of the nodes run other containerd pull settings than the rest;
- every collector fails two scrapes in three, the pod watch is down, and each target
  reports one sample more than the node series budget;
- every node has failing images and registry mirrors containerd ignores (the golden files'
  values).

Targets down cannot join them (a target that is down has no series to read), and the
cluster Deployment's series are the realistic fleet's: its alerts read a few series at any N.

The output is grouped by family (OpenMetrics requires it) and written as it is made, so
memory stays flat whatever N is.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from bench.scale.template import Series, Template
from kube_scale_exporter.budgets import NODE_SERIES
from kube_scale_exporter.containerd.hostsdir import USED

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

REALISTIC, THRESHOLDS = "realistic", "thresholds"
FLEETS = {
    REALISTIC: "realistic spread: a few nodes in trouble, the rest healthy",
    THRESHOLDS: "every node at the per-node alerts' thresholds: the rules' worst case",
}
# The kernel's default gc_thresh3, which every table of the thresholds fleet runs on.
KERNEL_THRESH3 = 1024.0
SCRAPE_SECONDS = 30


@dataclass(frozen=True)
class Roles:
    """Which part a node plays in the fleet's story; a fixed function of its index and the
    fleet (in the thresholds fleet every node plays every part in trouble)."""

    i: int
    fleet: str = REALISTIC

    @property
    def h(self) -> int:
        return zlib.crc32(str(self.i).encode())

    @property
    def at_thresholds(self) -> bool:
        return self.fleet == THRESHOLDS

    @property
    def kernel_default_thresholds(self) -> bool:
        return self.at_thresholds or self.i % 50 == 0

    @property
    def neighbor_hot(self) -> bool:
        return self.at_thresholds or self.i % 100 == 0

    @property
    def pull_backlog(self) -> bool:
        return self.at_thresholds or self.i % 100 == 37

    @property
    def pull_stalled(self) -> bool:
        return self.at_thresholds or self.i % 331 == 7

    @property
    def serialized_pulls(self) -> bool:
        return self.at_thresholds or self.i % 3 != 0

    @property
    def pulls_failing(self) -> bool:
        return self.at_thresholds or self.i % 61 == 19

    @property
    def mirrors_ignored(self) -> bool:
        return self.at_thresholds or self.i % 40 == 23

    @property
    def preload_missing(self) -> bool:
        return self.at_thresholds or self.i % 173 == 2

    @property
    def pull_settings_differ(self) -> bool:
        # A third: a minority, so the cluster still has the majority the alert compares with.
        return self.at_thresholds and self.i % 3 == 0


def _phase(h: int, period: float) -> float:
    return float(h % int(period))


def _counter(rate: float, t: np.ndarray, start: float = 0.0) -> np.ndarray:
    return np.floor(start + rate * t)


def _scrapes(t: np.ndarray) -> np.ndarray:
    return np.floor(t / SCRAPE_SECONDS)


def _full_table_eligible(r: Roles, t: np.ndarray) -> np.ndarray:
    """Thresholds fleet: GC-eligible entries at gc_thresh3 or up to 7 below (over 99%)."""
    return KERNEL_THRESH3 - (_scrapes(t) + r.h) % 8


def _neighbor_entries(r: Roles, family: str, t: np.ndarray) -> np.ndarray:
    if r.at_thresholds:
        # 8 PERMANENT entries (a CNI's) beside the full table: the kernel does not count them.
        return _full_table_eligible(r, t) + 8
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


def _gc_eligible(r: Roles, family: str, t: np.ndarray) -> np.ndarray:
    if r.at_thresholds:
        return _full_table_eligible(r, t)
    return np.floor(_neighbor_entries(r, family, t) * 0.97)


def _table_full(r: Roles, family: str, t: np.ndarray) -> np.ndarray:
    """Scrapes at which the table refused a neighbor (its overflow counter moves)."""
    if r.at_thresholds:
        return np.ones_like(t)
    if not r.neighbor_hot:
        return np.zeros_like(t)
    return _neighbor_entries(r, family, t) >= 1024 * (1.0 if family == "ipv4" else 0.2)


def _oldest_pull(r: Roles, t: np.ndarray) -> np.ndarray:
    if r.at_thresholds:
        # Past imagePullOldestSeconds (20 min) at every scrape, in 1 h saw-teeth.
        return np.floor(1230 + (t + _phase(r.h, 3600)) % 3600)
    if r.pull_backlog:
        return np.floor((t + _phase(r.h, 3600)) % 3600)
    return np.floor(((t + _phase(r.h, 1800)) % 1800) * _pull_in_progress(r, t))


def _collector_success(r: Roles, t: np.ndarray) -> np.ndarray:
    if r.at_thresholds:
        # One success in three scrapes: past collectorFailingRatio (0.5) over any 5 min.
        return ((_scrapes(t) + r.h) % 3 == 0).astype(float)
    return np.ones_like(t)


def _pull_in_progress(r: Roles, t: np.ndarray) -> np.ndarray:
    if r.pull_backlog or r.pull_stalled:
        return np.ones_like(t)
    return (((t + _phase(r.h, 1800)) % 1800) < 90).astype(float)


def node_series_labels(s: Series, r: Roles) -> dict[str, str]:
    """The labels one node gives series `s` of the template: the golden files' mirror
    directories are ignored ones, which a node whose containerd reads them reports as used."""
    labels = dict(s.labels)
    if s.name == "kubescale_containerd_registry_mirror_hosts" and not r.mirrors_ignored:
        labels.update(verdict="used", reason=USED)
    return labels


def node_values(s: Series, r: Roles, t: np.ndarray) -> np.ndarray:
    """Values of one node series at offsets t (seconds from the window start)."""
    labels = dict(s.labels)
    name, family = s.name, labels.get("family", "ipv4")
    if name == "kubescale_neighbor_entries":
        return _neighbor_entries(r, family, t)
    if name == "kubescale_neighbor_gc_eligible_entries":
        return _gc_eligible(r, family, t)
    if name.startswith("kubescale_neighbor_gc_thresh"):
        return np.full_like(t, _thresholds(r, name))
    if name == "kubescale_neighbor_table_overflows_total":
        return np.cumsum(_table_full(r, family, t) * 7.0)
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
        return _oldest_pull(r, t)
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
    if name == "kubescale_image_pulls_failing":
        return np.full_like(t, s.value if r.pulls_failing else 0.0)
    if name == "kubescale_image_preload_missing":
        return np.full_like(t, 1.0 if r.preload_missing else 0.0)
    if name == "kubescale_containerd_max_concurrent_downloads" and r.pull_settings_differ:
        return np.full_like(t, 5.0)
    if name == "kubescale_containerd_image_pull_progress_timeout_seconds" and (
        r.pull_settings_differ
    ):
        return np.full_like(t, 600.0)
    if name == "kubescale_scrape_collector_success":
        return _collector_success(r, t)
    if name == "kubescale_kube_watch_up" and r.at_thresholds:
        return np.zeros_like(t)
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
    if name in (
        "kubescale_etcd_wal_fsync_duration_seconds_bucket",
        "kubescale_etcd_backend_commit_duration_seconds_bucket",
    ):
        # 100 fsyncs (50 commits) a second, 98% under 2 ms, none over 16 ms.
        per_s = 100.0 if "fsync" in name else 50.0
        share = {"0.002": 0.98, "0.008": 0.995}.get(labels["le"], 1.0)
        return np.floor(_counter(per_s, t, 1e6) * share)
    if name == "kubescale_etcd_client_sent_bytes_total":
        return _counter(3e7 if cluster == "main" else 5e6, t, 1e12)
    if name == "kubescale_etcd_range_requests_total":
        return _counter(300.0 if cluster == "main" else 20.0, t, 1e6)
    if name == "kubescale_etcd_member_metrics_up":
        return np.ones_like(t)
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
    """A stretch of history with a fleet of `nodes` nodes, scraped every `interval` s; the
    fleet's story is `fleet` (FLEETS)."""

    nodes: int
    start: int
    end: int
    interval: int
    fleet: str = REALISTIC

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
    (fleet,) = {seg.fleet for seg in segments}
    roles = [Roles(i, fleet) for i in range(most)]
    labels = [node_labels(i) for i in range(most)]
    # The thresholds fleet's targets each report one sample past the node series budget.
    node_samples = len(node) if fleet == REALISTIC else NODE_SERIES + 1
    samples = 0

    groups: dict[str, list[tuple[Series, str, str]]] = {}
    for mode_series, mode in ((node.series, "node"), (cluster.series, "cluster")):
        for s in mode_series:
            fam, kind = _openmetrics_family(s)
            groups.setdefault(fam, []).append((s, mode, kind))

    for fam, members in groups.items():
        out.write(f"# TYPE {fam} {members[0][2]}\n")
        for s, mode, _ in members:
            for seg, stamps, t in prepared:
                if mode == "node":
                    for r, tl in zip(roles[: seg.nodes], labels, strict=False):
                        prefix = s.name + _fmt_labels({**node_series_labels(s, r), **tl})
                        samples += _write_series(out, prefix, node_values(s, r, t), stamps)
                else:
                    prefix = s.name + _fmt_labels({**dict(s.labels), **CLUSTER_LABELS})
                    samples += _write_series(out, prefix, cluster_values(s, t), stamps)

    for name in TARGET_SERIES:
        out.write(f"# TYPE {name} gauge\n")
        for seg, stamps, t in prepared:
            for r, tl in zip(roles[: seg.nodes], labels, strict=False):
                samples += _write_series(
                    out, name + _fmt_labels(tl), target_values(node_samples, name, t, r.h), stamps
                )
            samples += _write_series(
                out,
                name + _fmt_labels(CLUSTER_LABELS),
                target_values(len(cluster), name, t, 0),
                stamps,
            )
    out.write("# EOF\n")
    return samples
