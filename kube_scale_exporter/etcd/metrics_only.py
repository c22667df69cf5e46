"""The local etcd member seen through its /metrics alone (--etcd.local-access=metrics).

kubeadm serves each member's metrics on plain http://127.0.0.1:2381 (--listen-metrics-urls)
where no client certificate is asked for. The page tells what Status does but the raft
term (page.py), so a pod beside the member needs no key: the healthcheck client key of
the full mode can read, write and delete every key in etcd, Secrets included.

What is lost without the key: the alarm list (kubescale_etcd_alarm_active), the raft term
and the key counts per resource; the member is labelled with its id in hex (the member
list, which has its name, needs the key). A raised NOSPACE still shows as writes refused
(kubescale_etcd_writes_refused_total) and as the database size at the quota.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kube_scale_exporter.etcd.answers import Status
from kube_scale_exporter.etcd.client import EtcdClient, EtcdError
from kube_scale_exporter.etcd.cluster import ClusterState, MemberState, PageErrors, quota_of
from kube_scale_exporter.etcd.page import (
    APPLIED,
    DB_IN_USE,
    DB_SIZE,
    IS_LEADER,
    WANTED_WITHOUT_STATUS,
    MemberMetrics,
    MetricsError,
    parse,
)

if TYPE_CHECKING:
    from kube_scale_exporter.httpclient import Client


# The samples standing in for Status's fields, which every etcd since 3.4 serves: without
# one the page is not a member's (or a newer etcd renamed it), and reading on would report
# a zero (no bytes in use: the whole database free pages, worth a defragment).
REQUIRED = (
    (DB_SIZE, "db_size"),
    ("etcd_server_id", "member_id"),
    (DB_IN_USE, "db_size_in_use"),
    (IS_LEADER, "is_leader"),
    (APPLIED, "applied_index"),
)


def status_of(page: MemberMetrics) -> Status:
    """The Status the page stands for; MetricsError naming the first sample it lacks."""
    for name, field in REQUIRED:
        if getattr(page, field) is None:
            raise MetricsError(f"no {name} sample: not an etcd member's /metrics")
    member = str(int(page.member_id, 16))
    return Status(
        member_id=member,
        leader_id=member if page.is_leader == 1 else "0",
        version=page.version,
        db_size=int(page.db_size),
        db_size_in_use=int(page.db_size_in_use),
        db_size_quota=0,
        raft_term=None,
        raft_applied_index=int(page.applied_index),
    )


class MetricsOnlyCluster:
    """A cluster of the members at the configured metrics URLs, asked nothing else."""

    def __init__(
        self,
        name: str,
        endpoints: list[str],
        session: Client,
        timeout: float,
        default_quota: int,
    ):
        self.name = name
        self.clients = [EtcdClient(session, url, timeout) for url in endpoints]
        self.default_quota = default_quota
        self._labels: dict[str, str] = {}  # url -> member id in hex, once read
        self._page_errors = PageErrors(name)

    def requests_sent(self) -> int:
        return sum(c.requests_sent for c in self.clients)

    def refresh(self) -> ClusterState:
        now = time.monotonic()
        members = tuple(sorted((self._member(c) for c in self.clients), key=lambda m: m.name))
        answered = any(m.status is not None for m in members)
        error = None if answered else "; ".join(m.error or "" for m in members)
        return ClusterState(self.name, members, error, now)

    def _member(self, client: EtcdClient) -> MemberState:
        url = client.url
        try:
            page = parse(client.metric_lines(WANTED_WITHOUT_STATUS))
            status = status_of(page)
        except (EtcdError, MetricsError) as exc:
            error = str(exc) if isinstance(exc, EtcdError) else f"{url}/metrics: {exc}"
            self._page_errors.note(url, error)
            label = self._labels.get(url, url)
            return MemberState(label, url, None, error, 0, "", None, None, error)
        self._page_errors.note(url, None)
        label = self._labels[url] = page.member_id
        quota, source = quota_of(status, page, self.default_quota)
        return MemberState(label, url, status, None, quota, source, None, page, None)
