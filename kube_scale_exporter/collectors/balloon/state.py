"""Balloon (overprovisioning) headroom: low-priority placeholder pods that keep nodes warm.

Balloons are the pods matching `--balloon.selector` (a label selector, evaluated by the API
server; giving it enables the collector, cluster mode only). Three informers feed it:
the balloon pods (all namespaces), PriorityClasses, and nodes (shrunk to allocatable).
Scrapes read their caches. The exposition, for two Running balloons of 2 CPUs / 4 GiB on
two nodes and one balloon waiting for a node:

    # HELP kubescale_balloon_pods Balloon pods by phase.
    # TYPE kubescale_balloon_pods gauge
    kubescale_balloon_pods{phase="Pending"} 1.0
    kubescale_balloon_pods{phase="Running"} 2.0
    kubescale_balloon_pods{phase="Succeeded"} 0.0
    kubescale_balloon_pods{phase="Failed"} 0.0
    kubescale_balloon_pods{phase="Unknown"} 0.0
    # HELP kubescale_balloon_pending_oldest_seconds How long the oldest balloon not yet placed on a node has waited (0 when none waits).
    # TYPE kubescale_balloon_pending_oldest_seconds gauge
    kubescale_balloon_pending_oldest_seconds 95.0
    # HELP kubescale_balloon_reserved Resources requested by Running balloons: the headroom real pods can take at once.
    # TYPE kubescale_balloon_reserved gauge
    kubescale_balloon_reserved{resource="cpu",unit="core"} 4.0
    kubescale_balloon_reserved{resource="memory",unit="byte"} 8.589934592e+09
    # HELP kubescale_balloon_nodes Nodes holding at least one Running balloon.
    # TYPE kubescale_balloon_nodes gauge
    kubescale_balloon_nodes 2.0
    # HELP kubescale_balloon_preemptions_total Balloons evicted to make room for other pods, since the exporter started.
    # TYPE kubescale_balloon_preemptions_total counter
    kubescale_balloon_preemptions_total 7.0
    # HELP kubescale_balloon_misconfigured Balloon pods affected by each configuration problem.
    # TYPE kubescale_balloon_misconfigured gauge
    kubescale_balloon_misconfigured{reason="priority_below_autoscaler_cutoff"} 0.0
    ...

Its three watches' kubescale_kube_* health comes with every scrape (kube_scale_exporter/scrape.py).
Every label value comes from a fixed set, except `resource`, which is bounded by the resource names
the cluster defines (cpu, memory, nvidia.com/gpu, ...), named as kube-state-metrics does.
"""

# The exposition above is quoted as served, its HELP lines whole.
import re
from dataclasses import dataclass

from kube_scale_exporter.collectors.balloon.summary import PHASES, REASONS, Summary
from kube_scale_exporter.metrics import CounterFamily, Family, GaugeFamily


@dataclass(frozen=True)
class BalloonState:
    """One scrape's summary and preemption count, with the flags `check` quotes."""

    summary: Summary
    preemptions: int
    selector: str
    cutoff: int


def resource_label(name: str) -> tuple[str, str]:
    """kube-state-metrics' naming: (sanitized resource, unit)."""
    if name == "cpu":
        unit = "core"
    elif name in ("memory", "ephemeral-storage", "storage") or name.startswith("hugepages-"):
        unit = "byte"
    else:
        unit = "integer"
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)[:100], unit


# Extended resources (nvidia.com/gpu, ...) come from node and pod specs anyone can write:
# at most this many, the largest, get a series; cpu, memory and storage always do.
MAX_EXTENDED_RESOURCES = 8


def reported_resources(reserved: dict) -> list[str]:
    """The resource names that get a kubescale_balloon_reserved series."""
    standard = [n for n in reserved if resource_label(n)[1] != "integer" or n == "cpu"]
    extended = sorted((n for n in reserved if n not in standard), key=lambda n: (-reserved[n], n))
    return standard + extended[:MAX_EXTENDED_RESOURCES]


def families(state: BalloonState) -> list[Family]:
    """The exposition of one state (see the module docstring)."""
    s = state.summary
    pods = GaugeFamily("kubescale_balloon_pods", "Balloon pods by phase.", labels=["phase"])
    for phase in PHASES:
        pods.add_metric([phase], s.phases[phase])
    oldest = GaugeFamily(
        "kubescale_balloon_pending_oldest_seconds",
        "How long the oldest balloon not yet placed on a node has waited (0 when none waits).",
        value=round(s.pending_oldest, 3),
    )
    reserved = GaugeFamily(
        "kubescale_balloon_reserved",
        "Resources requested by Running balloons: the headroom real pods can take at once.",
        labels=["resource", "unit"],
    )
    for name in sorted(reported_resources(s.reserved)):
        reserved.add_metric(list(resource_label(name)), float(s.reserved[name]))
    nodes = GaugeFamily(
        "kubescale_balloon_nodes", "Nodes holding at least one Running balloon.", value=s.nodes
    )
    preempted = CounterFamily(
        "kubescale_balloon_preemptions",
        "Balloons evicted to make room for other pods, since the exporter started.",
        value=state.preemptions,
    )
    bad = GaugeFamily(
        "kubescale_balloon_misconfigured",
        "Balloon pods affected by each configuration problem.",
        labels=["reason"],
    )
    for reason in REASONS:
        bad.add_metric([reason], s.misconfigured[reason])
    return [pods, oldest, reserved, nodes, preempted, bad]
