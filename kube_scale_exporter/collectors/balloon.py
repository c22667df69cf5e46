"""Balloon (overprovisioning) headroom: low-priority placeholder pods that keep nodes warm.

Balloons are the pods matching `--balloon.selector` (a label selector, evaluated by the API
server; giving it enables the collector, cluster mode only). Three informers feed it:
the balloon pods (all namespaces), PriorityClasses, and nodes (shrunk to allocatable).
Scrapes read their caches. The exposition, for two Running balloons of 2 CPUs / 4 GiB on
two nodes and one balloon waiting for a node:

    # HELP kubescale_balloon_pods Balloon pods by phase.
    # TYPE kubescale_balloon_pods gauge
    kubescale_balloon_pods{phase="Pending"} 1.0
    kubescale_balloon_pods{phase="Running"} 2.0
    kubescale_balloon_pods{phase="Succeeded"} 0.0
    kubescale_balloon_pods{phase="Failed"} 0.0
    kubescale_balloon_pods{phase="Unknown"} 0.0
    # HELP kubescale_balloon_pending_oldest_seconds How long the oldest balloon not yet placed on a node has waited (0 when none waits).
    # TYPE kubescale_balloon_pending_oldest_seconds gauge
    kubescale_balloon_pending_oldest_seconds 95.0
    # HELP kubescale_balloon_reserved Resources requested by Running balloons: the headroom real pods can take at once.
    # TYPE kubescale_balloon_reserved gauge
    kubescale_balloon_reserved{resource="cpu",unit="core"} 4.0
    kubescale_balloon_reserved{resource="memory",unit="byte"} 8.589934592e+09
    # HELP kubescale_balloon_nodes Nodes holding at least one Running balloon.
    # TYPE kubescale_balloon_nodes gauge
    kubescale_balloon_nodes 2.0
    # HELP kubescale_balloon_preemptions_total Balloons evicted to make room for other pods, since the exporter started.
    # TYPE kubescale_balloon_preemptions_total counter
    kubescale_balloon_preemptions_total 7.0
    # HELP kubescale_balloon_misconfigured Balloon pods affected by each configuration problem.
    # TYPE kubescale_balloon_misconfigured gauge
    kubescale_balloon_misconfigured{reason="priority_below_autoscaler_cutoff"} 0.0
    ...

Its three watches' kubescale_kube_* health comes with every scrape (kube_scale_exporter/scrape.py).
Every label value comes from a fixed set, except `resource`, which is bounded by the resource names
the cluster defines (cpu, memory, nvidia.com/gpu, ...), named as kube-state-metrics does.
"""
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from kube_scale_exporter import kube
from kube_scale_exporter.registry import Collector, Finding, Needs, UsageError

log = logging.getLogger(__name__)

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
REASONS = {
    "priority_below_autoscaler_cutoff":
        "priority below the autoscaler's --expendable-pods-priority-cutoff: it never adds "
        "a node for them",
    "priority_not_negative":
        "priority 0 or more: pods of the default priority cannot preempt them",
    "priority_class_missing":
        "their priorityClassName names no PriorityClass",
    "requests_fit_no_node":
        "their requests exceed the allocatable resources of every node",
    "no_requests":
        "they request no resources, so they hold no headroom",
}
# The cluster-autoscaler gives up on a node that has not registered after
# --max-node-provision-time, 15 minutes by default.
PENDING_WARN_SECONDS = 15 * 60
# The first sync is awaited this long inside a scrape (well within the default 10 s
# scrape timeout); longer means the API server is unreachable or refuses us.
SYNC_WAIT_SECONDS = 5.0

_SELECTOR_TERM = re.compile(
    r"^\s*!?\s*[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?\s*"
    r"((=|==|!=)\s*[-A-Za-z0-9_.]*|\s+(in|notin)\s*\([-A-Za-z0-9_., ]*\))?\s*$")


def valid_selector(selector: str) -> bool:
    """Label selector syntax as the API server accepts it (terms joined by commas)."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return bool(selector.strip()) and all(_SELECTOR_TERM.match(t) for t in terms)


def resource_label(name: str) -> tuple[str, str]:
    """kube-state-metrics' naming: (sanitized resource, unit)."""
    if name == "cpu":
        unit = "core"
    elif name in ("memory", "ephemeral-storage", "storage") or name.startswith("hugepages-"):
        unit = "byte"
    else:
        unit = "integer"
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)[:100], unit


