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

    With `keys_past_cap` the store never drops: an object that finds the cache full is
    kept as its key alone, for a collector that reports the objects it holds and counts
    the rest (`snapshot()`: both, read together). Each key is either cached or past the
    cap, never both: a DELETED removes it from either, an ADDED or MODIFIED of a key
    past the cap caches the object once there is room, and `replace` installs a list's
    own split. Handlers see only cached objects (their add, update and delete).

    Its Health: up while a watch keeps the cache current (`set_up`), when the cache was
    last confirmed current (a list, an event, `mark_current()`), how many lists filled it.
    """

    def __init__(
        self,
        path,
        plural,
        *,
        max_objects=None,
        keys_past_cap=False,
        on_add=None,
        on_update=None,
        on_delete=None,
    ):
        self.path = path  # names the resource in log lines
        self.plural = plural
        self.max_objects = max_objects
        self.keys_past_cap = keys_past_cap
        self._past_cap = set()  # keys of objects not cached (keys_past_cap)
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

    def snapshot(self) -> tuple[list, frozenset]:
        """(the cached objects, the keys past the cap), read together."""
        with self._lock:
            return list(self._items.values()), frozenset(self._past_cap)

    def health(self) -> Health:
        with self._lock:
            age = None if self._last_sync is None else time.monotonic() - self._last_sync
            return Health(self.plural, self._up, age, max(0, self._lists - 1))

    # ---- writes, from the reflector's thread -------------------------------------------
    def replace(self, fresh: dict, past_cap=frozenset()) -> None:
        """A complete list (paged or streamed), by key, becomes the cache, and the keys of
        the list's objects past the cap (keys_past_cap) the ones counted; the store is
        synced and up."""
        with self._lock:
            was_past = bool(self._past_cap)
            old, self._items, self._past_cap = self._items, fresh, set(past_cap)
            self._lists += 1
            self._up = True
            self._last_sync = time.monotonic()
            recovered, self._full = self._full is not None, None
        self._synced.set()
        self._log_past_cap(was_past)
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
            was_past = bool(self._past_cap)
            prev = self._items.get(key)
            full = self.max_objects is not None and len(self._items) >= self.max_objects
            if prev is None and kind != "DELETED" and full and not self.keys_past_cap:
                raise CacheFull(f"{self.path}: more than {self.max_objects} objects")
            uncached = prev is None and (key in self._past_cap if kind == "DELETED" else full)
            if kind == "DELETED":
                self._items.pop(key, None)
                self._past_cap.discard(key)
            elif uncached:
                self._past_cap.add(key)
            else:
                self._past_cap.discard(key)
                self._items[key] = obj
            self._last_sync = time.monotonic()
        if self.keys_past_cap:
            self._log_past_cap(was_past)
        if uncached:
            return  # known by its key alone: no handler has seen it
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

    def _log_past_cap(self, was_past):
        """Once when objects start to be counted by key alone, once when none is."""
        now_past = bool(self._past_cap)
        if now_past and not was_past:
            log.warning(
                "%s: more than %d objects: caching %d, counting the rest by key alone",
                self.path,
                self.max_objects,
                self.max_objects,
            )
        elif was_past and not now_past:
            log.warning(
                "%s: within the cap of %d again: caching every object", self.path, self.max_objects
            )

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
