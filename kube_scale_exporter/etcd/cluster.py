"""One etcd cluster as the collector sees it: its members' status, quota and alarms.

A refresh asks one endpoint for the member list and the alarm list, then each member's
own client URL for its Status, in parallel, so a member that hangs costs one timeout,
not one per member. In local mode (a DaemonSet pod beside its etcd member) only the
configured endpoint is asked for its Status: every etcd node runs its own pod, and
asking all members from each would multiply the load by the cluster size.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import requests

from kube_scale_exporter.etcd.client import EtcdClient, EtcdError, Member, Status

log = logging.getLogger(__name__)

QUOTA_METRIC = "etcd_server_quota_backend_bytes"
# etcd recommends 3, 5 or 7 members and nobody runs more than a handful: a longer member
# list is broken or hostile. Past it the cluster is down with an error naming the cap,
# which keeps the member series (about 11 each) and the Status fan-out bounded.
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
        session: requests.Session,
        timeout: float,
        default_quota: int,
        quota_max_age: float,
    ):
        self.name = name
        self.endpoints = list(endpoints)
        self.discover = discover
        self.session = session
        self.timeout = timeout
        self.default_quota = default_quota
        self.quota_max_age = quota_max_age
        self._clients: dict[str, EtcdClient] = {}
        self._lock = threading.Lock()
        self._known: list[str] = []  # member labels at the last refresh
        self._labels: dict[str, str] = {}  # local mode: endpoint -> member label
        self._quota: dict[str, tuple[int, str, float]] = {}  # url -> (bytes, source, when)

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
                MemberState(label, None, None, str(exc), 0, "", None) for label in self._known
            )
            return ClusterState(self.name, down, str(exc), now)
        names = {m.id: m.label for m in members}
        if self.discover:
            targets = [(m.label, client_url(m)) for m in members]
        else:
            with self._lock:
                targets = [(self._labels.get(url, url), url) for url in self.endpoints]
        # One thread per member at most MAX_MEMBERS (local mode asks only the configured
        # endpoints), plus the alarm list: a hung member costs one timeout, not one each.
        workers = min(len(targets), MAX_MEMBERS) + 1
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="etcd") as pool:
            alarms_job = pool.submit(entry.alarms)
            jobs = [pool.submit(self._member, url) for _, url in targets]
            try:
                alarms = alarms_job.result()
            except EtcdError:
                alarms = None
            states = []
            for (label, url), job in zip(targets, jobs, strict=True):
                status, error, quota, source = job.result()
                if status is not None:
                    label = names.get(status.member_id) or format(int(status.member_id), "x")
                    self._labels[url] = label
                mine = (
                    None
                    if alarms is None
                    else frozenset(a.alarm for a in alarms if names.get(a.member_id) == label)
                )
                states.append(MemberState(label, url, status, error, quota, source, mine))
        self._known = [s.name for s in states]
        answered = any(s.status is not None for s in states)
        error = None if answered else "; ".join(s.error or "" for s in states) or "no members"
        return ClusterState(self.name, tuple(sorted(states, key=lambda s: s.name)), error, now)

    def _member(self, url: str | None) -> tuple[Status | None, str | None, int, str]:
        if url is None:
            return None, "member advertises no http(s) client URL (not started yet?)", 0, ""
        client = self.client(url)
        try:
            status = client.status()
        except EtcdError as exc:
            return None, str(exc), 0, ""
        if status.db_size_quota > 0:
            return status, None, status.db_size_quota, "status"
        quota, source = self._quota_from_metrics(client)
        return status, None, quota, source

    def _quota_from_metrics(self, client: EtcdClient) -> tuple[int, str]:
        """The member's configured quota from its /metrics, fetched once per quota_max_age.

        The quota changes only when etcd restarts with another flag, and the page is
        ~150 KB, so it is not read on every refresh. When the page cannot be read or
        lacks the sample, the --etcd.quota-bytes default stands in until the next try.
        """
        with self._lock:
            cached = self._quota.get(client.url)
        if cached and time.monotonic() - cached[2] < self.quota_max_age:
            return cached[0], cached[1]
        try:
            value = client.metric(QUOTA_METRIC)
        except EtcdError as exc:
            log.warning(
                "etcd %s: quota from /metrics: %s; assuming --etcd.quota-bytes", self.name, exc
            )
            value = None
        quota, source = (int(value), "metrics") if value else (self.default_quota, "flag")
        with self._lock:
            self._quota[client.url] = (quota, source, time.monotonic())
        return quota, source