# Extended resources (nvidia.com/gpu, ...) come from node and pod specs anyone can write:
# at most this many, the largest, get a series; cpu, memory and storage always do.
MAX_EXTENDED_RESOURCES = 8


def reported_resources(reserved: dict) -> list[str]:
    """The resource names that get a kubescale_balloon_reserved series."""
    standard = [n for n in reserved if resource_label(n)[1] != "integer" or n == "cpu"]
    extended = sorted((n for n in reserved if n not in standard),
                      key=lambda n: (-reserved[n], n))
    return standard + extended[:MAX_EXTENDED_RESOURCES]


def _timestamp(text):
    return datetime.fromisoformat(text).timestamp()


def _preempted(pod) -> bool:
    """The scheduler's DisruptionTarget condition (Kubernetes 1.26+) says preemption."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return str(cond.get("reason", "")).startswith("PreemptionBy")
    return False


def _has_disruption_target(pod) -> bool:
    return any(c.get("type") == "DisruptionTarget"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _running(pod) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and bool(
        (pod.get("spec") or {}).get("nodeName"))


def _started(pod) -> bool:
    """It ran on a node. Kubelets since 1.22 move a deleted pod to Failed or Succeeded
    before it disappears, so a preempted balloon is not always Running at the end."""
    return (pod.get("status") or {}).get("phase") not in (None, "Pending") and bool(
        (pod.get("spec") or {}).get("nodeName"))


@dataclass
class Summary:
    """What the metrics say, computed from cached objects."""

    phases: dict = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    pending_oldest: float = 0.0
    reserved: dict = field(default_factory=dict)   # resource name -> Decimal
    nodes: int = 0
    misconfigured: dict = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    total: int = 0
    unreadable: int = 0  # pods whose objects could not be read (counted in no metric)


def _add_pod(s, pod, classes, held, fits_cache, node_allocatables, now, cutoff):
    """One balloon's share of the summary."""
    s.total += 1
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    phase = status.get("phase") or "Unknown"
    s.phases[phase if phase in s.phases else "Unknown"] += 1
    if phase == "Pending" and not spec.get("nodeName"):
        waited = now - _timestamp(pod["metadata"]["creationTimestamp"])
        s.pending_oldest = max(s.pending_oldest, waited)
    requests = kube.pod_requests(pod)
    if _running(pod) and not pod["metadata"].get("deletionTimestamp"):
        held.add(spec["nodeName"])
        for name, value in requests.items():
            s.reserved[name] = s.reserved.get(name, 0) + value

    class_name = spec.get("priorityClassName")
    pc = classes.get(class_name) if class_name else None
    if class_name and pc is None:
        s.misconfigured["priority_class_missing"] += 1
    priority = pc.get("value", 0) if pc is not None else spec.get("priority", 0)
    if priority >= 0:
        s.misconfigured["priority_not_negative"] += 1
    if priority < cutoff:
        s.misconfigured["priority_below_autoscaler_cutoff"] += 1
    if not any(v > 0 for v in requests.values()):
        s.misconfigured["no_requests"] += 1
    key = tuple(sorted(requests.items()))
    if key not in fits_cache:
        fits_cache[key] = any(all(v <= alloc.get(r, 0) for r, v in requests.items())
                              for alloc in node_allocatables)
    if node_allocatables and not fits_cache[key]:
        s.misconfigured["requests_fit_no_node"] += 1


def summarize(pods, priority_classes, node_allocatables, now, cutoff) -> Summary:
    """The balloon metrics for these objects at time `now` (seconds since the epoch).

    `node_allocatables` is a collection of distinct allocatable dicts (name -> Decimal).
    """
    classes = {pc["metadata"]["name"]: pc for pc in priority_classes}
    s = Summary()
    held = set()
    fits_cache = {}
    for pod in pods:
        try:
            _add_pod(s, pod, classes, held, fits_cache, node_allocatables, now, cutoff)
        except (AttributeError, TypeError, KeyError, ValueError, ArithmeticError) as exc:
            # One malformed object in the cache must not fail every scrape until a relist.
            s.unreadable += 1
            log.debug("balloon pod %r unreadable: %r", (pod.get("metadata") or {}).get("name")
                      if isinstance(pod, dict) else pod, exc)
    s.nodes = len(held)
    return s


