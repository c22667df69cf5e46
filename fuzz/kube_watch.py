"""A Kubernetes watch stream (one JSON event a line) through kube/client.py's Watch and
the informer's handling of each event (kube/reflector.py, kube/store.py), in pieces of
several sizes: as a watch, and as a streaming list (initial events until their end
bookmark, then a watch).

Documented errors, those the informer expects of a bad stream: ValueError (a line that is
not JSON, an event that is not one), ReplyTooLarge (a line or an object past its cap),
ApiError (an ERROR event), WatchListRefused (a streaming list that is not one). Invariants: the cache holds each object under its own key,
and its resourceVersion is one an event carried.
"""

from __future__ import annotations

import itertools

from fuzz import InvariantBroken, http_reply, piece_sizes, pieces
from kube_scale_exporter.kube.client import ApiError, ReplyTooLarge, Watch
from kube_scale_exporter.kube.informer import Informer
from kube_scale_exporter.kube.listing import InitialEvents, WatchListRefused, object_key
from kube_scale_exporter.kube.resource import PODS

TARGETS = (
    "kube_scale_exporter.kube.client",
    "kube_scale_exporter.kube.informer",
    "kube_scale_exporter.kube.listing",
    "kube_scale_exporter.kube.reflector",
    "kube_scale_exporter.kube.store",
)


def check(data: bytes) -> None:
    for size, streaming in itertools.product(piece_sizes(data)[:2], (False, True)):
        informer = Informer(None, PODS)
        initial = InitialEvents(informer.path, informer._transform, None) if streaming else None
        seen = {None}
        try:
            for event in Watch(http_reply(pieces(data, size))):
                if isinstance(event, dict) and isinstance(event.get("object"), dict):
                    meta = event["object"].get("metadata")
                    seen.add(repr(meta.get("resourceVersion")) if isinstance(meta, dict) else None)
                if initial is None:
                    informer._apply(event)
                else:
                    initial = informer._take_initial(event, initial)
        except (ValueError, ReplyTooLarge, ApiError, WatchListRefused):
            pass
        for key, obj in informer._items.items():
            if key != object_key(obj):
                raise InvariantBroken(f"{obj!r:.100} cached under {key!r:.100}")
        rv = informer.resource_version
        if rv is not None and repr(rv) not in seen:
            raise InvariantBroken(f"resourceVersion {rv!r:.100} came from no event")
