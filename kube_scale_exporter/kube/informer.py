"""List+watch caches (informers) kept current by a background thread.

An informer is a reflector (kube/reflector.py: the thread that lists and watches) with a
store of its own (kube/store.py: the capped cache, its health, the handlers), whose reads
it serves. Scrapes read `items()`; they never reach the API server.
"""

from .backoff import Backoff
from .client import KubeClient
from .health import Health
from .reflector import Reflector

# tests/kube/test_watch_list.py reads the refusal rule here, beside the Informer it tests.
from .reflector import _refuses_parameters  # noqa: F401
from .resource import Resource
from .store import Store

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


class Informer(Reflector):
    """A thread-safe cache of one resource, filtered on the server by label/field selectors.

    `on_add`, `on_update`, `on_delete`, `max_objects` and `keys_past_cap` are its
    Store's: how handlers are called, and what happens past the cap (the cache dropped,
    or, with keys_past_cap, the objects past it counted by key). Over max_objects (and
    without keys_past_cap) the informer lists again with backoff up to every `full_retry`
    seconds. The rest (namespace, selectors,
    list_from_cache, watch_list, transform, relist_jitter, timeouts, ...) are its
    Reflector's.
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace=None,
        on_add=None,
        on_update=None,
        on_delete=None,
        max_objects=None,
        keys_past_cap=False,
        full_retry=None,
        **list_and_watch,
    ):
        full_retry = FULL_RETRY_SECONDS if full_retry is None else full_retry
        store = Store(
            resource.path(namespace),
            resource.plural,
            max_objects=max_objects,
            keys_past_cap=keys_past_cap,
            on_add=on_add,
            on_update=on_update,
            on_delete=on_delete,
        )
        super().__init__(
            client,
            resource,
            store,
            namespace=namespace,
            full_backoff=Backoff(initial=min(FULL_FIRST_RETRY_SECONDS, full_retry), cap=full_retry),
            **list_and_watch,
        )

    # ---- what collectors use -----------------------------------------------------------
    def wait_synced(self, timeout=None) -> bool:
        return self.store.wait_synced(timeout)

    @property
    def has_synced(self) -> bool:
        return self.store.has_synced

    def check_cache(self) -> None:
        self.store.check_cache()

    @property
    def cache_full(self) -> str | None:
        return self.store.cache_full

    def items(self) -> list:
        return self.store.items()

    def get(self, key):
        return self.store.get(key)

    def snapshot(self) -> tuple[list, frozenset]:
        return self.store.snapshot()

    def health(self) -> Health:
        return self.store.health()

    # ---- the store's state that tests, fuzz/kube_watch.py and bench/node_watches.py inspect
    @property
    def _items(self) -> dict:
        return self.store._items

    @property
    def _lists(self) -> int:
        return self.store._lists

    @property
    def _last_sync(self) -> float | None:
        return self.store._last_sync


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
