"""Cluster-wide histograms of image pull time and pull-queue wait, from kubelet events.

The kubelet reports each finished pull as a `Pulled` event: `Successfully pulled image
"X" in A (B including waiting)`. A is the download, B - A the time the request waited in
the kubelet's pull queue (behind serialized or parallel-limited pulls). One watch on
events with the server-side field selector `reason=Pulled` feeds two histograms; events
cannot be selected by node on the server, and the histograms have no node label.
Kubelets before 1.28 omit "(B including waiting)": their pulls count in the duration
histogram only. "Container image ... already present on machine" (also reason Pulled) is
not a pull and is skipped. Only events created after the collector started count. A rise
of an event's count counts as that many pulls with its message's times: a repeat of the
same message, or the recorder's combined event (pullfailures.COMBINED_PREFIX), whose
message is the newest of the pulls it folds in.

    # HELP kubescale_image_pull_duration_seconds Image pull time reported by kubelet Pulled events (download only).
    # TYPE kubescale_image_pull_duration_seconds histogram
    kubescale_image_pull_duration_seconds_bucket{le="1.0"} 0.0
    ...
    kubescale_image_pull_duration_seconds_bucket{le="+Inf"} 3.0
    kubescale_image_pull_duration_seconds_count 3.0
    kubescale_image_pull_duration_seconds_sum 1842.5
    # HELP kubescale_image_pull_queue_wait_seconds Time pulls waited in the kubelet's pull queue before downloading (Pulled events).
    # TYPE kubescale_image_pull_queue_wait_seconds histogram
    ...

A second watch, `reason=Failed`, counts failed pulls by registry and cause (the classes
and the messages behind them are in pullfailures.py and docs/imagepull.md), beside the
successful pulls by registry from the Pulled watch, so a registry's failure share is a
ratio of two counters. `failing_nodes` counts the distinct nodes (the event's
source.host) that reported a failed pull from the registry in the last 10 minutes: it
tells one broken node from a fleet-wide problem without a node label. Registries are
admitted first come up to --image-pull.max-registries, the rest read "other". BackOff
events ("Back-off pulling image") carry no cause and repeat a counted failure: skipped.

    # HELP kubescale_image_pull_failures_total Failed image pulls reported by kubelet Failed events, by registry and cause.
    # TYPE kubescale_image_pull_failures_total counter
    kubescale_image_pull_failures_total{reason="rate_limited",registry="docker.io"} 41.0
    # HELP kubescale_image_pulls_succeeded_total Successful image pulls reported by kubelet Pulled events, by registry.
    # TYPE kubescale_image_pulls_succeeded_total counter
    kubescale_image_pulls_succeeded_total{registry="docker.io"} 96.0
    # HELP kubescale_image_pull_failing_nodes Nodes that reported a failed pull from the registry in the last 10 minutes.
    # TYPE kubescale_image_pull_failing_nodes gauge
    kubescale_image_pull_failing_nodes{registry="docker.io"} 37.0
"""

from __future__ import annotations

import bisect
import re
import threading
import time
from dataclasses import dataclass

from kube_scale_exporter import kube
from kube_scale_exporter.durations import go_duration
from kube_scale_exporter.flagtypes import positive_int
from kube_scale_exporter.kube.flags import kubeconfig_problem
from kube_scale_exporter.metrics import HistogramFamily
from kube_scale_exporter.pullfailures import (
    FailureCounts,
    FailureState,
    RegistryLabels,
    created_since,
    failure_families,
    registry_of_pulled,
    uncombined,
)
from kube_scale_exporter.registry import Collector, Needs, UsageError

# A scrape right after start (as in `check`) waits this long for the first list.
SYNC_WAIT_SECONDS = 5.0
# Events each watch (Pulled, Failed) may cache: events live an hour (the API server's
# --event-ttl), and a rollout of all 150,000 pods of a 7,500-node cluster makes 150,000
# Pulled events in it (14 MiB of RSS per 10,000 as cached: bench/results/kube_cache.md).
MAX_CACHED_EVENTS = 200_000
# From a fast local pull to the 30-minute pull of a 17 GB image.
BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
_GO_DURATION = r"((?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+|0)"
_PULLED = re.compile(
    rf'^Successfully pulled image "[^"]*" in {_GO_DURATION}'
    rf"(?: \({_GO_DURATION} including waiting\))?"
)


def parse_pulled(message: str) -> tuple[float, float | None] | None:
    """(pull seconds, queue-wait seconds or None) from a Pulled message; None if not a pull."""
    match = _PULLED.match(uncombined(message))
    if match is None:
        return None
    try:
        pulled = go_duration(match.group(1))
        total = go_duration(match.group(2)) if match.group(2) else None
    except ValueError:
        return None
    return pulled, (max(0.0, total - pulled) if total is not None else None)


class Histogram:
    """Cumulative bucket counts and a sum; safe to observe from the watch thread."""

    def __init__(self, buckets=BUCKETS):
        self.bounds = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float, times: int = 1) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(self.bounds, value)] += times
            self.sum += value * times

    def snapshot(self) -> HistogramSnapshot:
        with self._lock:
            return HistogramSnapshot(self.bounds, tuple(self.counts), self.sum)


