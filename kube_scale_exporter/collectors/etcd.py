"""etcd: database size against its quota, alarms, leadership, and what fills the store.

Off by default; on with --etcd.cluster NAME=URL[,URL...] (cluster mode: members are
discovered and each is asked at its own client URL) or --etcd.local (a DaemonSet pod on
an etcd node: only the local member, kubeadm's certificates). Member status is read on
scrape but at most once per --etcd.min-interval; key counts are refreshed in the
background once per --etcd.keys-interval. Exposition (etcd_cluster is the name given in
the flag, member the etcd member's name):

    # HELP kubescale_etcd_up Whether any member of the etcd cluster answered at the last refresh (at most one per --etcd.min-interval).
    # TYPE kubescale_etcd_up gauge
    kubescale_etcd_up{etcd_cluster="main"} 1.0
    # HELP kubescale_etcd_member_up Whether the member answered its Status request at the last refresh.
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
    # HELP kubescale_etcd_keys Keys per Kubernetes resource under --etcd.keys-prefix, counted at most once per --etcd.keys-interval (300s) in the background; the smaller resources are summed in resource="other".
    # TYPE kubescale_etcd_keys gauge
    kubescale_etcd_keys{etcd_cluster="main",resource="pods"} 110000.0
    # HELP kubescale_etcd_keys_refresh_timestamp_seconds When kubescale_etcd_keys was last counted for the cluster (Unix time).
    # TYPE kubescale_etcd_keys_refresh_timestamp_seconds gauge
    kubescale_etcd_keys_refresh_timestamp_seconds{etcd_cluster="main"} 1.7e+09

The collector fails only when no configured cluster answers; a cluster or member that
does not answer shows kubescale_etcd_up / kubescale_etcd_member_up 0 and no other series.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from prometheus_client.core import GaugeMetricFamily, Metric

from kube_scale_exporter.flagtypes import byte_size, duration, positive_int
from kube_scale_exporter.etcd.client import EtcdError, TLSFiles, new_session
from kube_scale_exporter.etcd.cluster import ClusterState, EtcdCluster
from kube_scale_exporter.etcd.keys import count_resources
from kube_scale_exporter.registry import Collector, Finding, HostPath, Needs, UsageError

log = logging.getLogger(__name__)

ALARMS = ("NOSPACE", "CORRUPT")
DEFAULT_QUOTA = 2 * 1024**3  # etcd's own default for --quota-backend-bytes
LOCAL_DEFAULT = "main=https://127.0.0.1:2379"
NO_TLS = TLSFiles()
KUBEADM_TLS = TLSFiles(
    ca="/etc/kubernetes/pki/etcd/ca.crt",
    cert="/etc/kubernetes/pki/etcd/healthcheck-client.crt",
    key="/etc/kubernetes/pki/etcd/healthcheck-client.key",
)
# check: when the database is this close to its quota, say so.
NEAR_QUOTA_WARNING, NEAR_QUOTA_CRITICAL = 0.6, 0.8
# check: free pages worth a defragment: a fifth of the quota and a third of the file.
DEFRAG_OF_QUOTA, DEFRAG_OF_SIZE = 0.2, 0.33
_NAME = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$")


def cluster_spec(value: str) -> tuple[str, tuple[str, ...]]:
    """NAME=URL[,URL...] with http(s)://HOST:PORT URLs."""
    name, sep, urls = value.partition("=")
    if not sep or not _NAME.match(name):
        raise argparse.ArgumentTypeError(
            f"expected NAME=URL[,URL...] with NAME like main or events, got {value!r}")
    endpoints = tuple(u.strip().rstrip("/") for u in urls.split(",") if u.strip())
    if not endpoints:
        raise argparse.ArgumentTypeError(f"no URL after {name}= in {value!r}")
    for url in endpoints:
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme not in ("http", "https") or not parts.hostname or port is None \
                or parts.path or parts.query:
            raise argparse.ArgumentTypeError(f"expected http(s)://HOST:PORT, got {url!r}")
    return name, endpoints


def keys_prefix(value: str) -> str:
    if not value.startswith("/"):
        raise argparse.ArgumentTypeError(f"must start with /, got {value!r}")
    return value if value.endswith("/") else value + "/"


