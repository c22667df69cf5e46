"""One list of a resource: its pages fetched with limit/continue (or one page from the API
server's watch cache), each decoded item by item as it streams in.

A page read whole before json.loads sees it costs its size in RSS: a page of 500 pods is
tens of MB, and a hostile or broken server's endless page cost its 32 MiB cap. Here each
item of `items` is decoded on its own (jsonstream.Reader) and handed on at once
(transformed: the cache keeps only what its collector reads), so a page costs about one
object however large the page: at most jsonstream.MAX_ITEM_BYTES of text buffered, and no
more items than the page's limit (docs/reliability.md has the measurements).

A streaming list (Kubernetes' watch-list, beta and on by default in 1.34's kube-apiserver)
is a watch that first sends the current state as ADDED events and then a BOOKMARK annotated
k8s.io/initial-events-end: the API server answers it from its watch cache without building
the list in memory. `InitialEvents` collects that state into the same kind of fresh cache
a paged list gives.
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
    client: KubeClient,
    path,
    selectors,
    transform,
    from_cache,
    page_size,
    max_objects=None,
    into: Fresh | None = None,
):
    """({key: transform(item)}, the list's resourceVersion), every page followed.

    `from_cache` lists from the API server's watch cache (resourceVersion=0), which
    ignores paging: the cheap choice for thousands of node-filtered informers. A continue
    token the server no longer holds raises Gone (410 Expired): the caller lists again.
    Past `max_objects` distinct objects the list stops at once (the reply is closed, not
    read on) and raises CacheFull; or, `into` a Fresh that keeps keys past its cap, the
    list goes on and `into.past_cap` holds the keys of the objects past it."""
    params = dict(selectors)
    if from_cache:
        # Relists too: 7,500 nodes relisting after a 410 must not each read etcd.
        params["resourceVersion"] = "0"
        cap = (MAX_UNPAGED_ITEMS, f"MAX_UNPAGED_ITEMS in {HERE}")
    else:
        params["limit"] = str(page_size)
        cap = (page_size, f"limit={page_size} was asked")
    fresh = into if into is not None else Fresh(path, transform, max_objects)
    while True:
        meta = client.stream(path, params, lambda chunks: decode(chunks, fresh.keep, cap, path))
        if not meta.get("continue"):
            return fresh.items, meta.get("resourceVersion")
        params = dict(params, **{"continue": meta["continue"]})


class Fresh:
    """The objects of one list as the cache will hold them: transformed, keyed, at most
    `max_objects`. Past it, CacheFull; or, with `keys_past_cap`, the object's key alone
    goes into `past_cap` (an object is cached or counted, never both)."""

    def __init__(self, path, transform, max_objects, keys_past_cap=False):
        self.path, self.transform, self.max_objects = path, transform, max_objects
        self.keys_past_cap = keys_past_cap
        self.items = {}
        self.past_cap = set()

    def keep(self, item):
        if not isinstance(item, dict):
            raise ValueError(f"{self.path}: a list item that is not an object: {str(item)[:40]}")
        item = self.transform(item)
        key = object_key(item)
        full = self.max_objects is not None and len(self.items) >= self.max_objects
        if full and key not in self.items:
            if self.keys_past_cap:
                self.past_cap.add(key)
                return
            self.items.clear()  # not held on by the traceback until a full collection
            raise CacheFull(f"{self.path}: more than {self.max_objects} objects")
        self.past_cap.discard(key)
        self.items[key] = item

    def drop(self, item):
        key = object_key(item)
        self.items.pop(key, None)
        self.past_cap.discard(key)


# What a streaming list asks of the API server: the current state first, then the bookmark
# that ends it. No resourceVersion: the state is at least as new as the request (a
# consistent read, as a list without one is).
WATCH_LIST_PARAMS = {
    "sendInitialEvents": "true",
    "resourceVersionMatch": "NotOlderThan",
    "allowWatchBookmarks": "true",
}
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


class WatchListRefused(Exception):
    """The server did not give a streaming list: it refused the parameters (4xx), or sent
    something other than the initial events and their end (an older server ignoring
    sendInitialEvents sends plain bookmarks), or ended the watch before their end."""


class InitialEvents:
    """The state a streaming list sends before its end bookmark, kept as `Fresh` keeps a
    list: `take(kind, obj)` for each event until it returns the bookmark's resourceVersion."""

    def __init__(self, path, transform, max_objects, keys_past_cap=False):
        self.fresh = Fresh(path, transform, max_objects, keys_past_cap)

    def take(self, kind, obj) -> str | None:
        if kind == "BOOKMARK":
            meta = obj.get("metadata")
            notes = meta.get("annotations") if isinstance(meta, dict) else None
            if not isinstance(notes, dict) or notes.get(INITIAL_EVENTS_END) != "true":
                raise WatchListRefused("a bookmark before the end of the initial events")
            rv = meta.get("resourceVersion")
            if not isinstance(rv, str) or not rv:
                raise ValueError(f"{self.fresh.path}: the initial events end without a version")
            return rv
        if kind == "DELETED":
            self.fresh.drop(obj)
        else:
            self.fresh.keep(obj)
        return None


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
