"""List+watch caches (informers) kept current by a background thread.

The loop: list, then watch from the list's resourceVersion with allowWatchBookmarks. The
list is a streaming list where the API server gives one (a watch that starts with the
current state: kube/listing.py), else paged with limit/continue, or from the API server's
watch cache in node mode. When a watch ends, the next one resumes from the last
resourceVersion seen (an event or a BOOKMARK); only 410 Gone makes it list again. Errors
back off with jitter (`Backoff`). Scrapes read `items()`; they never reach the API server.
"""

import logging
import random
import threading
import time

from kube_scale_exporter.httpclient import ReadTimeout, TransportError

from .backoff import Backoff
from .client import ApiError, Gone, KubeClient, ReplyTooLarge, status_error
from .health import Health
from .listing import (
    WATCH_LIST_PARAMS,
    CacheFull,
    InitialEvents,
    WatchListRefused,
    list_all,
    object_key,
    strip_managed_fields,
)
from .resource import Resource

log = logging.getLogger(__name__)

# The server closes each watch after timeoutSeconds drawn from this range, spreading the
# re-watches of thousands of nodes (client-go uses 5-10 minutes too).
WATCH_TIMEOUT_SECONDS = (300, 600)
# The API server's watch cache sends a BOOKMARK about once a minute; a read that stays
# silent for twice that means a dead connection, and the watch resumes from the last RV.
WATCH_READ_TIMEOUT = 120.0
PAGE_SIZE = 500
# A watch the server ends sooner than this without a single event counts as a failure.
QUICK_CLOSE_SECONDS = 0.5


# Node mode: after a 410 every node's informer relists, and a cause that hits one hits
# all (an API server restart whose new watch cache starts past their resourceVersions):
# each waits a random part of this first, so 7,500 lists arrive over seconds, not at once.
NODE_RELIST_JITTER_SECONDS = 10.0

# While over its max_objects, the informer lists again to see whether the fleet has shrunk
# (a list that stops at the cap: it costs at most max_objects decodes): first after
# FULL_FIRST_RETRY_SECONDS, a spike gone at once is soon cached again, then doubling up
# to FULL_RETRY_SECONDS.
FULL_FIRST_RETRY_SECONDS = 5.0
FULL_RETRY_SECONDS = 60.0

# API errors in a row (no watch opened between them) after which the informer stops
# resuming from its resourceVersion and relists.
REFUSALS_BEFORE_RELIST = 3

# After a streaming list is refused, lists are paged for this long, then the next relist
# asks for a streaming list again: a refusal may pass (an overloaded server's ERROR 500, a
# stream cut before the initial events ended) or last (the WatchList gate off, an etcd
# too old to tell how current the watch cache is, until someone upgrades it); half an
# hour bounds what a passing one costs, and a lasting one costs one refused request per
# relist at most that often.
WATCH_LIST_RETRY_SECONDS = 30 * 60.0


