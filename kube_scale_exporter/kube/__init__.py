"""Kubernetes API access for collectors: config, a read-only client, informers, health.

The whole interface a collector needs:

    from kube_scale_exporter import kube

    client = kube.client_from_args(args)          # --kube.kubeconfig, $KUBECONFIG or in-cluster
    pods = kube.for_node(client, kube.PODS, args.kube_node_name,   # node mode
                         on_delete=lambda pod: ...)
    # or, cluster mode:  kube.Informer(client, kube.PODS, label_selector="app=x")
    pods.start()                                  # background list+watch thread
    pods.wait_synced(5)                           # True once the first list is in
    for pod in pods.items(): ...                  # in collect(): cache only, never the API
    pods.stop()                                   # in close()

- `Informer(client, resource, namespace=, label_selector=, field_selector=, on_add=,
  on_update=, on_delete=, transform=, max_objects=, keys_past_cap=)`: a thread-safe
  cache; objects are the API's JSON dicts (managedFields stripped, or projected by
  `transform`), shared and read-only. Lists stream (watch-list) where the API server gives it, else are paged.
  Handlers run on the informer's thread; after a relist they receive the
  differences, so no deletion is missed. Past `max_objects` the cache is dropped until
  the resource shrinks back under it: `check_cache()` raises CacheFull meanwhile; with
  `keys_past_cap` it is kept full and the rest counted by key (`snapshot()`).
- `Fields(spec)`: the fields a collector reads (nested names); as a `transform` it drops
  the rest of each object as it is decoded (`Fields(spec).then(reshape)` to reshape).
- `for_node(client, resource, node_name, **kw)`: the node-mode informer: server-side
  fieldSelector spec.nodeName=NODE, lists from the API server's watch cache, then one
  watch resumed from bookmarks: one watch per node per resource, no periodic relists.
- `Resource(api, plural, namespaced)`: e.g. `Resource("/api/v1", "events")`; PODS, NODES
  and PRIORITY_CLASSES are predefined.
- `health_families(informers)`: kubescale_kube_watch_up{resource},
  kubescale_kube_last_sync_age_seconds{resource}, kubescale_kube_relists_total{resource},
  informers of one resource reported together. `watch_health(collectors)` is the scrape
  source the CLI hands the Scraper: every scrape carries the health of the informers the
  collectors return from `informers()`, even when a collector fails.
- `parse_quantity`, `pod_requests`: resource quantities as exact Decimals.
- `NODE_SHAPE` (a nodes informer's transform), `distinct_shapes(nodes)`, `fits_some(requests,
  shapes)`: the nodes' distinct allocatable vectors and the fit check (kube/shapes.py).
- `KubeClient.get(path, params)` for a one-off read (e.g. /version); scrapes must not use it.

Timeouts: 5 s connect and 30 s read on every request; watches ask the server to close them
after 300-600 s and give up on a read silent for 120 s (bookmarks come about every 60 s).
Errors retry with `Backoff`: 0.5-1 s, doubling per consecutive failure, at most 30 s.
"""

import importlib

# Name -> the module that defines it, imported when the name is first used: the client,
# the informers and the kubeconfig reader (yaml) cost a node pod ~1 MiB more, which one
# that never talks to the API server need not pay (tests/test_imports.py checks).
_FROM = {
    "ApiError": "client",
    "CacheFull": "listing",
    "Fields": "fields",
    "Gone": "client",
    "KubeClient": "client",
    "ConfigError": "config",
    "KubeConfig": "config",
    "load": "config",
    "add_arguments": "flags",
    "client_from_args": "flags",
    "health_families": "health",
    "watch_health": "health",
    "Backoff": "backoff",
    "Informer": "informer",
    "for_node": "informer",
    "NODES": "resource",
    "NODE_SHAPE": "shapes",
    "PODS": "resource",
    "PRIORITY_CLASSES": "resource",
    "Resource": "resource",
    "parse_quantity": "quantity",
    "pod_requests": "quantity",
    "distinct_shapes": "shapes",
    "fits_some": "shapes",
}


def __getattr__(name: str):
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_FROM[name]}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "ApiError",
    "Backoff",
    "CacheFull",
    "Fields",
    "ConfigError",
    "Gone",
    "Informer",
    "KubeClient",
    "KubeConfig",
    "NODES",
    "NODE_SHAPE",
    "PODS",
    "PRIORITY_CLASSES",
    "Resource",
    "add_arguments",
    "client_from_args",
    "distinct_shapes",
    "fits_some",
    "for_node",
    "health_families",
    "load",
    "parse_quantity",
    "pod_requests",
    "watch_health",
]