def families(s: Summary, preemptions: int):
    pods = GaugeMetricFamily("kubescale_balloon_pods", "Balloon pods by phase.",
                             labels=["phase"])
    for phase in PHASES:
        pods.add_metric([phase], s.phases[phase])
    oldest = GaugeMetricFamily(
        "kubescale_balloon_pending_oldest_seconds",
        "How long the oldest balloon not yet placed on a node has waited (0 when none waits).",
        value=round(s.pending_oldest, 3))
    reserved = GaugeMetricFamily(
        "kubescale_balloon_reserved",
        "Resources requested by Running balloons: the headroom real pods can take at once.",
        labels=["resource", "unit"])
    for name in sorted(reported_resources(s.reserved)):
        reserved.add_metric(list(resource_label(name)), float(s.reserved[name]))
    nodes = GaugeMetricFamily("kubescale_balloon_nodes",
                              "Nodes holding at least one Running balloon.", value=s.nodes)
    preempted = CounterMetricFamily(
        "kubescale_balloon_preemptions",
        "Balloons evicted to make room for other pods, since the exporter started.",
        value=preemptions)
    bad = GaugeMetricFamily("kubescale_balloon_misconfigured",
                            "Balloon pods affected by each configuration problem.",
                            labels=["reason"])
    for reason in REASONS:
        bad.add_metric([reason], s.misconfigured[reason])
    return [pods, oldest, reserved, nodes, preempted, bad]


def _node_allocatable(node):
    """Only what the fit check needs, parsed once per node update on the informer's
    thread: a 7,500-node cache stays a few MB and a scrape parses nothing."""
    meta = node.get("metadata") or {}
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")},
            "allocatable": tuple(sorted((name, kube.parse_quantity(q))
                                        for name, q in alloc.items()))}


@dataclass(frozen=True)
class BalloonState:
    summary: Summary
    preemptions: int
    selector: str
    cutoff: int


class BalloonCollector(Collector):
    name = "balloon"
    modes = frozenset({"cluster"})
    default_enabled = False
    help = ("Overprovisioning headroom held by low-priority balloon pods (enabled by "
            "--balloon.selector).")
    # /version, read once, is open to every user.
    needs = {"cluster": Needs(rbac_rules=(
        {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["list", "watch"]},
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"],
         "verbs": ["list", "watch"]},
    ))}

    @classmethod
    def add_arguments(cls, group):
        group.add_argument(
            "--balloon.selector", dest="balloon_selector", default=None, metavar="SELECTOR",
            help="Label selector of the balloon pods, e.g. run=overprovisioning "
                 "(cluster-autoscaler FAQ) or app.kubernetes.io/name=cluster-overprovisioner.")
        group.add_argument(
            "--balloon.autoscaler-cutoff", dest="balloon_autoscaler_cutoff", type=int,
            default=-10, metavar="PRIORITY",
            help="The cluster-autoscaler's --expendable-pods-priority-cutoff (default -10): "
                 "balloons below it never trigger a scale-up.")

    @classmethod
    def enabled_by(cls, args):
        return args.balloon_selector is not None

    @classmethod
    def validate(cls, args):
        if args.balloon_selector is None:
            raise UsageError("--balloon.selector: the balloon collector needs a label selector")
        if not valid_selector(args.balloon_selector):
            raise UsageError(f"--balloon.selector: not a label selector: {args.balloon_selector!r}")
        try:
            kube.load(args.kube_kubeconfig).close()
        except kube.ConfigError as e:
            raise UsageError(f"--kube.kubeconfig: {e}") from None

    def __init__(self, args):
        self.selector = args.balloon_selector
        self.cutoff = args.balloon_autoscaler_cutoff
        self.client = kube.client_from_args(args)
        self._lock = threading.Lock()
        self._preemptions = 0
        self._counted = set()   # uids already counted from their DisruptionTarget condition
        self._conditions_api = None  # does the server set DisruptionTarget (1.26+)?
        self.pods = kube.Informer(self.client, kube.PODS, label_selector=self.selector,
                                  on_update=self._on_update, on_delete=self._on_delete)
        self.classes = kube.Informer(self.client, kube.PRIORITY_CLASSES)
        self.nodes = kube.Informer(self.client, kube.NODES, transform=_node_allocatable)
        self._informers = [self.pods, self.classes, self.nodes]

    def start(self):
        for informer in self._informers:
            informer.start()

    def informers(self):
        return list(self._informers)

    # ---- preemptions, from the pods informer's thread --------------------------------
    def _on_update(self, old, new):
        if _preempted(new) and not _preempted(old):
            with self._lock:
                uid = new["metadata"].get("uid")
                if uid not in self._counted:
                    self._counted.add(uid)
                    self._preemptions += 1

    def _on_delete(self, pod):
        uid = pod["metadata"].get("uid")
        with self._lock:
            if uid in self._counted:
                self._counted.discard(uid)
                return
        if _preempted(pod):
            counted = True
        elif _started(pod) and not _has_disruption_target(pod) and not self._server_sets_conditions():
            counted = True  # before 1.26 a deleted running balloon is the best sign there is
        else:
            counted = False
        if counted:
            with self._lock:
                self._preemptions += 1

    def _server_sets_conditions(self) -> bool:
        if self._conditions_api is None:
            try:
                self._conditions_api = self.client.server_version() >= (1, 26)
            except Exception as e:  # noqa: BLE001  (asked again at the next deletion)
                log.warning("balloon: cannot read the server version: %s", e)
                return False
        return self._conditions_api

    # ---- scrape ------------------------------------------------------------------------
    def _allocatables(self):
        """Distinct node allocatable vectors (node pools share a few shapes)."""
        return [dict(shape) for shape in {node["allocatable"] for node in self.nodes.items()}]

    def observe(self) -> BalloonState:
        deadline = time.monotonic() + SYNC_WAIT_SECONDS
        for informer in self._informers:
            if not informer.wait_synced(max(0.0, deadline - time.monotonic())):
                raise RuntimeError(f"no {informer.resource.plural} from the API server yet")
        s = summarize(self.pods.items(), self.classes.items(), self._allocatables(),
                      time.time(), self.cutoff)
        with self._lock:
            preemptions = self._preemptions
        return BalloonState(s, preemptions, self.selector, self.cutoff)

    @staticmethod
    def families(state: BalloonState):
        return families(state.summary, state.preemptions)

    @staticmethod
    def advise(state: BalloonState):
        return advise(state)

    def close(self):
        for informer in self._informers:
            informer.stop()
        self.client.close()


