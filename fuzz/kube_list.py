"""A Kubernetes list page through kube/listing.py's decode(), item by item as it streams
(kube/jsonstream.py), in pieces of several sizes; and the same bytes as the body of an
error answer (kube/client.py's _error, which reads a Status out of it).

Documented errors: ValueError for a reply that is not a list object, ReplyTooLarge past
a cap; an error body of any kind makes an ApiError. Invariant: the items and metadata
are what json.loads makes of the same bytes (read as UTF-8), in pieces of any size, and
decode() refuses what json.loads refuses.
"""

from __future__ import annotations

import json

from fuzz import InvariantBroken, piece_sizes, pieces
from kube_scale_exporter.kube import jsonstream, listing
from kube_scale_exporter.kube.client import ApiError, ReplyTooLarge, _error

TARGETS = ("kube_scale_exporter.kube.listing", "kube_scale_exporter.kube.jsonstream")
CAP = (500, "limit=500 was asked")


class _Refused(Exception):
    """The reference refuses the page too."""


class _Pairs(list):
    """An object's members in order, a repeated key kept each time."""


def check(data: bytes) -> None:
    for status in (410, 500):
        error = _error(status, data.decode("utf-8", "replace"), "1")
        if not isinstance(error, ApiError) or error.status != status:
            raise InvariantBroken(f"HTTP {status} read as {error!r:.100}")
    try:
        expected = _reference(data)
    except _Refused:
        expected = None
    for i, size in enumerate(piece_sizes(data)):
        # The reader's long-value path starts past LONG_VALUE (256 KiB); inputs are
        # smaller, so every other run lowers it, as tests/kube/test_listing.py does.
        jsonstream.LONG_VALUE = _LONG_VALUES[i % 2]
        items: list = []
        try:
            metadata = listing.decode(pieces(data, size), items.append, CAP, "GET /x")
            got = _dump(items, metadata)
        except ReplyTooLarge:
            # Raised at the item past the cap, before a later fault is read.
            got = "too large" if expected is not None else None
        except ValueError:
            got = None
        finally:
            jsonstream.LONG_VALUE = _LONG_VALUES[0]
        if got != expected:
            raise InvariantBroken(
                f"in pieces of {size}: {got!r:.300} != json.loads' {expected!r:.300}"
            )


def _reference(data: bytes):
    """(items, metadata) as json.loads reads the page, keeping what decode() keeps of a
    repeated key: the items of every `items` array, the last `metadata` object."""
    try:
        doc = json.loads(data.decode("utf-8"), object_pairs_hook=_Pairs)
    except (ValueError, RecursionError):
        raise _Refused from None
    if not isinstance(doc, _Pairs):
        raise _Refused
    items, metadata = [], {}
    for key, value in doc:
        if key == "items" and isinstance(value, list) and not isinstance(value, _Pairs):
            items += value
        elif key == "items" and value is not None:
            raise _Refused
        elif key == "metadata" and isinstance(value, _Pairs):
            metadata = value
    if len(items) > CAP[0]:
        return "too large"
    return _dump([_plain(i) for i in items], _plain(metadata))


def _plain(value):
    """Objects back from their pairs (the last of a repeated key wins, as in json.loads)."""
    if isinstance(value, _Pairs):
        return {k: _plain(v) for k, v in value}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _dump(items, metadata) -> str:
    return json.dumps([items, metadata])


_LONG_VALUES = (jsonstream.LONG_VALUE, 64)
