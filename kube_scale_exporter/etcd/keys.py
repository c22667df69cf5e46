"""Key counts per Kubernetes resource, found without listing keys or reading values.

Kubernetes stores objects at PREFIX<resource>/<namespace>/<name> for built-in
resources, PREFIX<group>/<resource>/... for custom resources and a few aggregated ones
(a first segment with a dot is an API group), and Services and Endpoints at
PREFIXservices/specs/... and PREFIXservices/endpoints/.... The walk asks etcd for the first key
at or after a cursor (keys only, limit 1), derives that key's resource, counts the
resource's whole range in one count-only request, then moves the cursor past it. So a
store of 100k keys in 50 resources costs 101 small requests, whatever the key count.

Label values stay bounded (kube_scale_exporter.labels): names are reduced to a safe
alphabet, at most `max_resources` resources are reported (the largest), the rest are summed into
resource="other", and after `4 * max_resources` distinct resources the walk counts the
remaining range in one request, so a flood of junk prefixes costs neither series nor a
request per prefix.
"""

from __future__ import annotations

from collections import Counter

from kube_scale_exporter.etcd.client import EtcdClient, prefix_end
from kube_scale_exporter.labels import OTHER, sanitize, top

WALK_FACTOR = 4
# Built-in resources stored one level deeper: services/specs and services/endpoints
# (Endpoints objects, which grow with the pods behind each Service).
NESTED = {b"services"}


def resource_of(key: bytes, prefix: bytes) -> tuple[str, bytes]:
    """(resource label, the key range prefix it covers) for a key under `prefix`.

    A key with nothing below its resource segment (a bare PREFIX/health) covers just
    itself.
    """
    parts = key[len(prefix) :].split(b"/")
    two_level = b"." in parts[0] or parts[0] in NESTED
    depth = 2 if two_level and len(parts) >= 3 else 1
    if len(parts) <= depth:
        return sanitize(parts[0]), key
    return sanitize(b"/".join(parts[:depth])), prefix + b"/".join(parts[:depth]) + b"/"


def count_resources(client: EtcdClient, prefix: bytes, max_resources: int) -> dict[str, int]:
    """{resource: keys} for the keys under `prefix`, at most max_resources + "other"."""
    end = prefix_end(prefix)
    counts: Counter[str] = Counter()
    cursor = prefix
    walked = 0
    while cursor < end:
        if walked >= WALK_FACTOR * max_resources:
            counts[OTHER] += client.count(cursor, end)
            break
        key = client.first_key(cursor, end)
        if key is None:
            break
        resource, covered = resource_of(key, prefix)
        if covered == key:
            counts[resource] += 1
            cursor = key + b"\x00"
        else:
            counts[resource] += client.count(covered, prefix_end(covered))
            cursor = prefix_end(covered)
        walked += 1
    return top(counts, max_resources)
