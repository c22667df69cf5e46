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

`resource` is the plural of the resource, a bounded set. Before its first sync an
informer's age is absent (there is nothing to be old).
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
    for informer in informers:
        h = informer.health()
        up.add_metric([h.resource], 1.0 if h.up else 0.0)
        if h.last_sync_age is not None:
            age.add_metric([h.resource], h.last_sync_age)
        relists.add_metric([h.resource], h.relists)
    return [up, age, relists]