@dataclass(frozen=True)
class HistogramSnapshot:
    """A histogram's counts per bucket (not cumulative) and sum at one moment."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum: float

    def family(self, name: str, doc: str) -> HistogramFamily:
        cumulative, running = [], 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            running += count
            cumulative.append((bound, running))
        return HistogramFamily(name, doc, buckets=cumulative, sum_value=self.sum)


# What event_summary reads; the rest of each event is dropped as it is decoded.
EVENT_FIELDS = kube.Fields(
    {
        "metadata": ("creationTimestamp",),
        "message": True,
        "count": True,
        "series": ("count",),
        "source": ("host",),
        "reportingInstance": True,
    }
)


def event_summary(event: dict) -> dict:
    """What the handlers read, so an hour of cluster-wide Pulled events stays small."""
    meta = event.get("metadata") or {}
    return {
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "message": event.get("message", ""),
        # An event written through events.k8s.io/v1 reads here with its repeats in
        # series.count and its node in reportingInstance (source is only deprecatedSource).
        "count": event.get("count") or (event.get("series") or {}).get("count") or 1,
        "source": {
            "host": (event.get("source") or {}).get("host") or event.get("reportingInstance", "")
        },
    }


class PulledEvents:
    """Feeds the two histograms from Pulled events created after `since` (Unix seconds)."""

    def __init__(self, since: float, failures: FailureCounts | None = None):
        self.since = since
        self.duration = Histogram()
        self.queue_wait = Histogram()
        self.failures = failures

    def _observe(self, event: dict, times: int) -> None:
        if times <= 0 or not created_since(event, self.since):
            return
        message = event.get("message", "")
        parsed = parse_pulled(message)
        if parsed is None:
            return
        pulled, waited = parsed
        self.duration.observe(pulled, times)
        if waited is not None:
            self.queue_wait.observe(waited, times)
        if self.failures is not None:
            self.failures.succeeded(registry_of_pulled(message), times)

    def on_add(self, event: dict) -> None:
        self._observe(event, event.get("count") or 1)

    def on_update(self, old: dict, new: dict) -> None:
        # The kubelet folds an identical repeat into the same event, raising its count; a
        # combined event's count rises for each similar one, its message the newest's.
        self._observe(new, (new.get("count") or 1) - (old.get("count") or 1))

    def snapshot(self) -> PulledState:
        return PulledState(
            self.duration.snapshot(),
            self.queue_wait.snapshot(),
            self.failures.snapshot() if self.failures is not None else None,
        )


@dataclass(frozen=True)
class PulledState:
    duration: HistogramSnapshot
    queue_wait: HistogramSnapshot
    failures: FailureState | None = None


def families(state: PulledState) -> list:
    out = [
        state.duration.family(
            "kubescale_image_pull_duration_seconds",
            "Image pull time reported by kubelet Pulled events (download only).",
        ),
        state.queue_wait.family(
            "kubescale_image_pull_queue_wait_seconds",
            "Time pulls waited in the kubelet's pull queue before downloading (Pulled events).",
        ),
    ]
    if state.failures is not None:
        out += failure_families(state.failures)
    return out


class ImagePullEventsCollector(Collector):
    """Pull-time and queue-wait histograms; the exposition is in this module's docstring."""

    name = "imagepull_events"
    modes = frozenset({"cluster"})
    default_enabled = False
    help = (
        "Histograms of image pull time and kubelet pull-queue wait from Pulled events, "
        "failed pulls by registry and cause from Failed events (two cluster-wide "
        "watches, reason=Pulled and reason=Failed)."
    )
    needs = {
        "cluster": Needs(
            rbac_rules=({"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"]},)
        )
    }

    @classmethod
    def add_arguments(cls, group):
        group.add_argument(
            "--image-pull.max-registries",
            dest="image_pull_max_registries",
            type=positive_int,
            default=10,
            metavar="N",
            help="Registries given their own label on the pull failure and success counters "
            '(cluster mode), first come; later ones count as registry="other" '
            "(default 10).",
        )
        group.add_argument(
            "--image-pull.max-cached-events",
            dest="image_pull_max_cached_events",
            type=positive_int,
            default=MAX_CACHED_EVENTS,
            metavar="N",
            help="Events each of the two watches (Pulled, Failed) may cache (cluster mode); "
            "past it the cache is dropped, the collector fails and the events meanwhile "
            f"are not counted, until fewer are kept (default {MAX_CACHED_EVENTS}).",
        )

    @classmethod
    def validate(cls, args):
        if (problem := kubeconfig_problem(args)) is not None:
            raise UsageError(problem)

    def __init__(self, args):
        super().__init__(args)
        # Whole seconds, as creationTimestamp has them: an event of this second counts.
        since = float(int(time.time()))
        registries = RegistryLabels(getattr(args, "image_pull_max_registries", 10))
        self.failures = FailureCounts(since, registries)
        self.events = PulledEvents(since=since, failures=self.failures)
        client = kube.client_from_args(args)
        events = kube.Resource("/api/v1", "events")
        cap = getattr(args, "image_pull_max_cached_events", MAX_CACHED_EVENTS)
        transform = EVENT_FIELDS.then(event_summary)
        self.informer = kube.Informer(
            client,
            events,
            field_selector="reason=Pulled",
            on_add=self.events.on_add,
            on_update=self.events.on_update,
            transform=transform,
            max_objects=cap,
        )
        # Events cannot be selected on "reason in (...)": a second watch, on Failed.
        self.failed_informer = kube.Informer(
            client,
            events,
            field_selector="reason=Failed",
            on_add=self.failures.on_add,
            on_update=self.failures.on_update,
            transform=transform,
            max_objects=cap,
        )

    def start(self):
        self.informer.start()
        self.failed_informer.start()

    def observe(self) -> PulledState:
        for informer, what in ((self.informer, "Pulled"), (self.failed_informer, "Failed")):
            if not informer.wait_synced(SYNC_WAIT_SECONDS):
                raise RuntimeError(f"no {what} events from the API server yet")
            informer.check_cache()
        return self.events.snapshot()

    families = staticmethod(families)

    def informers(self):
        return [self.informer, self.failed_informer]

    def close(self):
        self.informer.stop()
        self.failed_informer.stop()
