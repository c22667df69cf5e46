"""A member's disk latency and read load, from the sample lines of its own /metrics.

etcd's page is ~150 KB and ~1,600 lines; the collector keeps only these (and the quota):

- etcd_disk_wal_fsync_duration_seconds and etcd_disk_backend_commit_duration_seconds:
  histograms with 14 exponential buckets (1 ms to 8.192 s, doubling; the same in 3.4.23,
  3.5.1 and 3.5.30). They are re-exported with the few bounds in BUCKETS: 10 ms (etcd's
  fsync guidance) lies in (8, 16] and 25 ms (backend commit) in (16, 32], so a p99 near
  either threshold is interpolated inside one source bucket, as etcd's own dashboards do.
- etcd_network_client_grpc_sent_bytes_total: bytes sent to gRPC clients, i.e. what the
  kube-apiservers read.
- grpc_server_handled_total{grpc_service="etcdserverpb.KV",grpc_method="Range"}, summed over
  its grpc_code: the Range RPCs the member answered (the apiservers' GETs and LISTs).
  etcd_mvcc_range_total would also count the ranges inside transactions, which are writes.

Counters keep etcd's values: monotonic, reset when the member restarts (rate() handles it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

FSYNC = "etcd_disk_wal_fsync_duration_seconds"
COMMIT = "etcd_disk_backend_commit_duration_seconds"
SENT = "etcd_network_client_grpc_sent_bytes_total"
HANDLED = "grpc_server_handled_total"
QUOTA = "etcd_server_quota_backend_bytes"
# The upper bounds re-exported (seconds), each one of etcd's own: 2 ms resolves a healthy
# disk's p99, (8, 16] and (16, 32] hold the 10 ms and 25 ms thresholds, 256 ms shows a
# network disk's hundreds of milliseconds. +Inf is added. Five bounds keep a member within
# its budget of 15 series (docs/etcd.md, "Performance series").
BUCKETS = (0.002, 0.008, 0.016, 0.032, 0.256)
# Sample lines the parser needs; everything else on the page is skipped unparsed.
WANTED = (
    f"{FSYNC}_bucket{{".encode(),
    f"{COMMIT}_bucket{{".encode(),
    f"{SENT} ".encode(),
    f"{HANDLED}{{".encode(),
    f"{QUOTA} ".encode(),
)
_LE = re.compile(rb'le="([^"]*)"')
_RANGE = (b'grpc_method="Range"', b'grpc_service="etcdserverpb.KV"')


class MetricsError(ValueError):
    """The page's samples are not etcd's; the message says which line."""


@dataclass(frozen=True)
class Histogram:
    """Cumulative counts at each of BUCKETS and +Inf (the total)."""

    counts: tuple[float, ...]

    def buckets(self) -> list[tuple[str, float]]:
        bounds = [*(f"{b:g}" for b in BUCKETS), "+Inf"]
        return list(zip(bounds, self.counts, strict=True))

    def share_above(self, bound: float) -> float | None:
        """Share of the observations above `bound` (one of BUCKETS); None without any."""
        total = self.counts[-1]
        return None if total == 0 else 1 - self.counts[BUCKETS.index(bound)] / total


@dataclass(frozen=True)
class MemberMetrics:
    """What the collector keeps of one read of a member's /metrics; None when absent."""

    fsync: Histogram | None
    commit: Histogram | None
    sent_bytes: float | None
    range_requests: float | None
    quota_bytes: float | None


def _value(line: bytes) -> float:
    # Sample lines are `name{labels} value [timestamp]`; label values never hold "} ".
    try:
        value = float(line.rsplit(b"} ", 1)[-1].split()[0] if b"}" in line else line.split()[1])
    except (IndexError, ValueError):
        raise MetricsError(f"bad sample line {line[:80]!r}") from None
    if not 0 <= value < 2**63:  # also refuses NaN and Inf
        raise MetricsError(f"sample out of range in {line[:80]!r}")
    return value


def _rebucket(source: dict[float, float]) -> Histogram | None:
    """etcd's buckets at our bounds: the count at the largest source bound not above each.

    etcd's bounds include ours, so this is exact; a future etcd with other bounds would
    count fewer observations as fast, which errs towards a higher p99, never a lower one.
    """
    if math.inf not in source:
        return None
    bounds = sorted(source)
    counts = []
    for bound in BUCKETS:
        below = [source[b] for b in bounds if b <= bound + 1e-12]
        counts.append(below[-1] if below else 0.0)
    counts.append(source[math.inf])
    if any(a > b for a, b in zip(counts, counts[1:], strict=False)):
        raise MetricsError("histogram buckets are not cumulative")
    return Histogram(tuple(counts))


def parse(lines: list[bytes]) -> MemberMetrics:
    """The kept samples of a page's lines (those starting with one of WANTED)."""
    hist: dict[str, dict[float, float]] = {FSYNC: {}, COMMIT: {}}
    sent = quota = None
    ranges: float | None = None
    for line in lines:
        if line.startswith(WANTED[:2]):
            name = FSYNC if line.startswith(WANTED[0]) else COMMIT
            le = _LE.search(line)
            try:
                bound = float(le.group(1)) if le else None
            except ValueError:
                bound = None
            if bound is None or math.isnan(bound):
                raise MetricsError(f"bucket without a valid le in {line[:80]!r}")
            hist[name][bound] = _value(line)
        elif line.startswith(WANTED[2]):
            sent = _value(line)
        elif line.startswith(WANTED[3]):
            if all(part in line for part in _RANGE):
                ranges = (ranges or 0.0) + _value(line)
        elif line.startswith(WANTED[4]):
            quota = _value(line)
    return MemberMetrics(_rebucket(hist[FSYNC]), _rebucket(hist[COMMIT]), sent, ranges, quota)
