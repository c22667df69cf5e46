"""What the collector keeps of a member's own /metrics page.

etcd's page is ~150 KB and ~1,600 lines; the collector keeps only these samples.

What Maintenance.Status also tells, so that a member can be watched without a client
certificate (--etcd.local-access=metrics; each equal to Status's field on etcd 3.5.1,
3.5.30, 3.6.16 and 3.7.3, checked in tests/etcd):

- etcd_mvcc_db_total_size_in_bytes and etcd_mvcc_db_total_size_in_use_in_bytes: dbSize
  and dbSizeInUse.
- etcd_server_quota_backend_bytes: the quota (Status has it only from 3.6).
- etcd_server_is_leader, and etcd_server_id{server_id="<hex>"}: the member's id.
- etcd_server_proposals_applied_total: raftAppliedIndex (a gauge despite its name).
- etcd_server_version{server_version="3.5.30"}.
Status's raftTerm has no sample: it is left out without a client certificate.

Disk latency and read load:

- etcd_disk_wal_fsync_duration_seconds and etcd_disk_backend_commit_duration_seconds:
  histograms with 14 exponential buckets (1 ms to 8.192 s, doubling; the same from 3.4 to
  3.7). They are re-exported with the few bounds in BUCKETS: 10 ms (etcd's
  fsync guidance) lies in (8, 16] and 25 ms (backend commit) in (16, 32], so a p99 near
  either threshold is interpolated inside one source bucket, as etcd's own dashboards do.
- etcd_network_client_grpc_sent_bytes_total: bytes sent to gRPC clients, i.e. what the
  kube-apiservers read.
- grpc_server_handled_total{grpc_service="etcdserverpb.KV",grpc_method="Range"} and, from
  etcd 3.7, "RangeStream", summed over their grpc_code: the range RPCs the member answered
  (the apiservers' GETs and LISTs; kube-apiserver 1.37 LISTs through RangeStream, the
  streamed range, wherever etcd has it). etcd_mvcc_range_total would also count the ranges
  inside transactions, which are writes. A KV method other than those etcd 3.7 has is
  named (new_methods), for `check` to say what it does not count.

Writes refused: grpc_server_handled_total{grpc_code="ResourceExhausted"} of etcdserverpb.KV
Put and Txn and etcdserverpb.Lease LeaseGrant, summed (the API server grants a lease before
it writes an Event, so a refused grant is a refused write). etcd answers ResourceExhausted to a write when its database is over
the quota or a NOSPACE alarm is raised ("mvcc: database space exceeded"), and when it is
overloaded ("too many requests": applying lags committing by over 5,000 entries). Both
mean the API servers' writes fail. Read-only transactions are never refused this way.

Counters keep etcd's values: monotonic, reset when the member restarts (rate() handles it).
A family above that the page lacks (a newer etcd that renamed it) leaves its field None:
`check` names it, and its series are left out rather than read as zero.
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
DB_SIZE = "etcd_mvcc_db_total_size_in_bytes"
DB_IN_USE = "etcd_mvcc_db_total_size_in_use_in_bytes"
IS_LEADER = "etcd_server_is_leader"
APPLIED = "etcd_server_proposals_applied_total"
SERVER_ID = "etcd_server_id"
VERSION = "etcd_server_version"
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
# The samples standing in for Status: (name, the MemberMetrics field) of unlabelled gauges.
_GAUGES = {
    f"{DB_SIZE} ".encode(): "db_size",
    f"{DB_IN_USE} ".encode(): "db_size_in_use",
    f"{IS_LEADER} ".encode(): "is_leader",
    f"{APPLIED} ".encode(): "applied_index",
}
_ID = f'{SERVER_ID}{{server_id="'.encode()
_VERSION = f'{VERSION}{{server_version="'.encode()
WANTED_WITHOUT_STATUS = (*WANTED, *_GAUGES, _ID, _VERSION)
_LE = re.compile(rb'le="([^"]*)"')
_HEX_ID = re.compile(rb'server_id="([0-9a-f]{1,16})"')
_SERVER_VERSION = re.compile(rb'server_version="([0-9A-Za-z.+-]{1,40})"')
_KV = b'grpc_service="etcdserverpb.KV"'
# KV's methods up to etcd 3.7; the reads among them are counted as range requests.
KV_METHODS = frozenset({"Range", "RangeStream", "Put", "DeleteRange", "Txn", "Compact"})
_READS = (b'grpc_method="Range"', b'grpc_method="RangeStream"')
_METHOD = re.compile(rb'grpc_method="([^"]{0,80})"')
# A page's KV methods not in KV_METHODS: at most this many named, each cut and made safe.
MAX_NEW_METHODS, METHOD_CHARS = 5, 40
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_]")
_REFUSED = b'grpc_code="ResourceExhausted"'
_WRITES = (
    (_KV, b'grpc_method="Put"'),
    (_KV, b'grpc_method="Txn"'),
    (b'grpc_service="etcdserverpb.Lease"', b'grpc_method="LeaseGrant"'),
)


_KNOWN_METHODS = frozenset(m.encode() for m in KV_METHODS)


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
    sent_bytes: float | None = None
    range_requests: float | None = None
    quota_bytes: float | None = None
    writes_refused: float | None = None
    # Read only for --etcd.local-access=metrics (WANTED_WITHOUT_STATUS):
    db_size: float | None = None
    db_size_in_use: float | None = None
    is_leader: float | None = None
    applied_index: float | None = None
    member_id: str | None = None  # hex, as etcdctl prints it
    version: str = ""
    new_methods: tuple[str, ...] = ()  # KV methods not in KV_METHODS, for `check`


# Each field re-exported from the page, and the etcd family it comes from.
SOURCES = (
    ("fsync", FSYNC),
    ("commit", COMMIT),
    ("sent_bytes", SENT),
    ("range_requests", f'{HANDLED}{{grpc_service="etcdserverpb.KV",grpc_method="Range"}}'),
    ("writes_refused", f'{HANDLED}{{grpc_code="ResourceExhausted"}} of KV writes'),
)


def missing(page: MemberMetrics) -> list[str]:
    """The etcd families of SOURCES that the page lacked: their series are left out."""
    return [name for field, name in SOURCES if getattr(page, field) is None]


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
    """The kept samples of a page's lines (those starting with one of WANTED, or of
    WANTED_WITHOUT_STATUS)."""
    hist: dict[str, dict[float, float]] = {FSYNC: {}, COMMIT: {}}
    found: dict[str, float | str | tuple | None] = {}
    methods: set[str] = set()
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
            found["sent_bytes"] = _value(line)
        elif line.startswith(WANTED[3]):
            if _KV in line:
                method = _METHOD.search(line)
                if method is not None and method.group(1) not in _KNOWN_METHODS:
                    name = method.group(1)[:METHOD_CHARS].decode("ascii", "replace")
                    methods.add(_UNSAFE_NAME.sub("?", name))
            if _KV in line and any(read in line for read in _READS):
                found["range_requests"] = (found.get("range_requests") or 0.0) + _value(line)
            elif _REFUSED in line and any(a in line and b in line for a, b in _WRITES):
                found["writes_refused"] = (found.get("writes_refused") or 0.0) + _value(line)
        elif line.startswith(WANTED[4]):
            found["quota_bytes"] = _value(line)
        elif line.startswith(tuple(_GAUGES)):
            found[_GAUGES[line.split(b" ", 1)[0] + b" "]] = _value(line)
        elif line.startswith(_ID) and _value(line) == 1:
            match = _HEX_ID.search(line)
            if match is None:
                raise MetricsError(f"bad member id in {line[:80]!r}")
            found["member_id"] = match.group(1).decode()
        elif line.startswith(_VERSION):
            match = _SERVER_VERSION.search(line)
            found["version"] = match.group(1).decode() if match else ""
    if found.get("is_leader") not in (None, 0.0, 1.0):
        raise MetricsError(f"{IS_LEADER} is {found['is_leader']:g}, not 0 or 1")
    if methods:
        found["new_methods"] = tuple(sorted(methods)[:MAX_NEW_METHODS])
    return MemberMetrics(_rebucket(hist[FSYNC]), _rebucket(hist[COMMIT]), **found)
