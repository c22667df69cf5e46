"""The `capacitybuffer` collector: its flags, discovery of the API, its informers, and one
observation of their caches.

The exposition is in state.py's docstring, the `check` text in advice.py.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time

from kube_scale_exporter import kube
from kube_scale_exporter.collectors.capacitybuffer import discovery
from kube_scale_exporter.collectors.capacitybuffer.advice import advise
from kube_scale_exporter.collectors.capacitybuffer.state import BufferState, families
from kube_scale_exporter.collectors.capacitybuffer.summary import summarize
from kube_scale_exporter.flagtypes import duration, positive_int
from kube_scale_exporter.kube.flags import kubeconfig_problem
from kube_scale_exporter.registry import Collector, Needs, UsageError

log = logging.getLogger(__name__)

# The first discovery and the first sync are awaited this long inside a scrape (well within
# the default 10 s scrape timeout); longer means the API server is unreachable or refuses us.
SYNC_WAIT_SECONDS = 5.0
# Objects each of the buffers', PodTemplates' and events' watches may cache. Buffers are a
# few per workload class, PodTemplates one or two per buffer (the one it names and the
# autoscaler's copy), events on buffers at most two per buffer within the events' hour
# (TriggeredScaleUp, NotTriggerScaleUp): 5,000 is far past a real cluster. Past it (a
# flood of 100,000 buffers) each watch keeps 5,000 objects and only the keys of the rest,
# so the Deployment stays within its memory limit (tests/deploy/test_cluster_memory.py)
# and the collector goes on reporting what it holds, and counting what it does not.
MAX_CACHED_OBJECTS = 5_000
# Nodes for the fit check: 7,500 with room to grow, as the balloon collector caches them.
MAX_CACHED_NODES = 20_000
# Buffers given series of their own; the rest are counted in the cluster-wide series.
# 20 buffers at 16 series at most is 320 series (kube_scale_exporter/budgets.py).
MAX_BUFFERS = 20
# A CRD installed (or removed) is seen within this long: two small GETs a minute.
DISCOVERY_INTERVAL = 60.0

_REQUESTS = {"resources": ("requests",)}
BUFFER_FIELDS = kube.Fields(
    {
        "spec": (
            "provisioningStrategy",
            "podTemplateRef",
            "scalableRef",
            "replicas",
            "percentage",
            "limits",
        ),
        "status": {
            "replicas": True,
            "podTemplateRef": True,
            "conditions": ("type", "status", "reason"),
        },
    }
)
TEMPLATE_FIELDS = kube.Fields(
    {"template": {"spec": {"containers": _REQUESTS, "initContainers": _REQUESTS, "overhead": True}}}
)
EVENT_FIELDS = kube.Fields(
    {
        "metadata": ("creationTimestamp",),
        "reason": True,
        "involvedObject": ("namespace", "name", "uid"),
        "lastTimestamp": True,
        "eventTime": True,
        "series": ("lastObservedTime",),
    }
)
_LIST_WATCH = ["list", "watch"]
_BASE_RULES = (
    {"apiGroups": [discovery.GROUP], "resources": [discovery.PLURAL], "verbs": _LIST_WATCH},
    {"apiGroups": [""], "resources": ["podtemplates", "events"], "verbs": _LIST_WATCH},
)
_NODE_RULE = {"apiGroups": [""], "resources": ["nodes"], "verbs": _LIST_WATCH}


class CapacityBufferCollector(Collector):
    """CapacityBuffer headroom; the exposition is in capacitybuffer/state.py's docstring."""

    name = "capacitybuffer"
    modes = frozenset({"cluster"})
    default_enabled = False
    help = (
        "Warm headroom held by cluster-autoscaler CapacityBuffers (autoscaling.x-k8s.io): "
        "per buffer, replicas, requests, conditions and the autoscaler's last word; off, "
        "not failed, while the API server serves no CapacityBuffer API."
    )
    # Discovery (/apis/...) is open to every user. Nodes only for the fit check.
    needs = {"cluster": Needs(rbac_rules=(*_BASE_RULES, _NODE_RULE))}

    @classmethod
    def needs_for(cls, args):
        if getattr(args, "capacitybuffer_node_fit", True):
            return cls.needs_in(args.mode)
        return Needs(rbac_rules=_BASE_RULES)

    @classmethod
    def add_arguments(cls, group):
        group.add_argument(
            "--capacitybuffer.api-version",
            dest="capacitybuffer_api_version",
            choices=("auto", *discovery.VERSIONS),
            default="auto",
            help="The CapacityBuffer version to watch: auto (default) watches v1beta1 where "
            "served (cluster-autoscaler 1.35 and later), else v1alpha1.",
        )
        group.add_argument(
            "--capacitybuffer.node-fit",
            dest="capacitybuffer_node_fit",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="Watch nodes' allocatable resources to tell buffers whose replicas fit no "
            "node (default on: needs list/watch on nodes; off, the collector reads buffers, "
            "PodTemplates and events only).",
        )
        group.add_argument(
            "--capacitybuffer.max-buffers",
            dest="capacitybuffer_max_buffers",
            type=positive_int,
            default=MAX_BUFFERS,
            metavar="N",
            help="Buffers given series of their own, first by namespace and name; the rest "
            f"count in the cluster-wide series only (default {MAX_BUFFERS}).",
        )
        group.add_argument(
            "--capacitybuffer.max-cached-objects",
            dest="capacitybuffer_max_cached_objects",
            type=positive_int,
            default=MAX_CACHED_OBJECTS,
            metavar="N",
            help="Objects each of the collector's watches of buffers, PodTemplates and events "
            "on buffers may cache; past it the rest are counted by key, not read "
            "(kubescale_capacitybuffer_objects_not_cached, _buffers_untracked) "
            f"(default {MAX_CACHED_OBJECTS}).",
        )
        group.add_argument(
            "--capacitybuffer.discovery-interval",
            dest="capacitybuffer_discovery_interval",
            type=duration,
            default=DISCOVERY_INTERVAL,
            metavar="DURATION",
            help="How often to ask the API server which CapacityBuffer versions it serves "
            "(default 1m).",
        )

    @classmethod
    def validate(cls, args):
        if (problem := kubeconfig_problem(args)) is not None:
            raise UsageError(problem)

    def __init__(self, args):
        super().__init__(args)
        self.wanted = getattr(args, "capacitybuffer_api_version", "auto")
        self.max_buffers = getattr(args, "capacitybuffer_max_buffers", MAX_BUFFERS)
        self.cap = getattr(args, "capacitybuffer_max_cached_objects", MAX_CACHED_OBJECTS)
        self.interval = getattr(args, "capacitybuffer_discovery_interval", DISCOVERY_INTERVAL)
        self.node_fit = getattr(args, "capacitybuffer_node_fit", True)
        self.client = kube.client_from_args(args)
        self.templates = kube.Informer(
            self.client,
            kube.Resource("/api/v1", "podtemplates"),
            transform=TEMPLATE_FIELDS,
            max_objects=self.cap,
            keys_past_cap=True,
        )
        self.events = kube.Informer(
            self.client,
            kube.Resource("/api/v1", "events"),
            field_selector="involvedObject.kind=CapacityBuffer",
            transform=EVENT_FIELDS,
            max_objects=self.cap,
            keys_past_cap=True,
        )
        self.nodes = (
            kube.Informer(
                self.client, kube.NODES, transform=kube.NODE_SHAPE, max_objects=MAX_CACHED_NODES
            )
            if self.node_fit
            else None
        )
        self._lock = threading.Lock()
        self._served = None  # frozenset once discovery has answered
        self._error = None  # the last discovery error, while none has answered
        self._buffers = None  # the buffers' informer of the version watched
        self._watched = None
        self._started_rest = False
        self._discovered = threading.Event()
        self._stop = threading.Event()
        self._thread = None

    # ---- discovery ---------------------------------------------------------------------
    def start(self):
        self._thread = threading.Thread(
            target=self._discover_loop, daemon=True, name="capacitybuffer-discovery"
        )
        self._thread.start()

    def _discover_loop(self):
        while not self._stop.is_set():
            self.discover()
            self._stop.wait(self.interval)

    def discover(self):
        """One discovery: follow what the API server serves now."""
        try:
            served = discovery.served_versions(self.client)
        except Exception as exc:  # noqa: BLE001  (the thread outlives any error; kept to report)
            with self._lock:
                self._error = exc
            log.warning("capacitybuffer discovery failed: %s", exc)
            self._discovered.set()
            return
        version = discovery.choose(served, self.wanted)
        old = None
        with self._lock:
            self._served, self._error = served, None
            if version != self._watched:
                old, self._buffers, self._watched = self._buffers, None, version
                if version is not None:
                    log.info("capacitybuffer: watching %s", discovery.resource(version).path())
                    self._buffers = kube.Informer(
                        self.client,
                        discovery.resource(version),
                        transform=BUFFER_FIELDS,
                        max_objects=self.cap,
                        keys_past_cap=True,
                    ).start()
                    if not self._started_rest:
                        self._started_rest = True
                        for informer in self._rest():
                            informer.start()
        if old is not None:
            old.stop()
        self._discovered.set()

    def _rest(self):
        return [i for i in (self.templates, self.events, self.nodes) if i is not None]

    def informers(self):
        with self._lock:
            if self._buffers is None:
                return []
            return [self._buffers, *self._rest()]

    def wait_ready(self):
        self._discovered.wait(SYNC_WAIT_SECONDS)

    # ---- one scrape --------------------------------------------------------------------
    def observe(self) -> BufferState:
        deadline = time.monotonic() + SYNC_WAIT_SECONDS
        if not self._discovered.wait(SYNC_WAIT_SECONDS):
            raise RuntimeError("no discovery answer from the API server yet")
        with self._lock:
            served, error, buffers, watched = (
                self._served,
                self._error,
                self._buffers,
                self._watched,
            )
        if served is None:
            raise RuntimeError(f"discovery of {discovery.GROUP} failed: {error}")
        if buffers is None:
            return BufferState(served, None, None, time.time(), self.max_buffers, self.node_fit)
        watches = [buffers, *self._rest()]
        for informer in watches:
            if not informer.wait_synced(max(0.0, deadline - time.monotonic())):
                raise RuntimeError(f"no {informer.resource.plural} from the API server yet")
            informer.check_cache()
        shapes = kube.distinct_shapes(self.nodes.items()) if self.nodes is not None else []
        # Each watch's cached objects and keys past its cap read together: a buffer moving
        # from one to the other between two reads would be counted twice or not at all.
        cached, past_cap = buffers.snapshot()
        templates, templates_past_cap = self.templates.snapshot()
        events, events_past_cap = self.events.snapshot()
        now = time.time()
        summary = summarize(
            cached,
            templates,
            events,
            shapes,
            now,
            node_fit=self.node_fit,
            not_cached={
                "capacitybuffers": len(past_cap),
                "podtemplates": len(templates_past_cap),
                "events": len(events_past_cap),
            },
            templates_past_cap=templates_past_cap,
        )
        return BufferState(served, watched, summary, now, self.max_buffers, self.node_fit)

    families = staticmethod(families)
    advise = staticmethod(advise)

    def close(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        with self._lock:
            watches = [self._buffers, *self._rest()] if self._buffers is not None else []
            self._buffers = None
        for informer in watches:
            informer.stop()
        self.client.close()
