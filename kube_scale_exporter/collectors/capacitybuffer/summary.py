"""The buffers' summary: one row per CapacityBuffer, and the cluster-wide sums and counts,
computed from the informers' cached buffers, PodTemplates, events and node shapes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from kube_scale_exporter import kube

log = logging.getLogger(__name__)

# The resources a buffer's headroom is reported in, named as the balloon collector names them.
RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
CONDITIONS = ("ReadyForProvisioning", "Provisioning", "LimitedByQuotas")
CONDITION_STATUSES = ("True", "False", "Unknown")
# Every reason cluster-autoscaler 1.36 writes on the three conditions; anything else
# (a later release's, a hand-written status) reads "other".
CONDITION_REASONS = frozenset(
    {
        "AttributesSetSuccessfully",
        "error",
        "NotReadyForProvisioning",
        "BufferIsEmpty",
        "FailedToGetPodTemplate",
        "FailedToMakeFakePods",
        "FakePodsInjected",
        "ResourceQuotasAllocated",
    }
)
# The two event reasons the autoscaler posts on a buffer after each scale-up decision.
SCALE_UP_EVENTS = ("TriggeredScaleUp", "NotTriggerScaleUp")
ACTIVE_CAPACITY = "buffer.x-k8s.io/active-capacity"
# The kinds whose pod template cluster-autoscaler 1.36 reads for a scalableRef; another
# kind works only through its scale subresource and live pods.
KNOWN_KINDS = {
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("", "ReplicationController"),
    ("batch", "Job"),
}
# A NotTriggerScaleUp older than this is no longer the autoscaler's current word: it
# repeats one every loop (10 s), and client-go's event spam filter lets an object's events
# through once every 5 minutes after a burst of 25, so a live one is at most 5 min old.
EVENT_CURRENT_SECONDS = 10 * 60

PROBLEMS = {
    "no_replicas_or_limits": "neither replicas, percentage nor limits: the autoscaler cannot "
    "tell how many replicas to hold",
    "no_template": "neither podTemplateRef nor scalableRef: nothing to hold",
    "pod_template_missing": "the PodTemplate it names does not exist",
    "scalable_kind_unknown": "its scalableRef names a kind the autoscaler reads no pod template "
    "from, and no resolved template exists",
    "quantity_unparsable": "a limit, or a request of its pod template, is not a quantity",
    "no_requests": "one replica requests no cpu, memory or GPU: it holds no headroom",
    "requests_fit_no_node": "one replica's requests exceed the allocatable resources of every node",
    "not_ready": "not ReadyForProvisioning",
    "limited_by_quotas": "LimitedByQuotas: resource quotas cut its replicas",
    "not_provisioning": "Provisioning is False",
    "scale_up_not_triggered": "the autoscaler's last word is NotTriggerScaleUp",
}
# Why a buffer counted in kubescale_capacitybuffer_buffers is left out of the cluster-wide
# sums: past the buffers' cache cap (counted by key, never read), an object the collector
# cannot read, or a PodTemplate past the PodTemplates' cap (its requests unknown).
UNTRACKED = ("cache_full", "template_not_cached", "unreadable")
# The watches that count objects past --capacitybuffer.max-cached-objects by key.
WATCHES = ("capacitybuffers", "podtemplates", "events")
# The problems found in a buffer's own spec and references (a per-buffer series each);
# the rest follow the autoscaler's status and events, reported per buffer by those series.
INPUT_PROBLEMS = (
    "no_replicas_or_limits",
    "no_template",
    "pod_template_missing",
    "scalable_kind_unknown",
    "quantity_unparsable",
    "no_requests",
    "requests_fit_no_node",
)


def timestamp(text) -> float:
    return datetime.fromisoformat(text).timestamp()


@dataclass(frozen=True)
class LastWord:
    reason: str  # TriggeredScaleUp or NotTriggerScaleUp
    at: float  # when it was last posted (Unix seconds)


@dataclass
class Buffer:
    """What one buffer's series say."""

    namespace: str
    name: str
    strategy: str  # active_capacity or other
    template_from: str  # PodTemplate, a known kind, other, none
    template_name: str = ""  # spec.podTemplateRef.name, for `check`'s advice
    scalable_kind: str = ""  # spec.scalableRef's apiGroup/kind ("apps/Deployment"), likewise
    spec_replicas: int | None = None
    status_replicas: int = 0
    requests: dict | None = None  # one replica's RESOURCES -> Decimal; None when unknown
    conditions: list = field(default_factory=list)  # (type, status, reason)
    last_word: LastWord | None = None
    problems: list = field(default_factory=list)
    template_not_cached: bool = False  # its PodTemplate is past the cache cap: requests unknown

    @property
    def reserved(self) -> dict:
        if self.requests is None:
            return {}
        return {r: v * self.status_replicas for r, v in self.requests.items()}


