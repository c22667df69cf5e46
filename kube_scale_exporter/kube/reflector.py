"""An informer's reflector: a background thread that lists and watches one resource into
a Store (kube/store.py).

The loop: list, then watch from the list's resourceVersion with allowWatchBookmarks. The
list is a streaming list where the API server gives one (a watch that starts with the
current state: kube/listing.py), else paged with limit/continue, or from the API server's
watch cache in node mode. When a watch ends, the next one resumes from the last
resourceVersion seen (an event or a BOOKMARK); only 410 Gone makes it list again. Errors
back off with jitter (`Backoff`).
"""

import logging
import random
import threading
import time

from kube_scale_exporter.httpclient import ReadTimeout, TransportError

from .backoff import Backoff
from .client import ApiError, Gone, KubeClient, ReplyTooLarge, status_error
from .listing import (
    WATCH_LIST_PARAMS,
    CacheFull,
    Fresh,
    InitialEvents,
    WatchListRefused,
    list_all,
    strip_managed_fields,
)
from .resource import Resource
from .store import Store, resource_version_of

# An informer's log lines carry one logger name, whichever of its modules writes them.
log = logging.getLogger(f"{__package__}.informer")

# The server closes each watch after timeoutSeconds drawn from this range, spreading the
# re-watches of thousands of nodes (client-go uses 5-10 minutes too).
WATCH_TIMEOUT_SECONDS = (300, 600)
# The API server's watch cache sends a BOOKMARK about once a minute; a read that stays
# silent for twice that means a dead connection, and the watch resumes from the last RV.
WATCH_READ_TIMEOUT = 120.0
PAGE_SIZE = 500
# A watch the server ends sooner than this without a single event counts as a failure.
QUICK_CLOSE_SECONDS = 0.5

# API errors in a row (no watch opened between them) after which the reflector stops
# resuming from its resourceVersion and relists.
REFUSALS_BEFORE_RELIST = 3

# After a streaming list is refused, lists are paged for this long, then the next relist
# asks for a streaming list again: a refusal may pass (an overloaded server's ERROR 500, a
# stream cut before the initial events ended) or last (the WatchList gate off, an etcd
# too old to tell how current the watch cache is, until someone upgrades it); half an
# hour bounds what a passing one costs, and a lasting one costs one refused request per
# relist at most that often.
WATCH_LIST_RETRY_SECONDS = 30 * 60.0


class Reflector:
    """Lists and watches one resource, filtered on the server by label/field selectors,
    into `store`.

    `transform(obj) -> obj` may shrink objects before they are stored (a kube.Fields
    projection: the fields the collector reads). After a 410 the relist waits a uniform
    random time in [0, relist_jitter) seconds (`rand` draws it); the store keeps serving
    what it holds meanwhile.

    Past the store's max_objects (CacheFull, from a list or a watch event) the store is
    dropped and lists are retried after `full_backoff`'s delays, each list stopping at the
    cap; the first that fits becomes the store's new start and the watch resumes from it.
    A store that keeps keys past its cap (`keys_past_cap`) is never dropped: lists and
    watches go on, the objects past the cap counted by key.

    `watch_list` (unless `list_from_cache`): list by streaming (a watch with
    sendInitialEvents) rather than in pages. When the server does not give one (an older
    server, the WatchList gate off, a stream that failed before its initial events ended)
    the reflector logs it and lists in pages (`watch_list` is False then); the first relist
    at least `watch_list_retry` seconds later asks for a streaming list again, and logs
    once when it is given one.
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        store: Store,
        *,
        full_backoff: Backoff,
        namespace=None,
        label_selector=None,
        field_selector=None,
        list_from_cache=False,
        watch_list=True,
        transform=None,
        page_size=PAGE_SIZE,
        backoff=None,
        watch_timeout=WATCH_TIMEOUT_SECONDS,
        read_timeout=WATCH_READ_TIMEOUT,
        relist_jitter=0.0,
        rand=random.random,
        watch_list_retry=WATCH_LIST_RETRY_SECONDS,
    ):
        self.client = client
        self.resource = resource
        self.store = store
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
        self._full_backoff = full_backoff
        self.watch_timeout = watch_timeout
        self.read_timeout = read_timeout
        self.relist_jitter = relist_jitter
        self._rand = rand
        self._transform = transform or strip_managed_fields

        self._rv = None
        self._refusals = 0  # consecutive API errors since the last watch opened
        self._stop = threading.Event()
        self._watch = None
        self._thread = None

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

    @property
    def resource_version(self):
        return self._rv

    # ---- the loop ----------------------------------------------------------------------
    def _run(self):
        while not self._stop.is_set():
            try:
                if self._rv is None and self._lists_streaming():
                    self._watch_once(
                        InitialEvents(
                            self.path,
                            self._transform,
                            self.store.max_objects,
                            self.store.keys_past_cap,
                        )
                    )
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
                self.store.set_up(False)
                self._stop.wait(delay)

    def _lists_streaming(self) -> bool:
        """Whether this list is a streaming one: as asked, unless one was refused less than
        watch_list_retry seconds ago."""
        if not self.watch_list and self._refused_at is not None:
            self.watch_list = time.monotonic() - self._refused_at >= self.watch_list_retry
        return self.watch_list

    def _list(self):
        fresh = Fresh(self.path, self._transform, self.store.max_objects, self.store.keys_past_cap)
        _, rv = list_all(
            self.client,
            self.path,
            self.selectors,
            self._transform,
            from_cache=self.list_from_cache,
            page_size=self.page_size,
            into=fresh,
        )
        self._install(fresh, rv)

    def _install(self, fresh: Fresh, rv):
        """A complete list (paged or streamed) becomes the store's cache; the watch goes on
        from its resourceVersion."""
        self._rv = rv
        self.store.replace(fresh.items, fresh.past_cap)
        self._full_backoff.reset()

    def _drop_cache(self):
        """Over max_objects: the store keeps nothing, and the next list starts afresh."""
        self._rv = None
        self.store.drop(
            f"more than {self.store.max_objects} {self.resource.plural} to cache: the cache "
            f"is dropped, and what changes until a list fits again is not seen (lists are "
            f"retried, at most {self._full_backoff.cap:g}s apart)"
        )

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
            self.store.set_up(True)
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
        self.store.mark_current()
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
        self._install(initial.fresh, rv)
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
        """One watch event: its object into the store (a BOOKMARK has none to store), its
        resourceVersion the one the next watch resumes from."""
        kind, obj = self._event(event)
        rv = resource_version_of(obj)
        if kind == "BOOKMARK":
            self.store.mark_current()
        else:
            self.store.apply(kind, self._transform(obj))
        self._rv = rv or self._rv


def _refuses_parameters(err: ApiError) -> bool:
    """An answer to a streaming list that says "not this request" (400, 404, 410, 422:
    e.g. 1.34's 422 with the WatchList gate off; 500, what the storage cannot serve)
    rather than "not now" (429, 503, 504) or "not you" (401, 403)."""
    return err.status == 500 or 400 <= err.status < 500 and err.status not in (401, 403, 429)
