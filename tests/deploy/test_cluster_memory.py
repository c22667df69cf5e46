"""The cluster Deployment's memory limit holds what its collectors may cache at their
default caps, so the cap (a clean, logged collector failure) trips before the OOM killer.

The per-object costs are the measured ones in bench/results/kube_cache.md, the process
at rest in bench/results/cluster_scale.md and a key past the capacitybuffer cap in
bench/results/capacitybuffer_flood.md: when one is re-run, this test re-checks the limit
against the new figures.
"""

import os

import pytest

from kube_scale_exporter.collectors.balloon.collector import MAX_CACHED_OBJECTS
from kube_scale_exporter.collectors.capacitybuffer import collector as capacitybuffer
from kube_scale_exporter.collectors.imagepull_events import MAX_CACHED_EVENTS
from tests.deploy.conftest import REPO, deployment_memory_limit

RESULTS = os.path.join(REPO, "bench", "results")
MIB = 1 << 20
FLOOD = 100_000


def per_object_mib(resource: str, cached_as: str) -> float:
    """RSS one cached object adds, from kube_cache.md's 'RSS added per 10,000' column."""
    with open(os.path.join(RESULTS, "kube_cache.md")) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[:2] == [resource, cached_as]:
                return float(cells[3]) / 10_000
    raise AssertionError(f"kube_cache.md has no row for {resource} cached as {cached_as}")


def key_past_cap_mib() -> float:
    """RSS one object past the capacitybuffer collector's cap adds (its key alone), from
    capacitybuffer_flood.md: the exporter at 100,000 buffers less at the cap, per key."""
    rows = {}
    with open(os.path.join(RESULTS, "capacitybuffer_flood.md")) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = [c.replace(",", "") for c in cells[1:]]
    at_cap, flood = (float(v) for v in rows["exporter RSS, MiB"])
    keys = float(rows["kubescale_capacitybuffer_objects_not_cached{resource=capacitybuffers}"][1])
    return (flood - at_cap) / keys


def rest_rss_mib() -> float:
    """The deployed cluster exporter's RSS at rest, before its caches grow."""
    with open(os.path.join(RESULTS, "cluster_scale.md")) as f:
        for line in f:
            if line.startswith("| at rest: RSS at its end, MiB |"):
                return float(line.split("|")[2])
    raise AssertionError("cluster_scale.md has no 'at rest: RSS' row")


@pytest.mark.unit
def test_the_cluster_deployment_holds_every_cache_at_its_default_cap():
    pod = per_object_mib("pods", "pod_fields")
    event = per_object_mib("events", "event_fields")
    # balloon: pods, nodes and PriorityClasses, each capped at MAX_CACHED_OBJECTS. A node
    # kept as kube.NODE_SHAPE (allocatable) or a PriorityClass (its value) is smaller than a
    # Running pod as POD_FIELDS keeps it, so the pod's figure bounds all three.
    balloon = 3 * MAX_CACHED_OBJECTS * pod
    # imagepull_events: the Pulled and the Failed watches, each capped.
    events = 2 * MAX_CACHED_EVENTS * event
    # capacitybuffer: buffers, PodTemplates and events on buffers at its cap, and nodes at
    # theirs. Taken at a balloon pod's figure: a buffer as BUFFER_FIELDS keeps it (refs,
    # limits, three conditions) and a PodTemplate as TEMPLATE_FIELDS (its requests) are
    # assumed no larger (not measured on their own).
    buffers = (3 * capacitybuffer.MAX_CACHED_OBJECTS + capacitybuffer.MAX_CACHED_NODES) * pod
    # Past its cap a watch keeps a key per object: issue 37's flood of 100,000 buffers. (A
    # flood on all three watches at once needs a higher limit: docs/capacitybuffer.md.)
    buffers += FLOOD * key_past_cap_mib()
    worst = rest_rss_mib() + balloon + events + buffers
    limit = deployment_memory_limit() / MIB
    assert worst <= limit, (
        f"at the default caps the cluster exporter may hold {worst:.0f} MiB "
        f"(at rest {rest_rss_mib():.0f}, balloon {balloon:.0f}, events {events:.0f}, "
        f"capacitybuffer {buffers:.0f}): "
        f"over deploy/base's {limit:.0f} MiB limit"
    )