def tls_files(args: argparse.Namespace) -> TLSFiles:
    """The TLS files given, or kubeadm's for --etcd.local over https without any given."""
    given = TLSFiles(args.etcd_ca_file, args.etcd_cert_file, args.etcd_key_file)
    local_https = any(url.startswith("https:") for _, urls in args.etcd_local for url in urls)
    if given == NO_TLS and local_https:
        return KUBEADM_TLS
    return given


@dataclass(frozen=True)
class EtcdState:
    """Every cluster's member status, the last key counts, and what the text needs."""

    clusters: list[ClusterState]
    keys: dict[str, tuple[dict[str, int], float]]
    keys_interval: float
    tls: TLSFiles


class EtcdCollector(Collector):
    """See the module docstring for the exposition."""

    name = "etcd"
    modes = frozenset({"node", "cluster"})
    default_enabled = False
    help = ("etcd database size against its quota, alarms, leader, keys per resource. "
            "On when --etcd.cluster or --etcd.local is given.")
    # Node mode runs beside a kubeadm etcd member with its healthcheck client pair (0600,
    # owned by root; never the CA key or the peer/server keys). Cluster mode reads remote
    # members; certificates, if any, come from a Secret the user mounts (docs/deploy.md).
    needs = {"node": Needs(
        host_paths=(HostPath("etcd-ca-crt", KUBEADM_TLS.ca, "File"),
                    HostPath("etcd-healthcheck-client-crt", KUBEADM_TLS.cert, "File"),
                    HostPath("etcd-healthcheck-client-key", KUBEADM_TLS.key, "File")),
        file_owner_root=True, args=("--etcd.local",))}

    @classmethod
    def add_arguments(cls, group):
        group.add_argument(
            "--etcd.cluster", dest="etcd_clusters", action="append", type=cluster_spec,
            default=[], metavar="NAME=URL[,URL...]",
            help="An etcd cluster to watch, e.g. main=https://10.0.0.1:2379 (repeatable: "
                 "main and events). Members are discovered from the member list and each "
                 "is asked at its own client URL.")
        group.add_argument(
            "--etcd.local", dest="etcd_local", action="append", type=cluster_spec,
            nargs="?", const=LOCAL_DEFAULT, default=[], metavar="NAME=URL",
            help=f"For a DaemonSet pod on an etcd node: watch only this member (default "
                 f"{LOCAL_DEFAULT}), with kubeadm's /etc/kubernetes/pki/etcd certificates "
                 f"unless --etcd.ca-file/--etcd.cert-file/--etcd.key-file are given. "
                 f"Key counts are taken only by the pod beside the leader.")
        group.add_argument("--etcd.ca-file", dest="etcd_ca_file", default=None, metavar="FILE",
                           help="CA bundle that signed etcd's serving certificate.")
        group.add_argument("--etcd.cert-file", dest="etcd_cert_file", default=None, metavar="FILE",
                           help="Client certificate for etcd (with --etcd.key-file).")
        group.add_argument("--etcd.key-file", dest="etcd_key_file", default=None, metavar="FILE",
                           help="Client key for etcd (with --etcd.cert-file).")
        group.add_argument("--etcd.timeout", dest="etcd_timeout", type=duration, metavar="DURATION",
                           default=2.0, help="Timeout of each request to etcd (default 2s).")
        group.add_argument("--etcd.quota-bytes", dest="etcd_quota_bytes", type=byte_size,
                           default=DEFAULT_QUOTA, metavar="BYTES",
                           help="Quota to assume when etcd tells neither in Status nor in "
                                "/metrics (default 2Gi, etcd's default).")
        group.add_argument("--etcd.min-interval", dest="etcd_min_interval",
                           type=duration, default=15.0, metavar="DURATION",
                           help="Serve member status from cache when younger than this, "
                                "whatever the number of scrapers (default 15s).")
        group.add_argument("--etcd.keys-interval", dest="etcd_keys_interval",
                           type=duration, default=300.0, metavar="DURATION",
                           help="Count keys per resource in the background this often "
                                "(default 300s).")
        group.add_argument("--etcd.keys-prefix", dest="etcd_keys_prefix", type=keys_prefix,
                           default="/registry/", metavar="PREFIX",
                           help="Key prefix of Kubernetes objects (kube-apiserver "
                                "--etcd-prefix; default /registry/).")
        group.add_argument("--etcd.keys-max-resources", dest="etcd_keys_max_resources",
                           type=positive_int, default=100, metavar="N",
                           help="Report at most this many resources per cluster, the "
                                "largest; the rest are summed in resource=\"other\" "
                                "(default 100).")

    @classmethod
    def enabled_by(cls, args):
        return bool(args.etcd_clusters or args.etcd_local)

    @classmethod
    def validate(cls, args):
        seen = set()
        for flag, specs in (("--etcd.cluster", args.etcd_clusters), ("--etcd.local", args.etcd_local)):
            for name, _ in specs:
                if name in seen:
                    raise UsageError(f"{flag}: cluster name {name!r} is given twice")
                seen.add(name)
        if bool(args.etcd_cert_file) != bool(args.etcd_key_file):
            flag = "--etcd.key-file" if args.etcd_cert_file else "--etcd.cert-file"
            raise UsageError(f"{flag}: --etcd.cert-file and --etcd.key-file go together")
        tls = tls_files(args)
        flags = ("--etcd.local",) * 3 if tls is KUBEADM_TLS else (
            "--etcd.ca-file", "--etcd.cert-file", "--etcd.key-file")
        for flag, path in zip(flags, (tls.ca, tls.cert, tls.key)):
            if path is not None and not os.access(path, os.R_OK):
                hint = " (kubeadm's default; give --etcd.ca-file, --etcd.cert-file and " \
                       "--etcd.key-file)" if flag == "--etcd.local" else ""
                raise UsageError(f"{flag}: cannot read {path}{hint}")

    def __init__(self, args):
        super().__init__(args)
        self.tls = tls_files(args)
        session = new_session(self.tls)
        specs = [(name, urls, True) for name, urls in args.etcd_clusters]
        specs += [(name, urls, False) for name, urls in args.etcd_local]
        self.clusters = [
            EtcdCluster(name, list(urls), discover, session, args.etcd_timeout,
                        args.etcd_quota_bytes, quota_max_age=args.etcd_keys_interval)
            for name, urls, discover in specs
        ]
        self.local = bool(args.etcd_local)
        self.min_interval = args.etcd_min_interval
        self.keys_interval = args.etcd_keys_interval
        self.keys_prefix = args.etcd_keys_prefix.encode()
        self.max_resources = args.etcd_keys_max_resources
        self._pool = ThreadPoolExecutor(max_workers=len(self.clusters), thread_name_prefix="etcd-cluster")
        self._lock = threading.Lock()
        self._states: list[ClusterState] | None = None
        self._taken = 0.0
        self._keys: dict[str, tuple[dict[str, int], float]] = {}
        self._keys_counted = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self):
        self._thread = threading.Thread(target=self._keys_loop, name="etcd-keys", daemon=True)
        self._thread.start()

    def close(self):
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def states(self) -> list[ClusterState]:
        """Every cluster's state, refreshed when older than --etcd.min-interval.

        Concurrent scrapes wait for one refresh rather than each sending their own.
        """
        with self._lock:
            if self._states is None or time.monotonic() - self._taken >= self.min_interval:
                self._states = list(self._pool.map(EtcdCluster.refresh, self.clusters))
                self._taken = time.monotonic()
            return self._states

    def keys(self) -> dict[str, tuple[dict[str, int], float]]:
        with self._lock:
            return dict(self._keys)

    def _keys_loop(self):
        while not self._stop.is_set():
            try:
                self.count_keys()
            except Exception:
                log.exception("etcd: counting keys failed; trying again in %ss", self.keys_interval)
            self._keys_counted.set()
            self._stop.wait(self.keys_interval)

    def count_keys(self):
        """Count keys per resource in every cluster; keep the last counts on failure."""
        leading = None
        if self.local:
            # Every etcd node runs a pod; only the leader's counts, so they are taken once.
            leading = {s.name for s in self.states()
                       if any(m.status and m.status.is_leader for m in s.members)}
        for cluster in self.clusters:
            if leading is not None and cluster.name not in leading:
                with self._lock:
                    self._keys.pop(cluster.name, None)
                continue
            try:
                counts = count_resources(cluster.answering_client(), self.keys_prefix,
                                         self.max_resources)
            except EtcdError as exc:
                log.warning("etcd cluster %s: counting keys failed: %s", cluster.name, exc)
                continue
            with self._lock:
                self._keys[cluster.name] = (counts, time.time())

    def observe(self) -> EtcdState:
        states = self.states()
        if not any(s.up for s in states):
            raise EtcdError("; ".join(f"{s.name}: {s.error}" for s in states))
        return EtcdState(states, self.keys(), self.keys_interval, self.tls)

    @staticmethod
    def families(state: EtcdState) -> list[Metric]:
        return exposition(state.clusters, state.keys, state.keys_interval)

    @staticmethod
    def advise(state: EtcdState) -> list[Finding]:
        return advise(state.clusters, state.keys, state.tls)

    def wait_ready(self) -> None:
        # `check` runs once, right after start(): let the first key count finish.
        if self._thread is not None:
            self._keys_counted.wait(timeout=10 * self.args.etcd_timeout)