class Informer:
    """A thread-safe cache of one resource, filtered on the server by label/field selectors.

    Handlers run on the informer's thread, in event order: `on_add(obj)`,
    `on_update(old, new)`, `on_delete(obj)` (the object's final state from the DELETED
    event). After a relist the differences against the old cache are delivered the same
    way, so a deletion missed during a gap is still seen (with the last state cached).
    Objects are shared between the cache, handlers and readers: treat them as read-only.
    `transform(obj) -> obj` may shrink objects before they are stored (a kube.Fields
    projection: the fields the collector reads). After a 410 the relist waits a uniform
    random time in [0, relist_jitter) seconds (`rand` draws it); the cache keeps serving
    what it holds meanwhile.

    `max_objects` caps the cache. Past it the informer logs once, drops its whole cache
    (a partial one would be wrong), reports `cache_full` (a message) and not up, and lists
    again with backoff up to every `full_retry` seconds, each list stopping at the cap. The
    first list that fits is a new start: it is cached without calling the handlers (what changed while
    the cache was dropped is lost, and was reported), and the watch resumes from it.

    `watch_list` (unless `list_from_cache`): list by streaming (a watch with
    sendInitialEvents) rather than in pages. When the server does not give one (an older
    server, the WatchList gate off, a stream that failed before its initial events ended)
    the informer logs it and lists in pages (`watch_list` is False then); the first relist
    at least `watch_list_retry` seconds later asks for a streaming list again, and logs
    once when it is given one.
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace=None,
        label_selector=None,
        field_selector=None,
        list_from_cache=False,
        watch_list=True,
        on_add=None,
        on_update=None,
        on_delete=None,
        transform=None,
        page_size=PAGE_SIZE,
        backoff=None,
        watch_timeout=WATCH_TIMEOUT_SECONDS,
        read_timeout=WATCH_READ_TIMEOUT,
        relist_jitter=0.0,
        rand=random.random,
        max_objects=None,
        full_retry=None,
        watch_list_retry=WATCH_LIST_RETRY_SECONDS,
    ):
        self.client = client
        self.resource = resource
        self.path = resource.path(namespace)
        self.selectors = {}
        if label_selector:
            self.selectors["labelSelector"] = label_selector
        if field_selector:
            self.selectors["fieldSelector"] = field_selector
        # resourceVersion=0 lists from the API server's watch cache instead of etcd: the
        # cheap choice for thousands of node-filtered informers (it ignores paging).
        self.list_from_cache = list_from_cache
        # Node mode keeps its list from the watch cache: a few hundred pods found through
        # the cache's spec.nodeName index, already cheap.
        self.watch_list = watch_list and not list_from_cache
        self.watch_list_retry = watch_list_retry
        # When a refusal last switched lists to pages (monotonic); None before any, and
        # again once a streaming list is given.
        self._refused_at = None
        self.page_size = page_size
        self.backoff = backoff or Backoff()
        self.watch_timeout = watch_timeout
        self.read_timeout = read_timeout
        self.relist_jitter = relist_jitter
        self._rand = rand
        self._on_add, self._on_update, self._on_delete = on_add, on_update, on_delete
        self._transform = transform or strip_managed_fields
        self.max_objects = max_objects
        self.full_retry = FULL_RETRY_SECONDS if full_retry is None else full_retry
        self._full_backoff = Backoff(
            initial=min(FULL_FIRST_RETRY_SECONDS, self.full_retry), cap=self.full_retry
        )

        self._lock = threading.Lock()
        self._items = {}
        self._rv = None
        self._up = False
        self._last_sync = None
        self._lists = 0
        self._refusals = 0  # consecutive API errors since the last watch opened
        self._full = None  # why the cache is dropped (over max_objects), else None
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._watch = None
        self._thread = None

    # ---- what collectors use -------------------------------------------------------
    def start(self):
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, daemon=True, name=f"informer-{self.resource.plural}"
            )
            self._thread.start()
        return self

    def stop(self, timeout=5.0):
        self._stop.set()
        watch = self._watch
        if watch is not None:
            watch.close()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_synced(self, timeout=None) -> bool:
        """True once the first list is in, or the cache was found over max_objects
        (check_cache() tells the two apart)."""
        return self._synced.wait(timeout)

    def check_cache(self) -> None:
        """CacheFull (its message says what was dropped) while over max_objects: a
        collector's scrape fails rather than report an empty cache."""
        if self._full is not None:
            raise CacheFull(self._full)

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

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
            return Health(self.resource.plural, self._up, age, max(0, self._lists - 1))

    @property
    def resource_version(self):
        return self._rv

    # ---- the loop ----------------------------------------------------------------------
    def _run(self):
        while not self._stop.is_set():
            try:
                if self._rv is None and self._lists_streaming():
                    self._watch_once(InitialEvents(self.path, self._transform, self.max_objects))
                    continue
                if self._rv is None:
                    self._list()
                    self.backoff.reset()
                self._watch_once()
            except WatchListRefused as e:
                self.watch_list, self._refused_at = False, time.monotonic()
                log.warning(
                    "%s: no streaming list (%s); listing in pages, asking again at the first "
                    "relist after %gs",
                    self.path,
                    e,
                    self.watch_list_retry,
                )
            except Gone:
                delay = self.relist_jitter * self._rand()
                log.info(
                    "%s: resourceVersion %s is gone; relisting in %.1fs", self.path, self._rv, delay
                )
                self._rv = None
                self._stop.wait(delay)
            except CacheFull:
                self._drop_cache()
                self._stop.wait(self._full_backoff.next_delay())
            except Exception as e:  # the thread must outlive any error
                if self._stop.is_set():
                    return
                delay = self.backoff.next_delay()
                if isinstance(e, ApiError) and e.retry_after is not None:
                    # 429/503: the server says when.
                    delay = max(delay, min(e.retry_after, self.backoff.cap))
                if isinstance(e, (ApiError, ReplyTooLarge)):
                    # A resourceVersion the server keeps refusing (a bad bookmark, say), or
                    # an event past the line cap replayed on every re-watch, must not stop
                    # the watch for good: relist after a few refusals.
                    self._refusals += 1
                    if self._refusals >= REFUSALS_BEFORE_RELIST:
                        self._rv, self._refusals = None, 0
                expected = isinstance(e, (ApiError, TransportError, ValueError, ReplyTooLarge))
                log.warning("%s: %s; retrying in %.1fs", self.path, e, delay, exc_info=not expected)
                self._set_up(False)
                self._stop.wait(delay)

    def _lists_streaming(self) -> bool:
        """Whether this list is a streaming one: as asked, unless one was refused less than
        watch_list_retry seconds ago."""
        if not self.watch_list and self._refused_at is not None:
            self.watch_list = time.monotonic() - self._refused_at >= self.watch_list_retry
        return self.watch_list

    def _list(self):
        fresh, rv = list_all(
            self.client,
            self.path,
            self.selectors,
            self._transform,
            from_cache=self.list_from_cache,
            page_size=self.page_size,
            max_objects=self.max_objects,
        )
        self._install(fresh, rv)

    def _install(self, fresh, rv):
        """A complete list (paged or streamed) becomes the cache; the informer is synced."""
        with self._lock:
            old, self._items = self._items, fresh
            self._rv = rv
            self._lists += 1
            self._up = True
            self._last_sync = time.monotonic()
            recovered, self._full = self._full is not None, None
        self._full_backoff.reset()
        self._synced.set()
        if recovered:
            log.warning(
                "%s: %d objects, within the cap of %d again: caching and watching",
                self.path,
                len(fresh),
                self.max_objects,
            )
        else:
            self._deliver_diff(old, fresh)

    def _drop_cache(self):
        """Over max_objects: keep nothing, say so once, list again later (see the class)."""
        why = (
            f"more than {self.max_objects} {self.resource.plural} to cache: the cache is "
            f"dropped, and what changes until a list fits again is not seen (lists are "
            f"retried, at most {self.full_retry:g}s apart)"
        )
        with self._lock:
            first = self._full is None
            self._items, self._rv, self._up, self._full = {}, None, False, why
        # Readers waiting for the first sync learn of the cap now, not at their timeout.
        self._synced.set()
        if first:
            log.error("%s: %s", self.path, why)

    def _deliver_diff(self, old, fresh):
        for key, obj in fresh.items():
            prev = old.get(key)
            if prev is None:
                self._call(self._on_add, obj)
            elif _rv_of(prev) != _rv_of(obj):
                self._call(self._on_update, prev, obj)
        for key, obj in old.items():
            if key not in fresh:
                self._call(self._on_delete, obj)

    def _watch_once(self, initial: InitialEvents | None = None):
        """One watch from the cache's resourceVersion or, with `initial`, a streaming list:
        its initial events are collected into `initial` and become the cache at their end,
        and the same watch goes on from there."""
        timeout = random.randint(*self.watch_timeout)
        params = dict(self.selectors, allowWatchBookmarks="true", timeoutSeconds=str(timeout))
        if initial is None:
            params["resourceVersion"] = self._rv
        else:
            params.update(WATCH_LIST_PARAMS)
        try:
            watch = self.client.watch(self.path, params, self.read_timeout)
        except ApiError as e:
            if initial is not None and _refuses_parameters(e):
                raise WatchListRefused(str(e)) from None
            raise
        self._watch = watch
        if self._stop.is_set():  # stop() ran before the watch was registered
            watch.close()
            return
        if initial is None:
            self._set_up(True)
        self._refusals = 0
        opened, events = time.monotonic(), 0
        # A real server ends the watch at timeoutSeconds, initial events or not; one that
        # drips them for longer is not giving a list.
        initial_until = opened + timeout + self.read_timeout
        try:
            for event in watch:
                if initial is None:
                    self._apply(event)
                elif time.monotonic() > initial_until:
                    raise WatchListRefused(f"the initial events did not end within {timeout}s")
                else:
                    initial = self._take_initial(event, initial)
                events += 1
                self.backoff.reset()
        except ReadTimeout:
            # A read that timed out (no bookmark within read_timeout): the connection is
            # dead or the server is not sending bookmarks; resume from the last RV.
            if self._stop.is_set():
                raise
            if initial is not None:
                raise WatchListRefused(
                    f"silent for {self.read_timeout:.0f}s before the initial events ended"
                ) from None
            log.info("%s: watch silent for %.0fs; resuming", self.path, self.read_timeout)
            return
        finally:
            self._watch = None
            watch.close()
        if initial is not None and not self._stop.is_set():
            raise WatchListRefused("the watch ended before the initial events did")
        # The server closed the watch at timeoutSeconds: a normal end, resume from RV.
        self._mark_synced()
        if events == 0 and time.monotonic() - opened < QUICK_CLOSE_SECONDS:
            # Closed at once with nothing in it (a proxy cutting streams?): back off
            # rather than re-watch in a tight loop.
            self._stop.wait(self.backoff.next_delay())
        else:
            self.backoff.reset()

    def _take_initial(self, event, initial):
        """`initial` while the initial events go on; at their end the cache is theirs (the
        handlers see the differences, as after a paged list) and None is returned."""
        kind, obj = self._event(event, refusing=True)
        rv = initial.take(kind, obj)
        if rv is None:
            return initial
        self._install(initial.fresh.items, rv)
        log.info("%s: %d objects from a streaming list", self.path, len(initial.fresh.items))
        if self._refused_at is not None:
            self._refused_at = None
            log.info("%s: given a streaming list again; lists stream from now on", self.path)
        return None

    def _event(self, event, refusing=False):
        """(type, object) of a watch event; an ERROR event raised as its ApiError, or, in
        a streaming list's initial events (`refusing`), as WatchListRefused: 1.34 answers
        one it cannot serve (its etcd older than 3.4.31 or 3.5.13 cannot tell it how
        current its watch cache is) with an ERROR event of code 500."""
        obj = (event.get("object") or {}) if isinstance(event, dict) else None
        if not isinstance(obj, dict):
            raise ValueError(f"{self.path}: a watch event that is not one: {str(event)[:80]}")
        kind = event.get("type")
        if kind == "ERROR":
            err = status_error(obj)
            if refusing:
                raise WatchListRefused(str(err))
            raise err
        return kind, obj

    def _apply(self, event):
        kind, obj = self._event(event)
        rv = _rv_of(obj)
        if kind == "BOOKMARK":
            with self._lock:
                self._rv = rv or self._rv
                self._last_sync = time.monotonic()
            return
        obj = self._transform(obj)
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
            self._rv = rv or self._rv
            self._last_sync = time.monotonic()
        if kind == "DELETED":
            self._call(self._on_delete, obj)  # the final state, from the event
        elif prev is None:
            self._call(self._on_add, obj)
        else:
            self._call(self._on_update, prev, obj)

    def _mark_synced(self):
        with self._lock:
            self._last_sync = time.monotonic()

    def _set_up(self, up):
        with self._lock:
            self._up = up

    def _call(self, handler, *objs):
        if handler is None:
            return
        try:
            handler(*objs)
        except Exception:  # a handler's bug must not stop the cache from updating
            log.exception("%s: event handler failed", self.path)


def _refuses_parameters(err: ApiError) -> bool:
    """An answer to a streaming list that says "not this request" (400, 404, 410, 422:
    e.g. 1.34's 422 with the WatchList gate off; 500, what the storage cannot serve)
    rather than "not now" (429, 503, 504) or "not you" (401, 403)."""
    return err.status == 500 or 400 <= err.status < 500 and err.status not in (401, 403, 429)


def _rv_of(obj):
    meta = obj.get("metadata")
    return meta.get("resourceVersion") if isinstance(meta, dict) else None


def for_node(client, resource, node_name, **kw) -> Informer:
    """Node mode: only objects on `node_name`, selected on the server by spec.nodeName.

    One list from the API server's watch cache, then one watch held open and resumed from
    bookmarks: no periodic relists, so thousands of nodes cost the API server little. A
    relist after a 410 waits up to NODE_RELIST_JITTER_SECONDS (random), spreading a
    fleet's relists.
    """
    if not node_name:
        raise ValueError("node mode needs a node name (--kube.node-name or NODE_NAME)")
    kw.setdefault("relist_jitter", NODE_RELIST_JITTER_SECONDS)
    return Informer(
        client, resource, field_selector=f"spec.nodeName={node_name}", list_from_cache=True, **kw
    )
