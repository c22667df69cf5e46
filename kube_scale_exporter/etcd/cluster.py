"""One etcd cluster as the collector sees it: its members' status, quota, alarms and
disk latency and read load (from each member's own /metrics).

A refresh asks one endpoint for the member list and the alarm list, then each member's
own client URL for its Status and its /metrics page (or the --etcd.metrics-url for its
host), all in parallel, so a member that hangs costs one timeout, not one per request.
The page is read once per refresh and gives both the quota and the performance samples.
In local mode (a DaemonSet pod beside its etcd member) only the configured endpoint is
asked: every etcd node runs its own pod, and asking all members from each would
multiply the load by the cluster size.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kube_scale_exporter.etcd.page import WANTED, MemberMetrics, MetricsError, parse
from kube_scale_exporter.etcd.answers import Member, Status
from kube_scale_exporter.etcd.client import EtcdClient, EtcdError
from kube_scale_exporter.etcd.metrics_urls import metrics_url

if TYPE_CHECKING:
    from kube_scale_exporter.httpclient import Client

log = logging.getLogger(__name__)

# etcd recommends 3, 5 or 7 members and nobody runs more than a handful: a longer member
# list is broken or hostile. Past it the cluster is down with an error naming the cap,
# which keeps the member series (about 25 each) and the Status and /metrics fan-out bounded.
MAX_MEMBERS = 15


@dataclass(frozen=True)
class MemberState:
    name: str
    url: str | None  # where it was asked; None when its URL is unknown
    status: Status | None  # None when the member did not answer
    error: str | None
    quota_bytes: int
    quota_source: str  # "status", "metrics" or "flag"
    alarms: frozenset[str] | None  # None when the alarm list could not be read
    # The member's own /metrics, read apart from Status: either may fail alone.
    metrics: MemberMetrics | None = None
    metrics_error: str | None = None


@dataclass(frozen=True)
class ClusterState:
    name: str
    members: tuple[MemberState, ...]
    error: str | None  # set when no member answered
    taken_at: float  # time.monotonic()

    @property
    def up(self) -> bool:
        return self.error is None


def client_url(member: Member) -> str | None:
    """The member's first http(s) client URL; members may also advertise unix sockets."""
    return next((u for u in member.client_urls if u.startswith(("http://", "https://"))), None)