def exposition(states: list[ClusterState], keys: dict[str, tuple[dict[str, int], float]],
               keys_interval: float) -> list[Metric]:
    """The metric families for these cluster states and key counts (see module docstring)."""
    cl, mem = ["etcd_cluster"], ["etcd_cluster", "member"]
    up = GaugeMetricFamily(
        "kubescale_etcd_up", "Whether any member of the etcd cluster answered at the last "
        "refresh (at most one per --etcd.min-interval).", labels=cl)
    member_up = GaugeMetricFamily(
        "kubescale_etcd_member_up",
        "Whether the member answered its Status request at the last refresh.", labels=mem)
    size = GaugeMetricFamily(
        "kubescale_etcd_db_size_bytes", "Size of the member's backend database file; etcd "
        "refuses writes when it reaches the quota.", labels=mem)
    in_use = GaugeMetricFamily(
        "kubescale_etcd_db_size_in_use_bytes", "Bytes of the backend database in use; the "
        "rest is free pages that a defragment returns.", labels=mem)
    quota = GaugeMetricFamily(
        "kubescale_etcd_quota_bytes", "The member's backend quota (--quota-backend-bytes); "
        "source in kubescale_etcd_quota_info.", labels=mem)
    quota_info = GaugeMetricFamily(
        "kubescale_etcd_quota_info", "Where kubescale_etcd_quota_bytes came from: status "
        "(etcd 3.6+ Status), metrics (the member's /metrics) or flag (--etcd.quota-bytes).",
        labels=[*mem, "source"])
    alarm = GaugeMetricFamily(
        "kubescale_etcd_alarm_active", "Whether the alarm is raised on the member (NOSPACE: "
        "writes refused until compact, defragment and disarm).", labels=[*mem, "alarm"])
    leader = GaugeMetricFamily(
        "kubescale_etcd_is_leader", "Whether the member is the raft leader.", labels=mem)
    term = GaugeMetricFamily(
        "kubescale_etcd_raft_term", "The member's raft term; a rise is a leader election.",
        labels=mem)
    applied = GaugeMetricFamily(
        "kubescale_etcd_raft_applied_index", "The member's last applied raft index.",
        labels=mem)
    key_count = GaugeMetricFamily(
        "kubescale_etcd_keys", f"Keys per Kubernetes resource under --etcd.keys-prefix, "
        f"counted at most once per --etcd.keys-interval ({keys_interval:g}s) in the "
        f"background; the smaller resources are summed in resource=\"other\".",
        labels=["etcd_cluster", "resource"])
    key_time = GaugeMetricFamily(
        "kubescale_etcd_keys_refresh_timestamp_seconds",
        "When kubescale_etcd_keys was last counted for the cluster (Unix time).", labels=cl)
    for state in states:
        up.add_metric([state.name], 1.0 if state.up else 0.0)
        for m in state.members:
            labels = [state.name, m.name]
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
            term.add_metric(labels, m.status.raft_term)
            applied.add_metric(labels, m.status.raft_applied_index)
        if state.name in keys:
            counts, when = keys[state.name]
            for resource, n in sorted(counts.items()):
                key_count.add_metric([state.name, resource], n)
            key_time.add_metric([state.name], when)
    return [up, member_up, size, in_use, quota, quota_info, alarm, leader, term, applied,
            key_count, key_time]


