"""The balloons' summary: phases, waiting, headroom held and misconfigurations, computed
from the informers' cached objects."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from kube_scale_exporter import kube

log = logging.getLogger(__name__)

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
REASONS = {
    "priority_below_autoscaler_cutoff": "priority below the autoscaler's --expendable-pods-priority-cutoff: it never adds "
    "a node for them",
    "priority_not_negative": "priority 0 or more: pods of the default priority cannot preempt them",
    "priority_class_missing": "their priorityClassName names no PriorityClass",
    "requests_fit_no_node": "their requests exceed the allocatable resources of every node",
    "no_requests": "they request no resources, so they hold no headroom",
}


def _timestamp(text):
    return datetime.fromisoformat(text).timestamp()


def _running(pod) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and bool(
        (pod.get("spec") or {}).get("nodeName")
    )


@dataclass
class Summary:
    """What the metrics say, computed from cached objects."""

    phases: dict = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    pending_oldest: float = 0.0
    reserved: dict = field(default_factory=dict)  # resource name -> Decimal
    nodes: int = 0
    misconfigured: dict = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    total: int = 0
    unreadable: int = 0  # pods whose objects could not be read (counted in no metric)


def _add_pod(s, pod, classes, held, fits_cache, node_allocatables, now, cutoff):
    """One balloon's share of the summary."""
    s.total += 1
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    phase = status.get("phase") or "Unknown"
    s.phases[phase if phase in s.phases else "Unknown"] += 1
    if phase == "Pending" and not spec.get("nodeName"):
        waited = now - _timestamp(pod["metadata"]["creationTimestamp"])
        s.pending_oldest = max(s.pending_oldest, waited)
    requests = kube.pod_requests(pod)
    if _running(pod) and not pod["metadata"].get("deletionTimestamp"):
        held.add(spec["nodeName"])
        for name, value in requests.items():
            s.reserved[name] = s.reserved.get(name, 0) + value

    class_name = spec.get("priorityClassName")
    pc = classes.get(class_name) if class_name else None
    if class_name and pc is None:
        s.misconfigured["priority_class_missing"] += 1
    priority = pc.get("value", 0) if pc is not None else spec.get("priority", 0)
    if priority >= 0:
        s.misconfigured["priority_not_negative"] += 1
    if priority < cutoff:
        s.misconfigured["priority_below_autoscaler_cutoff"] += 1
    if not any(v > 0 for v in requests.values()):
        s.misconfigured["no_requests"] += 1
    key = tuple(sorted(requests.items()))
    if key not in fits_cache:
        fits_cache[key] = kube.fits_some(requests, node_allocatables)
    if node_allocatables and not fits_cache[key]:
        s.misconfigured["requests_fit_no_node"] += 1


def summarize(pods, priority_classes, node_allocatables, now, cutoff) -> Summary:
    """The balloon metrics for these objects at time `now` (seconds since the epoch).

    `node_allocatables` is a collection of distinct allocatable dicts (name -> Decimal).
    """
    classes = {pc["metadata"]["name"]: pc for pc in priority_classes}
    s = Summary()
    held = set()
    fits_cache = {}
    for pod in pods:
        try:
            _add_pod(s, pod, classes, held, fits_cache, node_allocatables, now, cutoff)
        except (AttributeError, TypeError, KeyError, ValueError, ArithmeticError) as exc:
            # One malformed object in the cache must not fail every scrape until a relist.
            s.unreadable += 1
            log.debug(
                "balloon pod %r unreadable: %r",
                (pod.get("metadata") or {}).get("name") if isinstance(pod, dict) else pod,
                exc,
            )
    s.nodes = len(held)
    return s
