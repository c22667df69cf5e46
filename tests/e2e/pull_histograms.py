"""The same pulls counted from two sides: the kubelet's own
`kubelet_image_pull_duration_seconds` (its /metrics on :10250, read with the cluster
admin's token, never through the exporter's RBAC) and the cluster exporter's
`kubescale_image_pull_duration_seconds` and `..._queue_wait_seconds` (from the Pulled
events), with the kubelet's Pulled messages as the figures both must agree with.

What the kubelet 1.34 observes (pkg/kubelet/images/image_manager.go, puller.go): the
Pulled message's B ("including waiting", from just before the pull request waits for a
slot until the puller answers), truncated to the millisecond as the message prints it,
under the label `image_size_in_bytes` of the size the message also prints.
"""

import math
import re
from dataclasses import dataclass

import urllib3
from prometheus_client.parser import text_string_to_metric_families

from kube_scale_exporter.durations import go_duration
from kube_scale_exporter.collectors.imagepull_events import parse_pulled
from testbed.host import KUBELET_DIR
from testbed.node import NODE_IP, NODE_NAME

KUBELET = "kubelet_image_pull_duration_seconds"
OURS = "kubescale_image_pull_duration_seconds"
OURS_WAIT = "kubescale_image_pull_queue_wait_seconds"
SIZE_LABEL = "image_size_in_bytes"
MB = 1024 * 1024
GB = 1024 * MB
# The kubelet's size labels (pkg/kubelet/metrics/metrics.go, 1.34.4): a size above a lower
# bound takes its label; a size of 0 (not known) reads "N/A".
IMAGE_SIZE_LABELS = (
    (0, "0-10MB"),
    (10 * MB, "10MB-100MB"),
    (100 * MB, "100MB-500MB"),
    (500 * MB, "500MB-1GB"),
    (1 * GB, "1GB-5GB"),
    (5 * GB, "5GB-10GB"),
    (10 * GB, "10GB-20GB"),
    (20 * GB, "20GB-30GB"),
    (30 * GB, "30GB-40GB"),
    (40 * GB, "40GB-60GB"),
    (60 * GB, "60GB-100GB"),
    (100 * GB, "GT100GB"),
)
# Both sides hold the same millisecond-truncated figures, parsed or summed as floats: the
# only difference left is float rounding, far under this per pull.
FLOAT_SLACK = 1e-6
_INCLUDING_WAITING = re.compile(r" \((\S+) including waiting\)")
_SIZE = re.compile(r"Image size: (\d+) bytes")


def size_label(size: int) -> str:
    if size == 0:
        return "N/A"
    return next(label for bound, label in reversed(IMAGE_SIZE_LABELS) if size > bound)


@dataclass(frozen=True)
class Pull:
    """One Pulled message: A (`seconds`), B (`including_waiting`), the image's size."""

    pod: str
    seconds: float
    including_waiting: float
    size: int

    @property
    def waited(self) -> float:
        return self.including_waiting - self.seconds


def pulls(kube, ns) -> dict[str, Pull]:
    """The successful pulls of namespace `ns` as its Pulled events tell them, by pod."""
    out = {}
    for e in kube.get(f"/api/v1/namespaces/{ns}/events")["items"]:
        message = e.get("message", "")
        if e["reason"] != "Pulled" or parse_pulled(message) is None:
            continue  # "already present on machine" is no pull
        pod = e["involvedObject"]["name"]
        assert pod not in out, f"two pulls for {pod}: {message}"
        size = _SIZE.search(message)
        out[pod] = Pull(
            pod,
            parse_pulled(message)[0],
            go_duration(_INCLUDING_WAITING.search(message).group(1)),
            int(size.group(1)) if size else 0,
        )
    return out


@dataclass(frozen=True)
class Histogram:
    """One series set of a histogram: cumulative counts by upper bound, count, sum."""

    buckets: dict[float, float]
    count: float
    sum: float

    def minus(self, before: "Histogram") -> "Histogram":
        return Histogram(
            {le: n - before.buckets.get(le, 0.0) for le, n in self.buckets.items()},
            self.count - before.count,
            self.sum - before.sum,
        )


EMPTY = Histogram({}, 0.0, 0.0)


def histograms(text: str, name: str, by: str | None = None) -> dict[str, Histogram]:
    """`name`'s histograms in exposition `text`, keyed by label `by` ("" without one)."""
    parts: dict[str, dict] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for s in family.samples:
            key = s.labels.get(by, "") if by else ""
            h = parts.setdefault(key, {"buckets": {}, "count": 0.0, "sum": 0.0})
            if s.name == f"{name}_bucket":
                h["buckets"][float(s.labels["le"])] = s.value
            elif s.name == f"{name}_count":
                h["count"] = s.value
            elif s.name == f"{name}_sum":
                h["sum"] = s.value
    return {k: Histogram(**v) for k, v in parts.items()}