def advise(state: BalloonState) -> list[Finding]:
    """What `check` says about the balloons."""
    s = state.summary
    out = []
    if s.total == 0:
        out.append(Finding("warning", f"--balloon.selector {state.selector!r} matches no pods",
                           "Check the selector against the balloon Deployment's pod labels "
                           "(kubectl get pods -A -l SELECTOR)."))
        return out
    if s.unreadable:
        out.append(Finding("warning", f"{s.unreadable} balloon pod(s) could not be read and "
                                      "are left out of the metrics",
                           "Run with --log.level debug to see which and why."))
    for reason, count in s.misconfigured.items():
        if count:
            out.append(Finding("critical" if reason != "priority_class_missing" else "warning",
                               f"{count} balloon pod(s): {REASONS[reason]}",
                               _ADVICE[reason].format(cutoff=state.cutoff)))
    if s.pending_oldest > PENDING_WARN_SECONDS:
        out.append(Finding(
            "warning", f"a balloon has waited {s.pending_oldest / 60:.0f} min for a node",
            "The autoscaler is not adding nodes for it: check its logs, node group limits "
            "and cloud quotas."))
    if s.phases["Running"] == 0:
        out.append(Finding("warning", "no balloon is Running: there is no headroom",
                           "Real pods will wait for new nodes until balloons run again."))
    cpu = s.reserved.get("cpu", 0)
    out.append(Finding("info", f"{s.phases['Running']} balloon(s) Running on {s.nodes} "
                               f"node(s), holding {float(cpu):g} CPU"))
    return out


_ADVICE = {
    "priority_below_autoscaler_cutoff":
        "Give the balloon PriorityClass a value between {cutoff} and -1 (the FAQ uses -10 "
        "with the default cutoff), or lower --expendable-pods-priority-cutoff.",
    "priority_not_negative":
        "Give balloons a PriorityClass with a negative value (e.g. -1), so that pods of "
        "priority 0 preempt them.",
    "priority_class_missing":
        "Create the PriorityClass the balloons name, then recreate the balloons.",
    "requests_fit_no_node":
        "Lower the balloons' requests below a node's allocatable (kubectl describe node), or "
        "add a node group large enough. A node group scaled to zero has no node to compare "
        "with: this check then errs on the side of warning.",
    "no_requests":
        "Set resources.requests (cpu, memory, GPUs) on the balloon Deployment's container: "
        "the headroom is what they request.",
}
