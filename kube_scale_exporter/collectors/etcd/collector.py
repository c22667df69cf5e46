"""The `etcd` collector: member status cached for --etcd.min-interval, and the background
thread that counts keys per resource every --etcd.keys-interval.

The flags are in config.py, the exposition in state.py's docstring, the `check` text in
advice.py.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kube_scale_exporter.collectors.etcd.advice import advise
from kube_scale_exporter.collectors.etcd.config import (
    KUBEADM_TLS,
    add_arguments,
    local_specs,
    tls_files,
    validate,
)
from kube_scale_exporter.collectors.etcd.state import EtcdState, families
from kube_scale_exporter.etcd.client import EtcdError, new_session
from kube_scale_exporter.etcd.cluster import ClusterState, EtcdCluster
from kube_scale_exporter.etcd.keys import count_resources
from kube_scale_exporter.etcd.metrics_only import MetricsOnlyCluster
from kube_scale_exporter.registry import Collector, HostPath, Needs

log = logging.getLogger(__name__)


# --etcd.local-access=full beside a kubeadm member: its healthcheck client pair (0600, owned
# by root; never the CA key or the peer/server keys), a key with full access to etcd.
FULL_ACCESS_NEEDS = Needs(
    host_paths=(
        HostPath("etcd-ca-crt", KUBEADM_TLS.ca, "File"),
        HostPath("etcd-healthcheck-client-crt", KUBEADM_TLS.cert, "File"),
        HostPath("etcd-healthcheck-client-key", KUBEADM_TLS.key, "File"),
    ),
    file_owner_root=True,
    args=("--etcd.local", "--etcd.local-access=full"),
)


class EtcdCollector(Collector):
    """See etcd/state.py's docstring for the exposition."""

    name = "etcd"
    modes = frozenset({"node", "cluster"})
    default_enabled = False
    help = (
        "etcd database size against its quota, alarms, leader, keys per resource, disk "
        "latency and read load. On when --etcd.cluster or --etcd.local is given."
    )
    # Node mode reads the member beside it through kubeadm's key-less metrics listener:
    # nothing to grant. FULL_ACCESS_NEEDS is for --etcd.local-access=full. Cluster mode
    # reads remote members; certificates, if any, come from a Secret the user mounts.
    needs = {"node": Needs(args=("--etcd.local",))}

    @classmethod
    def add_arguments(cls, group):
        add_arguments(group)

    @classmethod
    def enabled_by(cls, args):
        # --etcd.metrics-url or --etcd.local-access alone turns it on so that validate()
        # says what is missing.
        return bool(
            args.etcd_clusters
            or args.etcd_local
            or args.etcd_metrics_urls
            or args.etcd_local_access == "full"
        )

    @classmethod
    def validate(cls, args):
        validate(args)

    @classmethod
    def needs_for(cls, args) -> Needs:
        if args.mode == "node" and args.etcd_local_access == "full":
            return FULL_ACCESS_NEEDS
        return super().needs_for(args)

    def __init__(self, args):
        super().__init__(args)
        self.tls = tls_files(args)
        session = new_session(self.tls)
        metrics_urls = dict(args.etcd_metrics_urls)
        self.clusters = [
            EtcdCluster(
                name,
                list(urls),
                True,
                session,
                args.etcd_timeout,
                args.etcd_quota_bytes,
                metrics_urls.get(name, ()),
            )
            for name, urls in args.etcd_clusters
        ]
        for name, urls in local_specs(args):
            self.clusters.append(
                MetricsOnlyCluster(
                    name, list(urls), session, args.etcd_timeout, args.etcd_quota_bytes
                )
                if args.etcd_local_access == "metrics"
                else EtcdCluster(
                    name,
                    list(urls),
                    False,
                    session,
                    args.etcd_timeout,
                    args.etcd_quota_bytes,
                    metrics_urls.get(name, ()),
                )
            )
        # Read through /metrics alone: what EtcdState tells `check`.
        self.metrics_only = frozenset(
            c.name for c in self.clusters if isinstance(c, MetricsOnlyCluster)
        )
        self.min_interval = args.etcd_min_interval
        self.keys_interval = args.etcd_keys_interval
        self.keys_prefix = args.etcd_keys_prefix.encode()
        self.max_resources = args.etcd_keys_max_resources
        self._pool = ThreadPoolExecutor(
            max_workers=len(self.clusters), thread_name_prefix="etcd-cluster"
        )
        self._lock = threading.Lock()
        self._states: list[ClusterState] | None = None
        self._taken = 0.0
        self._keys: dict[str, tuple[dict[str, int], float]] = {}
        self._keys_counted = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self):
        # Keys are counted through a client URL: not in a cluster read through /metrics only.
        if any(isinstance(c, EtcdCluster) for c in self.clusters):
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
                self._states = list(self._pool.map(lambda c: c.refresh(), self.clusters))
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
        leading = set()
        if any(isinstance(c, EtcdCluster) and not c.discover for c in self.clusters):
            # Every etcd node runs a pod; only the leader's counts, so they are taken once.
            leading = {
                s.name
                for s in self.states()
                if any(m.status and m.status.is_leader for m in s.members)
            }
        for cluster in self.clusters:
            if not isinstance(cluster, EtcdCluster):
                continue
            if not cluster.discover and cluster.name not in leading:
                with self._lock:
                    self._keys.pop(cluster.name, None)
                continue
            try:
                counts = count_resources(
                    cluster.answering_client(), self.keys_prefix, self.max_resources
                )
            except EtcdError as exc:
                log.warning("etcd cluster %s: counting keys failed: %s", cluster.name, exc)
                continue
            with self._lock:
                self._keys[cluster.name] = (counts, time.time())

    def observe(self) -> EtcdState:
        states = self.states()
        if not any(s.up for s in states):
            raise EtcdError("; ".join(f"{s.name}: {s.error}" for s in states))
        return EtcdState(states, self.keys(), self.keys_interval, self.tls, self.metrics_only)

    families = staticmethod(families)
    advise = staticmethod(advise)

    def wait_ready(self) -> None:
        # `check` runs once, right after start(): let the first key count finish.
        if self._thread is not None:
            self._keys_counted.wait(timeout=10 * self.args.etcd_timeout)