@dataclass
class Summary:
    buffers: list = field(default_factory=list)  # Buffer, sorted by namespace and name
    reserved: dict = field(default_factory=lambda: dict.fromkeys(RESOURCES, 0))
    placeable: dict = field(default_factory=lambda: dict.fromkeys(RESOURCES, 0))
    problems: dict = field(default_factory=lambda: dict.fromkeys(PROBLEMS, 0))
    untracked: dict = field(default_factory=lambda: dict.fromkeys(UNTRACKED, 0))
    not_cached: dict = field(default_factory=lambda: dict.fromkeys(WATCHES, 0))
    node_fit: bool = False  # whether node shapes were known

    @property
    def total(self) -> int:
        """Every buffer: those read, and those counted but not read."""
        return len(self.buffers) + self.untracked["cache_full"] + self.untracked["unreadable"]


def last_words(events) -> dict:
    """(namespace, name) -> (uid, LastWord): the latest TriggeredScaleUp or NotTriggerScaleUp."""
    out = {}
    for event in events:
        try:
            reason = event.get("reason")
            if reason not in SCALE_UP_EVENTS:
                continue
            obj = event.get("involvedObject") or {}
            series = event.get("series") or {}
            when = (
                series.get("lastObservedTime")
                or event.get("lastTimestamp")
                or event.get("eventTime")
                or (event.get("metadata") or {}).get("creationTimestamp")
            )
            word = LastWord(reason, timestamp(when))
        except (AttributeError, TypeError, ValueError):
            continue
        key = (obj.get("namespace") or "", obj.get("name") or "")
        if key not in out or out[key][1].at < word.at:
            out[key] = (obj.get("uid"), word)
    return out


def _template_requests(template) -> dict:
    """All of one replica's requests (every resource), from a PodTemplate object."""
    spec = ((template or {}).get("template") or {}).get("spec") or {}
    return kube.pod_requests({"spec": spec})


def _source(spec) -> tuple[str, tuple | None]:
    """(template_from, (apiGroup, kind) of a scalableRef or None)."""
    if spec.get("podTemplateRef"):
        return "PodTemplate", None
    ref = spec.get("scalableRef")
    if isinstance(ref, dict) and ref.get("kind"):
        kind = (ref.get("apiGroup") or "", ref["kind"])
        return (kind[1] if kind in KNOWN_KINDS else "other"), kind
    return "none", None


