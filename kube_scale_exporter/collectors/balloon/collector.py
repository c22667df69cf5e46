"""The `balloon` collector: its flags, its three informers, and one observation of their caches.

The exposition is in state.py's docstring, the `check` text in advice.py.
"""

from __future__ import annotations

import time

from kube_scale_exporter import kube
from kube_scale_exporter.collectors.balloon.advice import advise
from kube_scale_exporter.collectors.balloon.preemptions import PreemptionCounter
from kube_scale_exporter.collectors.balloon.selector import valid_selector
from kube_scale_exporter.collectors.balloon.state import BalloonState, families
from kube_scale_exporter.collectors.balloon.summary import summarize
from kube_scale_exporter.flagtypes import positive_int
from kube_scale_exporter.kube.flags import kubeconfig_problem
from kube_scale_exporter.registry import Collector, Needs, UsageError

# The first sync is awaited this long inside a scrape (well within the default 10 s
# scrape timeout); longer means the API server is unreachable or refuses us.
SYNC_WAIT_SECONDS = 5.0
# Objects each of the three informers may cache: 7,500 nodes with room to grow, and far
# more balloons than a cluster runs (one or two a node). A selector matching more pods is
# a mistake the cap stops with a logged failure: every pod of a 150,000-pod cluster would
# cost ~640 MiB (42 MiB of RSS per 10,000 Running pods as POD_FIELDS keeps them,
# bench/results/kube_cache.md), past the Deployment's memory limit.
MAX_CACHED_OBJECTS = 20_000

# What summary.py and preemptions.py read of a balloon pod, and kube.pod_requests of its
# containers; the rest of each pod is dropped as it is decoded.
_REQUESTS = {"resources": ("requests",)}
POD_FIELDS = kube.Fields(
    {
        "metadata": ("creationTimestamp", "deletionTimestamp"),
        "spec": {
            "nodeName": True,
            "priority": True,
            "priorityClassName": True,
            "overhead": True,
            "containers": _REQUESTS,
            "initContainers": _REQUESTS,
        },
        "status": {"phase": True, "conditions": ("type", "status", "reason")},
    }
)
PRIORITY_CLASS_FIELDS = kube.Fields({"value": True})


class BalloonCollector(Collector):
    """Balloon headroom; the exposition is in balloon/state.py's docstring."""

    name = "balloon"
    modes = frozenset({"cluster"})
    default_enabled = False
    help = (
        "Overprovisioning headroom held by low-priority balloon pods (enabled by "
        "--balloon.selector)."
    )
    # /version, read once, is open to every user.
    needs = {
        "cluster": Needs(
            rbac_rules=(
                {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["list", "watch"]},
                {
                    "apiGroups": ["scheduling.k8s.io"],
                    "resources": ["priorityclasses"],
                    "verbs": ["list", "watch"],
                },
            )
        )
    }

    @classmethod
    def add_arguments(cls, group):
        group.add_argument(
            "--balloon.selector",
            dest="balloon_selector",
            default=None,
            metavar="SELECTOR",
            help="Label selector of the balloon pods, e.g. run=overprovisioning "
            "(cluster-autoscaler FAQ) or app.kubernetes.io/name=cluster-overprovisioner.",
        )
        group.add_argument(
            "--balloon.autoscaler-cutoff",
            dest="balloon_autoscaler_cutoff",
            type=int,
            default=-10,
            metavar="PRIORITY",
            help="The cluster-autoscaler's --expendable-pods-priority-cutoff (default -10): "
            "balloons below it never trigger a scale-up.",
        )
        group.add_argument(
            "--balloon.max-cached-objects",
            dest="balloon_max_cached_objects",
            type=positive_int,
            default=MAX_CACHED_OBJECTS,
            metavar="N",
            help="Objects each of the collector's watches (balloon pods, PriorityClasses, "
            "nodes) may cache; past it the cache is dropped and the collector fails until "
            f"the cluster shrinks back under it (default {MAX_CACHED_OBJECTS}).",
        )

    @classmethod
    def enabled_by(cls, args):
        return args.balloon_selector is not None

    @classmethod
    def validate(cls, args):
        if args.balloon_selector is None:
            raise UsageError("--balloon.selector: the balloon collector needs a label selector")
        if not valid_selector(args.balloon_selector):
            raise UsageError(f"--balloon.selector: not a label selector: {args.balloon_selector!r}")
        if (problem := kubeconfig_problem(args)) is not None:
            raise UsageError(problem)

    def __init__(self, args):
        super().__init__(args)
        self.selector = args.balloon_selector
        self.cutoff = args.balloon_autoscaler_cutoff
        self.client = kube.client_from_args(args)
        self.preemptions = PreemptionCounter()
        cap = getattr(args, "balloon_max_cached_objects", MAX_CACHED_OBJECTS)
        self.pods = kube.Informer(
            self.client,
            kube.PODS,
            label_selector=self.selector,
            on_update=self.preemptions.on_update,
            on_delete=self.preemptions.on_delete,
            transform=POD_FIELDS,
            max_objects=cap,
        )
        self.classes = kube.Informer(
            self.client, kube.PRIORITY_CLASSES, transform=PRIORITY_CLASS_FIELDS, max_objects=cap
        )
        self.nodes = kube.Informer(
            self.client,
            kube.NODES,
            transform=kube.NODE_SHAPE,
            max_objects=cap,
        )
        self._informers = [self.pods, self.classes, self.nodes]

    def start(self):
        for informer in self._informers:
            informer.start()

    def informers(self):
        return list(self._informers)

    def observe(self) -> BalloonState:
        deadline = time.monotonic() + SYNC_WAIT_SECONDS
        for informer in self._informers:
            if not informer.wait_synced(max(0.0, deadline - time.monotonic())):
                raise RuntimeError(f"no {informer.resource.plural} from the API server yet")
            informer.check_cache()
        s = summarize(
            self.pods.items(),
            self.classes.items(),
            kube.distinct_shapes(self.nodes.items()),
            time.time(),
            self.cutoff,
        )
        return BalloonState(s, self.preemptions.count, self.selector, self.cutoff)

    families = staticmethod(families)
    advise = staticmethod(advise)

    def close(self):
        for informer in self._informers:
            informer.stop()
        self.client.close()
