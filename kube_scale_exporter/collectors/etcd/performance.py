"""The etcd collector's performance series: each member's disk latency and read load,
re-exported from the member's own /metrics (read once per refresh with Status, at the
client URL or --etcd.metrics-url) with our etcd_cluster and member labels:

    # HELP kubescale_etcd_member_metrics_up Whether the member's /metrics was read at the last refresh; 0: the series below are missing for it (the error is in `check` and the log).
    # TYPE kubescale_etcd_member_metrics_up gauge
    kubescale_etcd_member_metrics_up{etcd_cluster="main",member="m0"} 1.0
    # HELP kubescale_etcd_wal_fsync_duration_seconds etcd's WAL fsync latency (etcd_disk_wal_fsync_duration_seconds) at fewer bounds; etcd wants its p99 below 10ms. No _sum/_count: _count is the +Inf bucket.
    # TYPE kubescale_etcd_wal_fsync_duration_seconds histogram
    kubescale_etcd_wal_fsync_duration_seconds_bucket{etcd_cluster="main",le="0.002",member="m0"} 9000.0
    kubescale_etcd_wal_fsync_duration_seconds_bucket{etcd_cluster="main",le="0.008",member="m0"} 9800.0
    kubescale_etcd_wal_fsync_duration_seconds_bucket{etcd_cluster="main",le="0.016",member="m0"} 9900.0
    kubescale_etcd_wal_fsync_duration_seconds_bucket{etcd_cluster="main",le="0.032",member="m0"} 9990.0
    kubescale_etcd_wal_fsync_duration_seconds_bucket{etcd_cluster="main",le="0.256",member="m0"} 10000.0
    kubescale_etcd_wal_fsync_duration_seconds_bucket{etcd_cluster="main",le="+Inf",member="m0"} 10000.0
    # HELP kubescale_etcd_backend_commit_duration_seconds etcd's backend commit latency (etcd_disk_backend_commit_duration_seconds) at fewer bounds; etcd wants its p99 below 25ms. No _sum/_count: _count is the +Inf bucket.
    # TYPE kubescale_etcd_backend_commit_duration_seconds histogram
    (the same six buckets)
    # HELP kubescale_etcd_client_sent_bytes_total Bytes the member sent to its gRPC clients (etcd_network_client_grpc_sent_bytes_total): the kube-apiservers' read bandwidth. Resets when the member restarts.
    # TYPE kubescale_etcd_client_sent_bytes_total counter
    kubescale_etcd_client_sent_bytes_total{etcd_cluster="main",member="m0"} 3.56e+09
    # HELP kubescale_etcd_range_requests_total Range requests the member answered, any result (grpc_server_handled_total of etcdserverpb.KV Range and, from etcd 3.7, RangeStream): the apiservers' GETs and LISTs. Resets when the member restarts.
    # TYPE kubescale_etcd_range_requests_total counter
    kubescale_etcd_range_requests_total{etcd_cluster="main",member="m0"} 120000.0
    # HELP kubescale_etcd_writes_refused_total Writes (KV Put and Txn, lease grants) the member refused with ResourceExhausted: database space exceeded (over the quota, or a NOSPACE alarm raised) or too many requests (applying lags). Resets when the member restarts.
    # TYPE kubescale_etcd_writes_refused_total counter
    kubescale_etcd_writes_refused_total{etcd_cluster="main",member="m0"} 0.0

16 series per member whose page was read (1 + 2 x 6 + 3), 1 for one whose page was not.
A member whose /metrics cannot be read fails only these series: its Status series stay.
"""

# The exposition above is quoted as served, its HELP lines whole.
from __future__ import annotations

from kube_scale_exporter.etcd.cluster import ClusterState
from kube_scale_exporter.metrics import CounterFamily, Family, GaugeFamily, HistogramFamily


def performance_families(clusters: list[ClusterState]) -> list[Family]:
    mem = ["etcd_cluster", "member"]
    up = GaugeFamily(
        "kubescale_etcd_member_metrics_up",
        "Whether the member's /metrics was read at the "
        "last refresh; 0: the series below are missing for it (the error is in `check` and "
        "the log).",
        labels=mem,
    )
    fsync = HistogramFamily(
        "kubescale_etcd_wal_fsync_duration_seconds",
        "etcd's WAL fsync latency "
        "(etcd_disk_wal_fsync_duration_seconds) at fewer bounds; etcd wants its p99 below "
        "10ms. No _sum/_count: _count is the +Inf bucket.",
        labels=mem,
    )
    commit = HistogramFamily(
        "kubescale_etcd_backend_commit_duration_seconds",
        "etcd's backend commit latency "
        "(etcd_disk_backend_commit_duration_seconds) at fewer bounds; etcd wants its p99 "
        "below 25ms. No _sum/_count: _count is the +Inf bucket.",
        labels=mem,
    )
    sent = CounterFamily(
        "kubescale_etcd_client_sent_bytes",
        "Bytes the member sent to its gRPC clients "
        "(etcd_network_client_grpc_sent_bytes_total): the kube-apiservers' read bandwidth. "
        "Resets when the member restarts.",
        labels=mem,
    )
    ranges = CounterFamily(
        "kubescale_etcd_range_requests",
        "Range requests the member answered, any result "
        "(grpc_server_handled_total of etcdserverpb.KV Range and, from etcd 3.7, "
        "RangeStream): the apiservers' GETs and LISTs. Resets when the member restarts.",
        labels=mem,
    )
    refused = CounterFamily(
        "kubescale_etcd_writes_refused",
        "Writes (KV Put and Txn, lease grants) the member refused with ResourceExhausted: "
        "database space "
        "exceeded (over the quota, or a NOSPACE alarm raised) or too many requests "
        "(applying lags). Resets when the member restarts.",
        labels=mem,
    )
    for cluster in clusters:
        for m in cluster.members:
            labels = [cluster.name, m.name]
            page = m.metrics
            up.add_metric(labels, 0.0 if page is None else 1.0)
            if page is None:
                continue
            # Sums are left out on purpose (sum_value=None): see the HELP text.
            if page.fsync is not None:
                fsync.add_metric(labels, page.fsync.buckets(), None)
            if page.commit is not None:
                commit.add_metric(labels, page.commit.buckets(), None)
            if page.sent_bytes is not None:
                sent.add_metric(labels, page.sent_bytes)
            if page.range_requests is not None:
                ranges.add_metric(labels, page.range_requests)
            if page.writes_refused is not None:
                refused.add_metric(labels, page.writes_refused)
    return [up, fsync, commit, sent, ranges, refused]
