"""Warm headroom held by cluster-autoscaler CapacityBuffers (autoscaling.x-k8s.io).

The autoscaler keeps each buffer's replicas as virtual placeholder pods made from a
PodTemplate (the one `spec.podTemplateRef` names, or the template of the object
`spec.scalableRef` names), copied into a PodTemplate of its own that `status.podTemplateRef`
names. The collector watches the buffers (v1beta1 where served, else v1alpha1), the
PodTemplates, and the events on buffers (involvedObject.kind=CapacityBuffer); nodes too,
for the fit check, unless --no-capacitybuffer.node-fit. Scrapes read the caches. For a
ready buffer of 4 replicas of 2 CPUs / 8 GiB, and one whose PodTemplate is gone:

    # HELP kubescale_capacitybuffer_api_served 1 when the API server serves CapacityBuffers in this version.
    # TYPE kubescale_capacitybuffer_api_served gauge
    kubescale_capacitybuffer_api_served{version="v1beta1"} 1.0
    kubescale_capacitybuffer_api_served{version="v1alpha1"} 1.0
    # HELP kubescale_capacitybuffer_api_watched 1 for the version the collector watches.
    # TYPE kubescale_capacitybuffer_api_watched gauge
    kubescale_capacitybuffer_api_watched{version="v1beta1"} 1.0
    kubescale_capacitybuffer_api_watched{version="v1alpha1"} 0.0
    # HELP kubescale_capacitybuffer_buffers CapacityBuffers in the cluster.
    # TYPE kubescale_capacitybuffer_buffers gauge
    kubescale_capacitybuffer_buffers 2.0
    ...
    kubescale_capacitybuffer_replicas{name="web",namespace="shop",source="spec"} 4.0
    kubescale_capacitybuffer_replicas{name="web",namespace="shop",source="status"} 4.0
    kubescale_capacitybuffer_reserved{name="web",namespace="shop",resource="cpu",unit="core"} 8.0
    kubescale_capacitybuffer_problem{name="gone",namespace="shop",reason="pod_template_missing"} 1.0

tests/golden/capacitybuffer.prom is the whole exposition. `resource` is cpu, memory or
nvidia_com_gpu (unit core, byte, integer), as kubescale_balloon_reserved names them.
Per-buffer series (labels namespace and name) exist for the first --capacitybuffer.max-buffers
buffers by namespace and name; the cluster-wide series count every buffer read. Past
--capacitybuffer.max-cached-objects a watch caches that many objects and counts the rest
by key (kubescale_capacitybuffer_objects_not_cached{resource}): kubescale_capacitybuffer_buffers
still counts every buffer, and kubescale_capacitybuffer_buffers_untracked{reason} those
left out of the sums (reserved, placeable, problems). Every other label value comes from a
fixed set; condition reasons outside it read "other".
While the API server serves neither version, only the api_* series (all 0) are exported:
the collector is off, not failed.
"""

from __future__ import annotations

from dataclasses import dataclass

from kube_scale_exporter.collectors.balloon.state import resource_label
from kube_scale_exporter.collectors.capacitybuffer.summary import (
    INPUT_PROBLEMS,
    PROBLEMS,
    RESOURCES,
    UNTRACKED,
    WATCHES,
    Summary,
)
from kube_scale_exporter.metrics import Family, GaugeFamily

VERSIONS = ("v1beta1", "v1alpha1")


@dataclass(frozen=True)
class BufferState:
    """One scrape: what the API server serves, the version watched, and the summary
    (None while no version is served)."""

    served: frozenset
    watched: str | None
    summary: Summary | None
    now: float
    max_buffers: int
    node_fit: bool


