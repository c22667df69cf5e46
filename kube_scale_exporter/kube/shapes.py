"""Node shapes: the nodes' allocatable resources, kept as few distinct vectors, and whether
a pod's requests fit one of them.

One source for every collector that asks "could this pod run on any node there is": an
informer on nodes projected by `NODE_SHAPE` keeps only each node's allocatable, parsed
once per node update on the informer's thread (a 7,500-node cache stays a few MB and a
scrape parses nothing); `distinct_shapes(nodes)` reduces the cache to its distinct vectors (node
pools share a few); `fits_some(requests, shapes)` is the check.
"""

from .fields import Fields
from .quantity import parse_quantity

_ALLOCATABLE = Fields({"status": ("allocatable",)})


def _allocatable(node):
    meta = node.get("metadata") or {}
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {
        "metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")},
        "allocatable": tuple(sorted((name, parse_quantity(q)) for name, q in alloc.items())),
    }


# The informer transform: a node as its name, resourceVersion and parsed allocatable.
NODE_SHAPE = _ALLOCATABLE.then(_allocatable)


def distinct_shapes(nodes) -> list[dict]:
    """Distinct allocatable vectors (name -> Decimal) of nodes cached through NODE_SHAPE."""
    return [dict(shape) for shape in {node["allocatable"] for node in nodes}]


def fits_some(requests: dict, node_shapes) -> bool:
    """Whether every request fits within one shape's allocatable (a resource the shape
    lacks is 0 there)."""
    return any(all(v <= alloc.get(r, 0) for r, v in requests.items()) for alloc in node_shapes)
