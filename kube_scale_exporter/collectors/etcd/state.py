"""etcd: database size against its quota, alarms, leadership, and what fills the store.

Off by default; on with --etcd.cluster NAME=URL[,URL...] (cluster mode: members are
discovered and each is asked at its own client URL) or --etcd.local (a DaemonSet pod on
an etcd node: only the local member, by default through its key-less /metrics). Member
status is read on scrape but at most once per --etcd.min-interval; key counts are
refreshed in the background once per --etcd.keys-interval. Exposition (etcd_cluster is
the name given in the flag, member the etcd member's name):

    # HELP kubescale_etcd_up Whether any member of the etcd cluster answered at the last refresh (at most one per --etcd.min-interval).
    # TYPE kubescale_etcd_up gauge
    kubescale_etcd_up{etcd_cluster="main"} 1.0
    # HELP kubescale_etcd_member_up Whether the member answered at the last refresh: its Status request, or its /metrics with --etcd.local-access=metrics.
    # TYPE kubescale_etcd_member_up gauge
    kubescale_etcd_member_up{etcd_cluster="main",member="m0"} 1.0
    # HELP kubescale_etcd_db_size_bytes Size of the member's backend database file; etcd refuses writes when it reaches the quota.
    # TYPE kubescale_etcd_db_size_bytes gauge
    kubescale_etcd_db_size_bytes{etcd_cluster="main",member="m0"} 1.7907712e+07
    # HELP kubescale_etcd_db_size_in_use_bytes Bytes of the backend database in use; the rest is free pages that a defragment returns.
    # TYPE kubescale_etcd_db_size_in_use_bytes gauge
    kubescale_etcd_db_size_in_use_bytes{etcd_cluster="main",member="m0"} 1.6863232e+07
    # HELP kubescale_etcd_quota_bytes The member's backend quota (--quota-backend-bytes); source in kubescale_etcd_quota_info.
    # TYPE kubescale_etcd_quota_bytes gauge
    kubescale_etcd_quota_bytes{etcd_cluster="main",member="m0"} 1.6777216e+07
    # HELP kubescale_etcd_quota_info Where kubescale_etcd_quota_bytes came from: status (etcd 3.6+ Status), metrics (the member's /metrics) or flag (--etcd.quota-bytes).
    # TYPE kubescale_etcd_quota_info gauge
    kubescale_etcd_quota_info{etcd_cluster="main",member="m0",source="metrics"} 1.0
    # HELP kubescale_etcd_alarm_active Whether the alarm is raised on the member (NOSPACE: writes refused until compact, defragment and disarm).
    # TYPE kubescale_etcd_alarm_active gauge
    kubescale_etcd_alarm_active{alarm="NOSPACE",etcd_cluster="main",member="m0"} 1.0
    kubescale_etcd_alarm_active{alarm="CORRUPT",etcd_cluster="main",member="m0"} 0.0
    # HELP kubescale_etcd_is_leader Whether the member is the raft leader.
    # TYPE kubescale_etcd_is_leader gauge
    kubescale_etcd_is_leader{etcd_cluster="main",member="m0"} 1.0
    # HELP kubescale_etcd_raft_term The member's raft term; a rise is a leader election.
    # TYPE kubescale_etcd_raft_term gauge
    kubescale_etcd_raft_term{etcd_cluster="main",member="m0"} 2.0
    # HELP kubescale_etcd_raft_applied_index The member's last applied raft index.
    # TYPE kubescale_etcd_raft_applied_index gauge
    kubescale_etcd_raft_applied_index{etcd_cluster="main",member="m0"} 37.0
    # HELP kubescale_etcd_version_info The etcd version the member runs, 1; two versions in one etcd_cluster are a rolling upgrade or downgrade part way (the cluster runs as its oldest member).
    # TYPE kubescale_etcd_version_info gauge
    kubescale_etcd_version_info{etcd_cluster="main",member="m0",version="3.7.3"} 1.0
    # HELP kubescale_etcd_keys Keys per Kubernetes resource under --etcd.keys-prefix, counted at most once per --etcd.keys-interval (300s) in the background; the smaller resources are summed in resource="other".
    # TYPE kubescale_etcd_keys gauge
    kubescale_etcd_keys{etcd_cluster="main",resource="pods"} 110000.0
    # HELP kubescale_etcd_keys_refresh_timestamp_seconds When kubescale_etcd_keys was last counted for the cluster (Unix time).
    # TYPE kubescale_etcd_keys_refresh_timestamp_seconds gauge
    kubescale_etcd_keys_refresh_timestamp_seconds{etcd_cluster="main"} 1.7e+09

Then each member's disk latency, read load and refused writes, from its own /metrics:
performance.py.

With --etcd.local-access=metrics (the default of --etcd.local) the member's /metrics stands
in for Status (etcd/page.py): the same series but kubescale_etcd_alarm_active,
kubescale_etcd_raft_term and the key counts, and member is the member's id in hex (its
name is in the member list, which needs a client certificate). A raised NOSPACE shows
there as kubescale_etcd_writes_refused_total rising.

The collector fails only when no configured cluster answers; a cluster or member that
does not answer shows kubescale_etcd_up / kubescale_etcd_member_up 0 and no other Status
series; a member whose /metrics cannot be read, kubescale_etcd_member_metrics_up 0.
"""

# The exposition above is quoted as served, its HELP lines whole.
from __future__ import annotations

from dataclasses import dataclass

