"""A kubelet event (the API server's JSON of one Event) through what imagepull_events
does with it: the Pulled message's durations (collectors/imagepull_events.py, Go
durations in durations.py), the Failed message's registry and cause (pullfailures.py),
the event summarized and fed to the counters as an add and as an update.

Documented behaviour: a message that is not a pull, or not a valid one, is skipped
(None); only a malformed event (not JSON, a count or timestamp of the wrong type) may
raise, ValueError or TypeError, which the informer logs and drops. Invariants: seconds are
finite and >= 0, the cause is one of REASONS, registry labels are sanitized, the counters
only grow.
"""

from __future__ import annotations

import json
import math

from fuzz import InvariantBroken
from kube_scale_exporter import pullfailures
from kube_scale_exporter.collectors.imagepull_events import (
    PulledEvents,
    event_summary,
    parse_pulled,
)
from kube_scale_exporter.durations import go_duration
from kube_scale_exporter.labels import sanitize

TARGETS = (
    "kube_scale_exporter.pullfailures",
    "kube_scale_exporter.durations",
    "kube_scale_exporter.collectors.imagepull_events",
    "kube_scale_exporter.containerd.reference",
)


def check(data: bytes) -> None:
    try:
        event = json.loads(data)
    except (ValueError, RecursionError):
        event = None
    if not isinstance(event, dict):
        _message(data.decode("utf-8", "replace"))
        return
    message = event.get("message")
    if isinstance(message, str):
        _message(message)
    failures = pullfailures.FailureCounts(0, pullfailures.RegistryLabels(3))
    pulled = PulledEvents(0, failures)
    try:
        summary = event_summary(event)
        pulled.on_add(summary)
        failures.on_add(summary)
        pulled.on_update(summary, dict(summary, count=summary["count"] + 1))
        failures.on_update(summary, dict(summary, count=summary["count"] + 1))
    except (ValueError, TypeError, AttributeError):
        return
    state = pulled.snapshot()
    for hist in (state.duration, state.queue_wait):
        if not math.isfinite(hist.sum) or hist.sum < 0 or min(hist.counts) < 0:
            raise InvariantBroken(f"histogram {hist}")
    for (registry, reason), count in state.failures.failures.items():
        if reason not in pullfailures.REASONS or count < 0 or sanitize(registry) != registry:
            raise InvariantBroken(f"failure ({registry!r}, {reason!r}) x {count}")


def _message(message: str) -> None:
    got = parse_pulled(message)
    if got is not None:
        pulled, waited = got
        if not (math.isfinite(pulled) and pulled >= 0) or (
            waited is not None and not (math.isfinite(waited) and waited >= 0)
        ):
            raise InvariantBroken(f"{message[:80]!r}: {got}")
    failed = pullfailures.parse_failed(message)
    if failed is not None:
        host, reason = failed
        if reason not in pullfailures.REASONS or sanitize(host) != host:
            raise InvariantBroken(f"{message[:80]!r}: {failed}")
    host = pullfailures.registry_of_pulled(message)
    if host is not None and sanitize(host) != host:
        raise InvariantBroken(f"{message[:80]!r}: registry {host!r}")
    if pullfailures.classify(message) not in pullfailures.REASONS:
        raise InvariantBroken(f"{message[:80]!r}: cause")
    try:
        seconds = go_duration(message)
    except ValueError:
        return
    if not (math.isfinite(seconds) and seconds >= 0):
        raise InvariantBroken(f"{message[:80]!r}: {seconds} s")