def increase(after: dict[str, Histogram], before: dict[str, Histogram]) -> dict[str, Histogram]:
    """Per key, what was observed between the two reads; keys that did not move left out."""
    moved = {k: h.minus(before.get(k, EMPTY)) for k, h in after.items()}
    return {k: h for k, h in moved.items() if h.count}


def kubelet_metrics(token: str) -> str:
    """The kubelet's /metrics: its webhook authenticates the admin's token; its
    self-signed serving certificate (and the CA beside it) is in its cert dir, issued
    for the node's name."""
    pool = urllib3.HTTPSConnectionPool(
        NODE_IP,
        10250,
        ca_certs=str(KUBELET_DIR / "pki" / "kubelet.crt"),
        cert_reqs="CERT_REQUIRED",
        assert_hostname=NODE_NAME,
        timeout=10,
        retries=False,
    )
    r = pool.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
    if r.status != 200:
        raise AssertionError(f"kubelet /metrics: {r.status} {r.data[:300]!r}")
    return r.data.decode()


def expected(values, bounds) -> dict[float, float]:
    """Cumulative bucket counts of `values` at `bounds` (a value on a bound counts in it)."""
    return {le: float(sum(1 for v in values if v <= le)) for le in bounds}


def compare(kubelet: dict[str, Histogram], ours: Histogram, ours_wait: Histogram, seen):
    """Both sides against the Pulled messages `seen` and against each other; returns the
    figures for the report. kubelet: increase by size label; ours: increase."""
    n = len(seen)
    tolerance = FLOAT_SLACK * n
    # The kubelet: one observation of B per pull, under the size label of the message.
    by_label: dict[str, list[Pull]] = {}
    for p in seen:
        by_label.setdefault(size_label(p.size), []).append(p)
    assert set(kubelet) == set(by_label), (kubelet, by_label)
    for label, ps in by_label.items():
        h = kubelet[label]
        assert h.count == len(ps), (label, h, ps)
        assert h.buckets == expected([p.including_waiting for p in ps], h.buckets), (label, h, ps)
        assert math.isclose(h.sum, sum(p.including_waiting for p in ps), abs_tol=tolerance), (
            label,
            h,
            ps,
        )
    # Ours: A in the duration histogram, B - A in the queue-wait one.
    assert ours.count == ours_wait.count == n, (ours, ours_wait)
    assert ours.buckets == expected([p.seconds for p in seen], ours.buckets), (ours, seen)
    assert ours_wait.buckets == expected([p.waited for p in seen], ours_wait.buckets), (
        ours_wait,
        seen,
    )
    # Against each other: the same pulls counted, the kubelet's sum is ours two together,
    # and as B >= A a pull in a kubelet bucket is in ours of the same bound.
    kubelet_count = sum(h.count for h in kubelet.values())
    kubelet_sum = sum(h.sum for h in kubelet.values())
    assert kubelet_count == ours.count, (kubelet, ours)
    assert math.isclose(kubelet_sum, ours.sum + ours_wait.sum, abs_tol=tolerance), (
        kubelet_sum,
        ours.sum,
        ours_wait.sum,
    )
    shared = sorted(
        set(ours.buckets) & set.intersection(*(set(h.buckets) for h in kubelet.values()))
    )
    for le in shared:
        assert sum(h.buckets[le] for h in kubelet.values()) <= ours.buckets[le], (le, kubelet, ours)
    return {
        "pulls": {
            p.pod: {
                "A": p.seconds,
                "B": p.including_waiting,
                "size": p.size,
                "label": size_label(p.size),
            }
            for p in seen
        },
        "kubelet": {
            label: {"count": h.count, "sum": round(h.sum, 3), "buckets": nonzero(h.buckets)}
            for label, h in kubelet.items()
        },
        "ours_duration": {
            "count": ours.count,
            "sum": round(ours.sum, 3),
            "buckets": nonzero(ours.buckets),
        },
        "ours_queue_wait": {
            "count": ours_wait.count,
            "sum": round(ours_wait.sum, 3),
            "buckets": nonzero(ours_wait.buckets),
        },
        "shared_bounds": shared,
    }


def nonzero(buckets: dict[float, float]) -> dict[str, float]:
    """Pulls per bucket (not cumulative), the empty buckets left out (for the report)."""
    out, below = {}, 0.0
    for le, n in sorted(buckets.items()):
        if n > below:
            out[str(le)] = n - below
        below = n
    return out
