"""The informers' own health: metric families that every scrape carries for the process.

    # HELP kubescale_kube_watch_up 1 when the informer's list+watch is established.
    # TYPE kubescale_kube_watch_up gauge
    kubescale_kube_watch_up{resource="pods"} 1.0
    # HELP kubescale_kube_last_sync_age_seconds Seconds since the informer last confirmed its cache current (list, event or bookmark).
    # TYPE kubescale_kube_last_sync_age_seconds gauge
    kubescale_kube_last_sync_age_seconds{resource="pods"} 12.5
    # HELP kubescale_kube_relists_total Lists after the first one (the watch fell behind: 410 Gone).
    # TYPE kubescale_kube_relists_total counter
    kubescale_kube_relists_total{resource="pods"} 0.0

`resource` is the plural of the resource, a bounded set. Informers of the same resource
are reported together: up only if all are, the oldest sync, the sum of relists. Before
its first sync an informer has no age (there is nothing to be old). The series come with
every scrape, not with the collector that reads the watch, so they are there even while
that collector fails.
"""

from dataclasses import dataclass

from kube_scale_exporter.metrics import CounterFamily, GaugeFamily


@dataclass(frozen=True)
class Health:
    """What one informer reports (Informer.health())."""

    resource: str
    up: bool
    last_sync_age: float | None  # seconds; None before the first sync
    relists: int


def watch_health(collectors):
    """A scrape source: the health of every informer the collectors run (none: no series)."""

    def families():
        informers = [i for c in collectors for i in c.informers()]
        return health_families(informers) if informers else []

    return families


def health_families(informers):
    up = GaugeFamily(
        "kubescale_kube_watch_up",
        "1 when the informer's list+watch is established.",
        labels=["resource"],
    )
    age = GaugeFamily(
        "kubescale_kube_last_sync_age_seconds",
        "Seconds since the informer last confirmed its cache current (list, event or bookmark).",
        labels=["resource"],
    )
    relists = CounterFamily(
        "kubescale_kube_relists",
        "Lists after the first one (the watch fell behind: 410 Gone).",
        labels=["resource"],
    )
    by_resource = {}
    for informer in informers:
        by_resource.setdefault(informer.resource.plural, []).append(informer.health())
    for resource in sorted(by_resource):
        healths = by_resource[resource]
        up.add_metric([resource], 1.0 if all(h.up for h in healths) else 0.0)
        ages = [h.last_sync_age for h in healths]
        if None not in ages:
            age.add_metric([resource], max(ages))
        relists.add_metric([resource], sum(h.relists for h in healths))
    return [up, age, relists]