def _buffer(obj, templates, past_cap, words, shapes, fits_cache, now) -> Buffer:
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    ns = meta.get("namespace") or ""
    strategy = spec.get("provisioningStrategy") or ACTIVE_CAPACITY
    template_from, kind = _source(spec)
    b = Buffer(
        ns,
        meta["name"],
        "active_capacity" if strategy == ACTIVE_CAPACITY else "other",
        template_from,
    )
    if isinstance(spec.get("replicas"), int):
        b.spec_replicas = spec["replicas"]
    if isinstance(status.get("replicas"), int):
        b.status_replicas = max(0, status["replicas"])
    problems = set()
    if spec.get("replicas") is None and spec.get("percentage") is None and not spec.get("limits"):
        problems.add("no_replicas_or_limits")

    # The autoscaler's resolved copy (status.podTemplateRef) is what its placeholder pods
    # are made of; before it exists, the PodTemplate the spec names. A PodTemplate past the
    # cache cap exists (its key is known) but its requests are not.
    copy = (status.get("podTemplateRef") or {}).get("name") or ""
    resolved = templates.get((ns, copy))
    uncached = bool(copy) and resolved is None and f"{ns}/{copy}" in past_cap
    if kind is not None:
        b.scalable_kind = "/".join(k for k in kind if k)
    if template_from == "PodTemplate":
        b.template_name = spec["podTemplateRef"].get("name") or ""
        named = templates.get((ns, b.template_name))
        if named is None and f"{ns}/{b.template_name}" in past_cap:
            uncached = True
        elif named is None:
            problems.add("pod_template_missing")
        template = resolved or named
    elif template_from == "none":
        problems.add("no_template")
        template = None
    else:
        template = resolved
        if template is None and not uncached:
            if kind not in KNOWN_KINDS:
                problems.add("scalable_kind_unknown")
            elif status.get("podTemplateRef"):
                problems.add("pod_template_missing")
    b.template_not_cached = template is None and uncached
    try:
        for q in (spec.get("limits") or {}).values():
            kube.parse_quantity(q)
        full = _template_requests(template) if template is not None else None
    except (ValueError, TypeError, AttributeError):
        problems.add("quantity_unparsable")
        full = None
    if full is not None:
        b.requests = {r: full.get(r, 0) for r in RESOURCES}
        if not any(v > 0 for v in b.requests.values()):
            problems.add("no_requests")
        elif shapes:
            key = tuple(sorted(full.items()))
            if key not in fits_cache:
                fits_cache[key] = kube.fits_some(full, shapes)
            if not fits_cache[key]:
                problems.add("requests_fit_no_node")

    found = {}
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") in CONDITIONS:
            st = cond.get("status") if cond.get("status") in CONDITION_STATUSES else "Unknown"
            reason = cond.get("reason") if cond.get("reason") in CONDITION_REASONS else "other"
            found[cond["type"]] = (st, reason)
    b.conditions = [(t, *found[t]) for t in CONDITIONS if t in found]
    if found.get("ReadyForProvisioning", ("",))[0] != "True":
        problems.add("not_ready")
    if found.get("LimitedByQuotas", ("",))[0] == "True":
        problems.add("limited_by_quotas")
    if found.get("Provisioning", ("",))[0] == "False":
        problems.add("not_provisioning")

    uid, word = words.get((ns, b.name), (None, None))
    if word is not None and (uid is None or uid == meta.get("uid")):
        b.last_word = word
        if word.reason == "NotTriggerScaleUp" and now - word.at < EVENT_CURRENT_SECONDS:
            problems.add("scale_up_not_triggered")
    b.problems = [p for p in PROBLEMS if p in problems]
    return b


def summarize(
    buffers,
    templates,
    events,
    node_shapes,
    now,
    node_fit=True,
    not_cached=None,
    templates_past_cap=frozenset(),
) -> Summary:
    """The buffer metrics for these cached objects at `now` (seconds since the epoch).

    `templates` are PodTemplate objects, `events` the events on CapacityBuffers,
    `node_shapes` distinct allocatable dicts (kube.distinct_shapes), empty when unknown.
    `not_cached`: objects each watch (WATCHES) counts past its cap without caching them;
    `templates_past_cap` the keys ("namespace/name") of the PodTemplates among them.
    """
    by_key = {}
    for t in templates:
        meta = t.get("metadata") or {}
        by_key[(meta.get("namespace") or "", meta.get("name") or "")] = t
    words = last_words(events)
    s = Summary(node_fit=node_fit and bool(node_shapes))
    s.not_cached.update(not_cached or {})
    s.untracked["cache_full"] = s.not_cached["capacitybuffers"]
    fits_cache = {}
    for obj in buffers:
        try:
            b = _buffer(obj, by_key, templates_past_cap, words, node_shapes, fits_cache, now)
        except (AttributeError, TypeError, KeyError, ValueError, ArithmeticError) as exc:
            # One malformed object in the cache must not fail every scrape until a relist.
            s.untracked["unreadable"] += 1
            log.debug("capacity buffer unreadable: %r", exc)
            continue
        s.buffers.append(b)
        s.untracked["template_not_cached"] += b.template_not_cached
        for p in b.problems:
            s.problems[p] += 1
        for r, v in b.reserved.items():
            s.reserved[r] += v
            if "requests_fit_no_node" not in b.problems:
                s.placeable[r] += v
    s.buffers.sort(key=lambda b: (b.namespace, b.name))
    return s
