"""An etcd member's /metrics page through etcd/client.py's metric_lines() (streamed, only
wanted lines kept) and etcd/page.py's parse(), then metrics_only.status_of() as
--etcd.local-access=metrics reads it.

Documented errors: EtcdError (a line or the page past its cap), MetricsError (samples
that are not etcd's). Invariants: every value kept is finite, >= 0 and below 2^63;
histograms are cumulative at our bounds; the member id is hex, the version a short
token, and the KV methods named few, short and printable.
"""

from __future__ import annotations

import math
import re

from fuzz import InvariantBroken, http_reply, piece_sizes, pieces
from kube_scale_exporter.etcd import page
from kube_scale_exporter.etcd.client import EtcdClient, EtcdError
from kube_scale_exporter.etcd.metrics_only import status_of

TARGETS = ("kube_scale_exporter.etcd.page", "kube_scale_exporter.etcd.metrics_only")


class _Session:
    def __init__(self, data: bytes):
        self.data = data

    def request(self, method, url, *, timeout):
        return http_reply(pieces(self.data, piece_sizes(self.data)[1]))


def check(data: bytes) -> None:
    client = EtcdClient(_Session(data), "http://127.0.0.1:2379", 5.0)
    try:
        lines = client.metric_lines(page.WANTED_WITHOUT_STATUS)
    except EtcdError:
        return
    try:
        found = page.parse(lines)
    except page.MetricsError:
        return
    for name in (
        "sent_bytes",
        "range_requests",
        "quota_bytes",
        "writes_refused",
        "db_size",
        "db_size_in_use",
        "is_leader",
        "applied_index",
    ):
        value = getattr(found, name)
        if value is not None and not (math.isfinite(value) and 0 <= value):
            raise InvariantBroken(f"{name} = {value}")
    for hist in (found.fsync, found.commit):
        if hist is None:
            continue
        counts = hist.counts
        if len(counts) != len(page.BUCKETS) + 1 or any(
            a > b for a, b in zip(counts, counts[1:], strict=False)
        ):
            raise InvariantBroken(f"histogram {counts}")
        for bound in page.BUCKETS:
            share = hist.share_above(bound)
            if share is not None and not 0 <= share <= 1:
                raise InvariantBroken(f"share above {bound}: {share}")
    if found.member_id is not None and not re.fullmatch("[0-9a-f]{1,16}", found.member_id):
        raise InvariantBroken(f"member id {found.member_id!r}")
    if not re.fullmatch(r"[0-9A-Za-z.+-]{0,40}", found.version):
        raise InvariantBroken(f"version {found.version!r}")
    methods = found.new_methods
    if len(methods) > 5 or not all(re.fullmatch(r"[0-9A-Za-z_?]{0,40}", m) for m in methods):
        raise InvariantBroken(f"new KV methods {methods!r:.100}")
    try:
        status_of(found)
    except page.MetricsError:
        pass