class EtcdCluster:
    def __init__(
        self,
        name: str,
        endpoints: list[str],
        discover: bool,
        session: Client,
        timeout: float,
        default_quota: int,
        metrics_urls: tuple[str, ...] = (),
    ):
        self.name = name
        self.endpoints = list(endpoints)
        self.discover = discover
        self.session = session
        self.timeout = timeout
        self.default_quota = default_quota
        # --etcd.metrics-url for this cluster; empty: each member's client URL.
        self.metrics_urls = tuple(metrics_urls)
        self._clients: dict[str, EtcdClient] = {}
        self._lock = threading.Lock()
        self._known: list[str] = []  # member labels at the last refresh
        self._labels: dict[str, str] = {}  # local mode: endpoint -> member label
        self._page_errors = PageErrors(name)

    def client(self, url: str) -> EtcdClient:
        with self._lock:
            if url not in self._clients:
                self._clients[url] = EtcdClient(self.session, url, self.timeout)
            return self._clients[url]

    def requests_sent(self) -> int:
        with self._lock:
            return sum(c.requests_sent for c in self._clients.values())

    def answering_client(self) -> EtcdClient:
        """A client for the first configured endpoint that answers a member list."""
        _, client = self._member_list()
        return client

    def _member_list(self) -> tuple[list[Member], EtcdClient]:
        errors = []
        with self._lock:
            endpoints = list(self.endpoints)
        for url in endpoints:
            client = self.client(url)
            try:
                members = client.members()
            except EtcdError as exc:
                errors.append(str(exc))
                continue
            if len(members) > MAX_MEMBERS:
                errors.append(
                    f"{url}: the member list has {len(members)} members, over the "
                    f"cap of {MAX_MEMBERS} (MAX_MEMBERS in "
                    "kube_scale_exporter/etcd/cluster.py)"
                )
                continue
            # Ask the endpoint that answered first next time: a dead one costs a timeout.
            with self._lock:
                self.endpoints.remove(url)
                self.endpoints.insert(0, url)
            return members, client
        raise EtcdError("; ".join(errors))

    def refresh(self) -> ClusterState:
        now = time.monotonic()
        try:
            members, entry = self._member_list()
        except EtcdError as exc:
            down = tuple(
                MemberState(label, None, None, str(exc), 0, "", None, None, str(exc))
                for label in self._known
            )
            return ClusterState(self.name, down, str(exc), now)
        names = {m.id: m.label for m in members}
        if self.discover:
            targets = [(m.label, client_url(m)) for m in members]
        else:
            with self._lock:
                targets = [(self._labels.get(url, url), url) for url in self.endpoints]
        # Status and /metrics of every member at once (at most MAX_MEMBERS; local mode asks
        # only the configured endpoints), plus the alarm list: a hung member costs one
        # timeout, not one per request.
        workers = 2 * min(len(targets), MAX_MEMBERS) + 1
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="etcd") as pool:
            alarms_job = pool.submit(entry.alarms)
            jobs = [pool.submit(self._member, url) for _, url in targets]
            page_jobs = [pool.submit(self._metrics, url) for _, url in targets]
            try:
                alarms = alarms_job.result()
            except EtcdError:
                alarms = None
            states = []
            for (label, url), job, page_job in zip(targets, jobs, page_jobs, strict=True):
                status, error = job.result()
                page, page_error = page_job.result()
                quota, source = quota_of(status, page, self.default_quota)
                if status is not None:
                    label = names.get(status.member_id) or format(int(status.member_id), "x")
                    self._labels[url] = label
                mine = (
                    None
                    if alarms is None
                    else frozenset(a.alarm for a in alarms if names.get(a.member_id) == label)
                )
                states.append(
                    MemberState(label, url, status, error, quota, source, mine, page, page_error)
                )
        self._known = [s.name for s in states]
        answered = any(s.status is not None for s in states)
        error = None if answered else "; ".join(s.error or "" for s in states) or "no members"
        return ClusterState(self.name, tuple(sorted(states, key=lambda s: s.name)), error, now)

    def _member(self, url: str | None) -> tuple[Status | None, str | None]:
        if url is None:
            return None, "member advertises no http(s) client URL (not started yet?)"
        try:
            return self.client(url).status(), None
        except EtcdError as exc:
            return None, str(exc)

    def _metrics(self, url: str | None) -> tuple[MemberMetrics | None, str | None]:
        """The member's /metrics samples, or the error that fails only this part."""
        if url is None:
            return None, "member advertises no http(s) client URL (not started yet?)"
        where, error = metrics_url(url, self.metrics_urls)
        found = None
        try:
            if where is not None:
                found = parse(self.client(where).metric_lines(WANTED))
        except EtcdError as exc:
            error = str(exc)
        except MetricsError as exc:
            error = f"{where}/metrics: {exc}"
        self._page_errors.note(url, error)
        return found, error


def quota_of(status: Status | None, page: MemberMetrics | None, default: int) -> tuple[int, str]:
    """A member's quota and where it came from: Status (etcd 3.6+), its /metrics, else
    --etcd.quota-bytes; (0, "") for a member that did not answer."""
    if status is None:
        return 0, ""
    if status.db_size_quota > 0:
        return status.db_size_quota, "status"
    if page is not None and page.quota_bytes:
        return int(page.quota_bytes), "metrics"
    return default, "flag"


class PageErrors:
    """Each member's last /metrics error, logged when it starts or changes and when the page
    is read again, not on every refresh."""

    def __init__(self, cluster: str):
        self.cluster = cluster
        self._last: dict[str, str] = {}  # member URL -> its last error
        self._lock = threading.Lock()  # members are read in parallel

    def note(self, url: str, error: str | None) -> None:
        with self._lock:
            if error and self._last.get(url) != error:
                log.warning("etcd %s: member %s: /metrics not read: %s", self.cluster, url, error)
            elif not error and url in self._last:
                log.info("etcd %s: member %s: /metrics read again", self.cluster, url)
            if error:
                self._last[url] = error
            else:
                self._last.pop(url, None)