def families(state: BufferState) -> list[Family]:
    """The exposition of one state (see the module docstring)."""
    served = GaugeFamily(
        "kubescale_capacitybuffer_api_served",
        "1 when the API server serves CapacityBuffers in this version.",
        labels=["version"],
    )
    watched = GaugeFamily(
        "kubescale_capacitybuffer_api_watched",
        "1 for the version the collector watches.",
        labels=["version"],
    )
    for v in VERSIONS:
        served.add_metric([v], 1.0 if v in state.served else 0.0)
        watched.add_metric([v], 1.0 if v == state.watched else 0.0)
    s = state.summary
    if s is None:
        return [served, watched]

    shown, hidden = s.buffers[: state.max_buffers], s.buffers[state.max_buffers :]
    count = GaugeFamily(
        "kubescale_capacitybuffer_buffers", "CapacityBuffers in the cluster.", value=s.total
    )
    over = GaugeFamily(
        "kubescale_capacitybuffer_buffers_over_cap",
        "CapacityBuffers past --capacitybuffer.max-buffers: counted in the cluster-wide "
        "series, without series of their own.",
        value=len(hidden),
    )
    untracked = GaugeFamily(
        "kubescale_capacitybuffer_buffers_untracked",
        "CapacityBuffers counted in kubescale_capacitybuffer_buffers but left out of the "
        "cluster-wide sums, by reason: cache_full (past --capacitybuffer.max-cached-objects, "
        "counted by key and not read: in no other series), unreadable (likewise), "
        "template_not_cached (its PodTemplate past the cap: its requests unknown, so left out "
        "of reserved and placeable; its problems count).",
        labels=["reason"],
    )
    for reason in UNTRACKED:
        untracked.add_metric([reason], s.untracked[reason])
    not_cached = GaugeFamily(
        "kubescale_capacitybuffer_objects_not_cached",
        "Objects a watch counts by key past --capacitybuffer.max-cached-objects without "
        "caching them (events: a buffer's last word may be among them).",
        labels=["resource"],
    )
    for resource in WATCHES:
        not_cached.add_metric([resource], s.not_cached[resource])
    labels = ["resource", "unit"]
    total = GaugeFamily(
        "kubescale_capacitybuffer_cluster_reserved",
        "Resources all CapacityBuffers hold: replicas the autoscaler resolved times one "
        "replica's requests (except the buffers in kubescale_capacitybuffer_buffers_untracked).",
        labels=labels,
    )
    placeable = GaugeFamily(
        "kubescale_capacitybuffer_cluster_placeable",
        "The part of kubescale_capacitybuffer_cluster_reserved whose replicas fit the "
        "allocatable resources of an existing node.",
        labels=labels,
    )
    for r in RESOURCES:
        total.add_metric(list(resource_label(r)), float(s.reserved[r]))
        if s.node_fit:
            placeable.add_metric(list(resource_label(r)), float(s.placeable[r]))
    problems = GaugeFamily(
        "kubescale_capacitybuffer_problems",
        "CapacityBuffers with each problem (of those read: see "
        "kubescale_capacitybuffer_buffers_untracked).",
        labels=["reason"],
    )
    for reason in PROBLEMS:
        problems.add_metric([reason], s.problems[reason])

    nn = ["namespace", "name"]
    replicas = GaugeFamily(
        "kubescale_capacitybuffer_replicas",
        "Replicas a CapacityBuffer asks for (spec) and the autoscaler resolved (status).",
        labels=[*nn, "source"],
    )
    per_pod = GaugeFamily(
        "kubescale_capacitybuffer_pod_requests",
        "Resources one replica of a CapacityBuffer requests (its pod template).",
        labels=[*nn, *labels],
    )
    reserved = GaugeFamily(
        "kubescale_capacitybuffer_reserved",
        "Resources a CapacityBuffer holds: resolved replicas times one replica's requests.",
        labels=[*nn, *labels],
    )
    info = GaugeFamily(
        "kubescale_capacitybuffer_info",
        "A CapacityBuffer's provisioning strategy and where its pod template comes from.",
        labels=[*nn, "strategy", "template_from"],
    )
    conditions = GaugeFamily(
        "kubescale_capacitybuffer_condition",
        "A CapacityBuffer's conditions, with their status and reason.",
        labels=[*nn, "condition", "status", "reason"],
    )
    word = GaugeFamily(
        "kubescale_capacitybuffer_scale_up_event_age_seconds",
        "Seconds since the autoscaler last posted its last word on a CapacityBuffer "
        "(reason TriggeredScaleUp or NotTriggerScaleUp).",
        labels=[*nn, "reason"],
    )
    problem = GaugeFamily(
        "kubescale_capacitybuffer_problem",
        "1 for each problem found in a CapacityBuffer's spec or references.",
        labels=[*nn, "reason"],
    )
    for b in shown:
        key = [b.namespace, b.name]
        if b.spec_replicas is not None:
            replicas.add_metric([*key, "spec"], b.spec_replicas)
        replicas.add_metric([*key, "status"], b.status_replicas)
        if b.requests is not None:
            held = b.reserved
            for r in RESOURCES:
                per_pod.add_metric([*key, *resource_label(r)], float(b.requests[r]))
                reserved.add_metric([*key, *resource_label(r)], float(held[r]))
        info.add_metric([*key, b.strategy, b.template_from], 1)
        for cond, status, reason in b.conditions:
            conditions.add_metric([*key, cond, status, reason], 1)
        if b.last_word is not None:
            age = max(0.0, state.now - b.last_word.at)
            word.add_metric([*key, b.last_word.reason], round(age, 3))
        for reason in b.problems:
            if reason in INPUT_PROBLEMS:
                problem.add_metric([*key, reason], 1)
    out = [served, watched, count, over, untracked, not_cached, total]
    if s.node_fit:
        out.append(placeable)
    return [*out, problems, replicas, per_pod, reserved, info, conditions, word, problem]
