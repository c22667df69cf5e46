"""An informer's store: the cached objects of one resource, how current they are, and the
handlers each change is delivered to.

One thread writes it (the reflector's: kube/reflector.py); scrapes read it from others.
The objects and their health change together, under one lock, so a reader never sees a
new list counted before it is cached.
"""

import logging
import threading
import time

from .health import Health
from .listing import CacheFull, object_key

# An informer's log lines carry one logger name, whichever of its modules writes them.
log = logging.getLogger(f"{__package__}.informer")


class Store:
    """A thread-safe cache of one resource's objects by key ("namespace/name").

    Handlers run on the writer's thread, in event order: `on_add(obj)`,
    `on_update(old, new)`, `on_delete(obj)` (the object's final state from the DELETED
    event). After `replace(fresh)` the differences against the old cache are delivered the
    same way, so a deletion missed during a gap is still seen (with the last state cached).
    Objects are shared between the cache, handlers and readers: treat them as read-only.

    `max_objects` caps the cache: an event that would go past it raises CacheFull and
    changes nothing. The writer then `drop(why)`s the whole cache (a partial one would be
    wrong): `why` is logged once, reported by `cache_full` and `check_cache()`, and the
    store is not up. The first `replace` after a drop is a new start: it is cached without
    calling the handlers (what changed while the cache was dropped is lost, and was
    reported).

    Its Health: up while a watch keeps the cache current (`set_up`), when the cache was
    last confirmed current (a list, an event, `mark_current()`), how many lists filled it.
    """

    def __init__(
        self, path, plural, *, max_objects=None, on_add=None, on_update=None, on_delete=None
    ):
        self.path = path  # names the resource in log lines
        self.plural = plural
        self.max_objects = max_objects
        self._on_add, self._on_update, self._on_delete = on_add, on_update, on_delete
        self._lock = threading.Lock()
        self._items = {}
        self._up = False
        self._last_sync = None
        self._lists = 0
        self._full = None  # why the cache is dropped (over max_objects), else None
        self._synced = threading.Event()

    # ---- reads -------------------------------------------------------------------------
    def wait_synced(self, timeout=None) -> bool:
        """True once the first list is in, or the cache was found over max_objects
        (check_cache() tells the two apart)."""
        return self._synced.wait(timeout)

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    def check_cache(self) -> None:
        """CacheFull (its message says what was dropped) while over max_objects: a
        collector's scrape fails rather than report an empty cache."""
        if self._full is not None:
            raise CacheFull(self._full)

    @property
    def cache_full(self) -> str | None:
        """Why the cache is empty on purpose (more objects than max_objects), else None."""
        return self._full

    def items(self) -> list:
        with self._lock:
            return list(self._items.values())

    def get(self, key):
        with self._lock:
            return self._items.get(key)

    def health(self) -> Health:
        with self._lock:
            age = None if self._last_sync is None else time.monotonic() - self._last_sync
            return Health(self.plural, self._up, age, max(0, self._lists - 1))

    # ---- writes, from the reflector's thread -------------------------------------------
    def replace(self, fresh: dict) -> None:
        """A complete list (paged or streamed), by key, becomes the cache; the store is
        synced and up."""
        with self._lock:
            old, self._items = self._items, fresh
            self._lists += 1
            self._up = True
            self._last_sync = time.monotonic()
            recovered, self._full = self._full is not None, None
        self._synced.set()
        if recovered:
            log.warning(
                "%s: %d objects, within the cap of %d again: caching and watching",
                self.path,
                len(fresh),
                self.max_objects,
            )
        else:
            self._deliver_changes(old, fresh)

    def apply(self, kind, obj) -> None:
        """One watch event's object (ADDED, MODIFIED or DELETED) into the cache."""
        key = object_key(obj)
        with self._lock:
            prev = self._items.get(key)
            full = self.max_objects is not None and len(self._items) >= self.max_objects
            if prev is None and kind != "DELETED" and full:
                raise CacheFull(f"{self.path}: more than {self.max_objects} objects")
            if kind == "DELETED":
                self._items.pop(key, None)
            else:
                self._items[key] = obj
            self._last_sync = time.monotonic()
        if kind == "DELETED":
            self._call(self._on_delete, obj)  # the final state, from the event
        elif prev is None:
            self._call(self._on_add, obj)
        else:
            self._call(self._on_update, prev, obj)

    def drop(self, why: str) -> None:
        """Over max_objects: keep nothing, and say `why` (logged once, see the class)."""
        with self._lock:
            first = self._full is None
            self._items, self._up, self._full = {}, False, why
        # Readers waiting for the first sync learn of the cap now, not at their timeout.
        self._synced.set()
        if first:
            log.error("%s: %s", self.path, why)

    def set_up(self, up: bool) -> None:
        with self._lock:
            self._up = up

    def mark_current(self) -> None:
        """The cache is confirmed current now (a bookmark, a watch that ended normally)."""
        with self._lock:
            self._last_sync = time.monotonic()

    def _deliver_changes(self, old, fresh):
        for key, obj in fresh.items():
            prev = old.get(key)
            if prev is None:
                self._call(self._on_add, obj)
            elif resource_version_of(prev) != resource_version_of(obj):
                self._call(self._on_update, prev, obj)
        for key, obj in old.items():
            if key not in fresh:
                self._call(self._on_delete, obj)

    def _call(self, handler, *objs):
        if handler is None:
            return
        try:
            handler(*objs)
        except Exception:  # a handler's bug must not stop the cache from updating
            log.exception("%s: event handler failed", self.path)


def resource_version_of(obj):
    meta = obj.get("metadata")
    return meta.get("resourceVersion") if isinstance(meta, dict) else None