from kube_scale_exporter.collectors.etcd.config import NO_TLS
from kube_scale_exporter.collectors.etcd.performance import performance_families
from kube_scale_exporter.etcd.client import TLSFiles
from kube_scale_exporter.etcd.cluster import ClusterState
from kube_scale_exporter.labels import sanitize
from kube_scale_exporter.metrics import Family, GaugeFamily

ALARMS = ("NOSPACE", "CORRUPT")
VERSION_CHARS = 40  # "3.7.3", "3.6.0-rc.1": a version label is short


@dataclass(frozen=True)
class EtcdState:
    """Every cluster's member status, the last key counts, and what the text needs."""

    clusters: list[ClusterState]
    keys: dict[str, tuple[dict[str, int], float]]
    keys_interval: float
    tls: TLSFiles = NO_TLS  # what advice's etcdctl commands pass
    # Clusters read through /metrics alone (--etcd.local-access=metrics): no alarm list,
    # raft term or key counts, and no client URL for etcdctl.
    metrics_only: frozenset[str] = frozenset()


def families(state: EtcdState) -> list[Family]:
    """The exposition of one state (see the module docstring)."""
    keys, keys_interval = state.keys, state.keys_interval
    cl, mem = ["etcd_cluster"], ["etcd_cluster", "member"]
    up = GaugeFamily(
        "kubescale_etcd_up",
        "Whether any member of the etcd cluster answered at the last "
        "refresh (at most one per --etcd.min-interval).",
        labels=cl,
    )
    member_up = GaugeFamily(
        "kubescale_etcd_member_up",
        "Whether the member answered at the last refresh: its Status request, or its "
        "/metrics with --etcd.local-access=metrics.",
        labels=mem,
    )
    size = GaugeFamily(
        "kubescale_etcd_db_size_bytes",
        "Size of the member's backend database file; etcd "
        "refuses writes when it reaches the quota.",
        labels=mem,
    )
    in_use = GaugeFamily(
        "kubescale_etcd_db_size_in_use_bytes",
        "Bytes of the backend database in use; the rest is free pages that a defragment returns.",
        labels=mem,
    )
    quota = GaugeFamily(
        "kubescale_etcd_quota_bytes",
        "The member's backend quota (--quota-backend-bytes); source in kubescale_etcd_quota_info.",
        labels=mem,
    )
    quota_info = GaugeFamily(
        "kubescale_etcd_quota_info",
        "Where kubescale_etcd_quota_bytes came from: status "
        "(etcd 3.6+ Status), metrics (the member's /metrics) or flag (--etcd.quota-bytes).",
        labels=[*mem, "source"],
    )
    alarm = GaugeFamily(
        "kubescale_etcd_alarm_active",
        "Whether the alarm is raised on the member (NOSPACE: "
        "writes refused until compact, defragment and disarm).",
        labels=[*mem, "alarm"],
    )
    leader = GaugeFamily(
        "kubescale_etcd_is_leader", "Whether the member is the raft leader.", labels=mem
    )
    term = GaugeFamily(
        "kubescale_etcd_raft_term",
        "The member's raft term; a rise is a leader election.",
        labels=mem,
    )
    applied = GaugeFamily(
        "kubescale_etcd_raft_applied_index", "The member's last applied raft index.", labels=mem
    )
    version = GaugeFamily(
        "kubescale_etcd_version_info",
        "The etcd version the member runs, 1; two versions in one etcd_cluster are a rolling "
        "upgrade or downgrade part way (the cluster runs as its oldest member).",
        labels=[*mem, "version"],
    )
    key_count = GaugeFamily(
        "kubescale_etcd_keys",
        f"Keys per Kubernetes resource under --etcd.keys-prefix, "
        f"counted at most once per --etcd.keys-interval ({keys_interval:g}s) in the "
        f'background; the smaller resources are summed in resource="other".',
        labels=["etcd_cluster", "resource"],
    )
    key_time = GaugeFamily(
        "kubescale_etcd_keys_refresh_timestamp_seconds",
        "When kubescale_etcd_keys was last counted for the cluster (Unix time).",
        labels=cl,
    )
    for cluster in state.clusters:
        up.add_metric([cluster.name], 1.0 if cluster.up else 0.0)
        for m in cluster.members:
            labels = [cluster.name, m.name]
            member_up.add_metric(labels, 1.0 if m.status else 0.0)
            if m.status is None:
                continue
            size.add_metric(labels, m.status.db_size)
            in_use.add_metric(labels, m.status.db_size_in_use)
            quota.add_metric(labels, m.quota_bytes)
            quota_info.add_metric([*labels, m.quota_source], 1.0)
            if m.alarms is not None:
                for name in ALARMS:
                    alarm.add_metric([*labels, name], 1.0 if name in m.alarms else 0.0)
            leader.add_metric(labels, 1.0 if m.status.is_leader else 0.0)
            if m.status.raft_term is not None:
                term.add_metric(labels, m.status.raft_term)
            applied.add_metric(labels, m.status.raft_applied_index)
            if m.status.version:
                version.add_metric([*labels, sanitize(m.status.version, VERSION_CHARS)], 1.0)
        if cluster.name in keys:
            counts, when = keys[cluster.name]
            for resource, n in sorted(counts.items()):
                key_count.add_metric([cluster.name, resource], n)
            key_time.add_metric([cluster.name], when)
    return [
        up,
        member_up,
        size,
        in_use,
        quota,
        quota_info,
        alarm,
        leader,
        term,
        applied,
        version,
        key_count,
        key_time,
        *performance_families(state.clusters),
    ]
