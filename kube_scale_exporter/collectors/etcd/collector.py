"""The `etcd` collector: its flags, member status cached for --etcd.min-interval, and the
background thread that counts keys per resource every --etcd.keys-interval.

The exposition is in state.py's docstring, the `check` text in advice.py.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kube_scale_exporter.collectors.etcd.advice import advise
from kube_scale_exporter.collectors.etcd.config import (
    DEFAULT_QUOTA,
    KUBEADM_TLS,
    LOCAL_DEFAULT,
    cluster_spec,
    keys_prefix,
    tls_files,
)
from kube_scale_exporter.collectors.etcd.state import EtcdState, families
from kube_scale_exporter.etcd.client import EtcdError, new_session
from kube_scale_exporter.etcd.cluster import ClusterState, EtcdCluster
from kube_scale_exporter.etcd.keys import count_resources
from kube_scale_exporter.flagtypes import byte_size, duration, positive_int
from kube_scale_exporter.registry import Collector, HostPath, Needs, UsageError

log = logging.getLogger(__name__)


class EtcdCollector(Collector):
    """See etcd/state.py's docstring for the exposition."""

    name = "etcd"
    modes = frozenset({"node", "cluster"})
    default_enabled = False
    help = (
        "etcd database size against its quota, alarms, leader, keys per resource. "
        "On when --etcd.cluster or --etcd.local is given."
    )
    # Node mode runs beside a kubeadm etcd member with its healthcheck client pair (0600,
    # owned by root; never the CA key or the peer/server keys). Cluster mode reads remote
    # members; certificates, if any, come from a Secret the user mounts (docs/deploy.md).
    needs = {
        "node": Needs(
            host_paths=(
                HostPath("etcd-ca-crt", KUBEADM_TLS.ca, "File"),
                HostPath("etcd-healthcheck-client-crt", KUBEADM_TLS.cert, "File"),
                HostPath("etcd-healthcheck-client-key", KUBEADM_TLS.key, "File"),
            ),
            file_owner_root=True,
            args=("--etcd.local",),
        )
    }

    @classmethod
    def add_arguments(cls, group):
        group.add_argument(
            "--etcd.cluster",
            dest="etcd_clusters",
            action="append",
            type=cluster_spec,
            default=[],
            metavar="NAME=URL[,URL...]",
            help="An etcd cluster to watch, e.g. main=https://10.0.0.1:2379 (repeatable: "
            "main and events). Members are discovered from the member list and each "
            "is asked at its own client URL.",
        )
        group.add_argument(
            "--etcd.local",
            dest="etcd_local",
            action="append",
            type=cluster_spec,
            nargs="?",
            const=LOCAL_DEFAULT,
            default=[],
            metavar="NAME=URL",
            help=f"For a DaemonSet pod on an etcd node: watch only this member (default "
            f"{LOCAL_DEFAULT}), with kubeadm's /etc/kubernetes/pki/etcd certificates "
            f"unless --etcd.ca-file/--etcd.cert-file/--etcd.key-file are given. "
            f"Key counts are taken only by the pod beside the leader.",
        )
        group.add_argument(
            "--etcd.ca-file",
            dest="etcd_ca_file",
            default=None,
            metavar="FILE",
            help="CA bundle that signed etcd's serving certificate.",
        )
        group.add_argument(
            "--etcd.cert-file",
            dest="etcd_cert_file",
            default=None,
            metavar="FILE",
            help="Client certificate for etcd (with --etcd.key-file).",
        )
        group.add_argument(
            "--etcd.key-file",
            dest="etcd_key_file",
            default=None,
            metavar="FILE",
            help="Client key for etcd (with --etcd.cert-file).",
        )
        group.add_argument(
            "--etcd.timeout",
            dest="etcd_timeout",
            type=duration,
            metavar="DURATION",
            default=2.0,
            help="Timeout of each request to etcd (default 2s).",
        )
        group.add_argument(
            "--etcd.quota-bytes",
            dest="etcd_quota_bytes",
            type=byte_size,
            default=DEFAULT_QUOTA,
            metavar="BYTES",
            help="Quota to assume when etcd tells neither in Status nor in "
            "/metrics (default 2Gi, etcd's default).",
        )
        group.add_argument(
            "--etcd.min-interval",
            dest="etcd_min_interval",
            type=duration,
            default=15.0,
            metavar="DURATION",
            help="Serve member status from cache when younger than this, "
            "whatever the number of scrapers (default 15s).",
        )
        group.add_argument(
            "--etcd.keys-interval",
            dest="etcd_keys_interval",
            type=duration,
            default=300.0,
            metavar="DURATION",
            help="Count keys per resource in the background this often (default 300s).",
        )
        group.add_argument(
            "--etcd.keys-prefix",
            dest="etcd_keys_prefix",
            type=keys_prefix,
            default="/registry/",
            metavar="PREFIX",
            help="Key prefix of Kubernetes objects (kube-apiserver "
            "--etcd-prefix; default /registry/).",
        )
        group.add_argument(
            "--etcd.keys-max-resources",
            dest="etcd_keys_max_resources",
            type=positive_int,
            default=100,
            metavar="N",
            help="Report at most this many resources per cluster, the "
            'largest; the rest are summed in resource="other" '
            "(default 100).",
        )

    @classmethod
    def enabled_by(cls, args):
        return bool(args.etcd_clusters or args.etcd_local)

    @classmethod
    def validate(cls, args):
        seen = set()
        for flag, specs in (
            ("--etcd.cluster", args.etcd_clusters),
            ("--etcd.local", args.etcd_local),
        ):
            for name, _ in specs:
                if name in seen:
                    raise UsageError(f"{flag}: cluster name {name!r} is given twice")
                seen.add(name)
        if bool(args.etcd_cert_file) != bool(args.etcd_key_file):
            flag = "--etcd.key-file" if args.etcd_cert_file else "--etcd.cert-file"
            raise UsageError(f"{flag}: --etcd.cert-file and --etcd.key-file go together")
        tls = tls_files(args)
        flags = (
            ("--etcd.local",) * 3
            if tls is KUBEADM_TLS
            else ("--etcd.ca-file", "--etcd.cert-file", "--etcd.key-file")
        )
        for flag, path in zip(flags, (tls.ca, tls.cert, tls.key), strict=True):
            if path is not None and not os.access(path, os.R_OK):
                hint = (
                    " (kubeadm's default; give --etcd.ca-file, --etcd.cert-file and "
                    "--etcd.key-file)"
                    if flag == "--etcd.local"
                    else ""
                )
                raise UsageError(f"{flag}: cannot read {path}{hint}")

    def __init__(self, args):
        super().__init__(args)
        self.tls = tls_files(args)
        session = new_session(self.tls)
        specs = [(name, urls, True) for name, urls in args.etcd_clusters]
        specs += [(name, urls, False) for name, urls in args.etcd_local]
        self.clusters = [
            EtcdCluster(
                name,
                list(urls),
                discover,
                session,
                args.etcd_timeout,
                args.etcd_quota_bytes,
                quota_max_age=args.etcd_keys_interval,
            )
            for name, urls, discover in specs
        ]
        self.local = bool(args.etcd_local)
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
            leading = {
                s.name
                for s in self.states()
                if any(m.status and m.status.is_leader for m in s.members)
            }
        for cluster in self.clusters:
            if leading is not None and cluster.name not in leading:
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
        return EtcdState(states, self.keys(), self.keys_interval, self.tls)

    families = staticmethod(families)
    advise = staticmethod(advise)

    def wait_ready(self) -> None:
        # `check` runs once, right after start(): let the first key count finish.
        if self._thread is not None:
            self._keys_counted.wait(timeout=10 * self.args.etcd_timeout)
