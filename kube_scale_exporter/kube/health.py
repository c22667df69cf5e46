"""The informers' own health, as metric families a collector yields next to its own.

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
its first sync an informer has no age (there is nothing to be old).
"""
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


def health_families(informers):
    up = GaugeMetricFamily("kubescale_kube_watch_up",
                           "1 when the informer's list+watch is established.",
                           labels=["resource"])
    age = GaugeMetricFamily(
        "kubescale_kube_last_sync_age_seconds",
        "Seconds since the informer last confirmed its cache current (list, event or bookmark).",
        labels=["resource"])
    relists = CounterMetricFamily(
        "kubescale_kube_relists",
        "Lists after the first one (the watch fell behind: 410 Gone).",
        labels=["resource"])
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
