"""The fields of an API object a collector reads: everything else is dropped as each object
is decoded, before it reaches an informer's cache.

A collector declares what it reads as nested names:

    POD_FIELDS = Fields({
        "metadata": ("name", "namespace", "uid", "resourceVersion"),
        "spec": {"nodeName": True, "containers": {"resources": True}},
        "status": ("phase",),
    })

A name mapped to True (or listed in a tuple) keeps its value whole; a name mapped to a
nested spec keeps only those names of it, and a list value keeps those names of each of
its objects. A field the object lacks stays absent (readers already treat absent and
empty alike). Listing decodes a page item by item (kube/listing.py) and a watch event by
event, and each object is projected at once: what an informer holds is the projection,
never the object as sent (a pod as sent is 3-8 KiB of JSON; a balloon's projection a
tenth of that: bench/results/kube_cache.md).
"""

from __future__ import annotations

# Every informer's objects carry these: the cache's key, and what a relist compares.
IDENTITY = ("name", "namespace", "uid", "resourceVersion")


class Fields:
    """A projection of objects onto the fields a collector reads; call it on an object."""

    def __init__(self, spec: dict):
        self.spec = _normal(spec)
        meta = self.spec.get("metadata")
        if meta is not True:  # the informer keys and compares objects by these
            self.spec["metadata"] = {**dict.fromkeys(IDENTITY, True), **(meta or {})}

    def __call__(self, obj):
        return _project(obj, self.spec)

    def then(self, transform):
        """The projection followed by `transform` (a collector's reshaping of what it read)."""

        def both(obj):
            return transform(self(obj))

        return both


def _normal(spec) -> dict:
    if isinstance(spec, (tuple, list, set, frozenset)):
        return dict.fromkeys(spec, True)
    if not isinstance(spec, dict):
        raise TypeError(f"a field spec is a dict or a tuple of names, not {spec!r}")
    return {name: True if sub is True else _normal(sub) for name, sub in spec.items()}


def _project(value, spec):
    if isinstance(value, list):
        return [_project(v, spec) for v in value]
    if not isinstance(value, dict):
        return value  # not the shape a reader expects: the reader's own checks say so
    out = {}
    for name, sub in spec.items():
        if name in value:
            out[name] = value[name] if sub is True else _project(value[name], sub)
    return out