CORRUPT_ADVICE = ("Do not disarm CORRUPT: the member's data differs from the others. Remove "
                  "the member and add it back empty so it copies a healthy member's data.")


def etcdctl(url: str | None, tls: TLSFiles) -> str:
    """The etcdctl command line that reaches this member as the exporter does."""
    parts = ["etcdctl", f"--endpoints={url or 'URL'}"]
    for flag, path in (("--cacert", tls.ca), ("--cert", tls.cert), ("--key", tls.key)):
        if path:
            parts.append(f"{flag}={path}")
    return " ".join(parts)


def nospace_advice(ctl: str) -> str:
    """A shell script: compact the history, defragment every member, then disarm."""
    return (
        "# Compact the history, defragment every member (one at a time: each blocks while it\n"
        "# runs), then disarm; the alarm stays raised until disarmed.\n"
        f"rev=$({ctl} endpoint status --write-out=json | grep -o '\"revision\":[0-9]*' | head -1 | cut -d: -f2)\n"
        f"{ctl} compaction --physical \"$rev\"\n"
        f"{ctl} defrag --cluster\n"
        f"{ctl} alarm disarm")


def _mib(n: float) -> str:
    return f"{n / 1024**2:,.0f} MiB"


def advise(states: list[ClusterState], keys: dict[str, tuple[dict[str, int], float]],
           tls: TLSFiles = NO_TLS) -> list[Finding]:
    """What `check` tells a person: quota, alarms, fragmentation, events in the main etcd.

    Commands name the member URLs and TLS files the exporter uses, so they run as printed.
    """
    out = []
    for state in states:
        if not state.up:
            out.append(Finding("critical", f"etcd {state.name}: no member answered",
                               f"error: {state.error}"))
            continue
        answering = [m for m in state.members if m.status is not None]
        nospace = [m.name for m in answering if m.alarms and "NOSPACE" in m.alarms]
        if nospace:
            out.append(Finding(
                "critical", f"etcd {state.name}: alarm NOSPACE is raised on {', '.join(nospace)} "
                "(writes are refused)", nospace_advice(etcdctl(answering[0].url, tls))))
        for m in state.members:
            where = f"etcd {state.name} member {m.name}"
            if m.status is None:
                out.append(Finding("warning", f"{where}: did not answer", f"error: {m.error}"))
                continue
            s = m.status
            used = s.db_size / m.quota_bytes
            if m.alarms and "CORRUPT" in m.alarms:
                out.append(Finding("critical", f"{where}: alarm CORRUPT is raised", CORRUPT_ADVICE))
            if used >= NEAR_QUOTA_WARNING:
                severity = "critical" if used >= NEAR_QUOTA_CRITICAL else "warning"
                out.append(Finding(
                    severity, f"{where}: database {_mib(s.db_size)} is {used:.0%} of its "
                    f"{_mib(m.quota_bytes)} quota ({m.quota_source})",
                    "At the quota etcd raises NOSPACE and refuses every write. Defragment if "
                    "much is free (see below), move events to their own etcd, or raise "
                    "--quota-backend-bytes (etcd recommends at most 8 GiB) on every member."))
            free = s.db_size - s.db_size_in_use
            if free >= DEFRAG_OF_QUOTA * m.quota_bytes and free >= DEFRAG_OF_SIZE * s.db_size:
                out.append(Finding(
                    "warning", f"{where}: {_mib(free)} of the {_mib(s.db_size)} database is "
                    "free pages; a defragment returns them",
                    "# one member at a time: the member blocks while it defragments\n"
                    f"{etcdctl(m.url, tls)} defrag"))
        counts = keys.get(state.name, ({}, 0))[0]
        events = counts.get("events", 0)
        others = sum(v for k, v in counts.items() if k != "events")
        if events and others:
            out.append(Finding(
                "warning", f"etcd {state.name}: holds {events:,} event keys "
                f"({events / (events + others):.0%} of {events + others:,}) beside the "
                "cluster's objects",
                "Events churn and fill the database; give them their own etcd cluster:\n"
                "kube-apiserver --etcd-servers-overrides=/events#https://EVENTS-ETCD:2379\n"
                "(and watch it here with --etcd.cluster events=https://EVENTS-ETCD:2379)"))
        elif counts:
            total = sum(counts.values())
            out.append(Finding("info", f"etcd {state.name}: {total:,} keys in "
                               f"{len(counts)} resources, largest "
                               f"{max(counts, key=counts.get)}"))
    return out
