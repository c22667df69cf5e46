"""One list of a resource: its pages fetched with limit/continue (or one page from the API
server's watch cache), each decoded item by item as it streams in.

A page read whole before json.loads sees it costs its size in RSS: a page of 500 pods is
tens of MB, and a hostile or broken server's endless page cost its 32 MiB cap. Here each
item of `items` is decoded on its own (jsonstream.Reader) and handed on at once
(transformed: the cache keeps only what its collector reads), so a page costs about one
object however large the page: at most jsonstream.MAX_ITEM_BYTES of text buffered, and no
more items than the page's limit (docs/reliability.md has the measurements).
"""

from __future__ import annotations

from .client import KubeClient, ReplyTooLarge
from .jsonstream import Reader

# Items in one page from the watch cache, which ignores limit (node mode: this node's
# pods, 110 by default and a few hundred where kubelets are tuned for more).
MAX_UNPAGED_ITEMS = 5_000
HERE = "kube_scale_exporter/kube/listing.py"


def object_key(obj) -> str:
    """ "namespace/name" ("name" when cluster-scoped); ValueError for an object the API
    server never sends (no metadata.name, or one that is not a string)."""
    meta = obj.get("metadata")
    name, ns = (meta.get("name"), meta.get("namespace")) if isinstance(meta, dict) else (None, None)
    if not isinstance(name, str) or not name or not isinstance(ns, (str, type(None))):
        raise ValueError(f"an object without a name: metadata {str(meta)[:80]}")
    return f"{ns}/{name}" if ns else name


def strip_managed_fields(obj):
    # Server-side-apply bookkeeping: often half an object's size and never read here.
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class CacheFull(Exception):
    """A list or watch brought more objects than the informer may cache (its max_objects)."""


def list_all(
    client: KubeClient, path, selectors, transform, from_cache, page_size, max_objects=None
):
    """({key: transform(item)}, the list's resourceVersion), every page followed.

    `from_cache` lists from the API server's watch cache (resourceVersion=0), which
    ignores paging: the cheap choice for thousands of node-filtered informers. A continue
    token the server no longer holds raises Gone (410 Expired): the caller lists again.
    Past `max_objects` distinct objects the list stops at once (the reply is closed, not
    read on) and raises CacheFull."""
    params = dict(selectors)
    if from_cache:
        # Relists too: 7,500 nodes relisting after a 410 must not each read etcd.
        params["resourceVersion"] = "0"
        cap = (MAX_UNPAGED_ITEMS, f"MAX_UNPAGED_ITEMS in {HERE}")
    else:
        params["limit"] = str(page_size)
        cap = (page_size, f"limit={page_size} was asked")
    fresh = {}

    def keep(item):
        if not isinstance(item, dict):
            raise ValueError(f"{path}: a list item that is not an object: {str(item)[:40]}")
        item = transform(item)
        key = object_key(item)
        if max_objects is not None and len(fresh) >= max_objects and key not in fresh:
            fresh.clear()  # not held on by the traceback until a full collection
            raise CacheFull(f"{path}: more than {max_objects} objects")
        fresh[key] = item

    while True:
        meta = client.stream(path, params, lambda chunks: decode(chunks, keep, cap, path))
        if not meta.get("continue"):
            return fresh, meta.get("resourceVersion")
        params = dict(params, **{"continue": meta["continue"]})


def decode(chunks, on_item, cap: tuple[int, str], what: str) -> dict:
    """Read a list reply from `chunks` (its bytes in any pieces), calling on_item(item) for
    each of its `items` as soon as it is complete; returns the list's metadata. Raises
    ValueError for a reply that is not a list object, ReplyTooLarge past MAX_ITEM_BYTES or
    past cap = (items, why that many)."""
    reader = Reader(chunks, what)
    try:
        return _list_object(reader, on_item, cap)
    except BaseException:
        # The traceback keeps these frames in a reference cycle until a full collection:
        # it must not keep the buffered text too, on every failing list.
        reader.buf = ""
        raise


def _list_object(reader, on_item, cap) -> dict:
    reader.expect("{")
    metadata, count = {}, 0
    more = reader.peek() != "}"
    if not more:
        reader.expect("}")
    while more:
        if reader.peek() != '"':
            raise reader.error("a member name")
        key = reader.value()
        reader.expect(":")
        if key == "items" and reader.peek() == "[":
            count = _items(reader, on_item, cap, count)
        else:
            value = reader.value()
            if key == "metadata" and isinstance(value, dict):
                metadata = value
            elif key == "items" and value is not None:
                raise reader.error("items as a list")
        more = reader.either(",}") == ","
    reader.expect_end()
    return metadata


def _items(reader, on_item, cap, count) -> int:
    """on_item(item) for each item of the array at hand; the count of items so far."""
    reader.expect("[")
    more = reader.peek() != "]"
    if not more:
        reader.expect("]")
    while more:
        count += 1
        if count > cap[0]:
            raise ReplyTooLarge(f"{reader.what}: a page of more than {cap[0]} items ({cap[1]})")
        on_item(reader.value())
        more = reader.either(",]") == ","
    return count
