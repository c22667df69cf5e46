"""Why an image pull failed and from which registry, read from the kubelet's Failed event;
the counters the imagepull_events collector keeps of them.

The kubelet reports a failed pull as an event with reason `Failed` and the message
`Failed to pull image "IMAGE": ERROR`, ERROR being the container runtime's error as the
CRI returned it (containerd 1.6/1.7/2.x: `rpc error: code = ... desc = failed to pull and
unpack image ...`; dockershim: `rpc error: code = 2 desc = ...`). The other `Failed`
messages (`Error: ErrImagePull`, `Error: ImagePullBackOff`, container start errors) repeat
a failure already counted or are not pulls, so they are skipped.

From the 10th distinct message of one reason about one object within 10 minutes, the
kubelet's event recorder (client-go's tools/record) writes one event whose message is
COMBINED_PREFIX + the newest message, and raises its count for each later one: the
parsers read the message behind the prefix.

The cause is one of a fixed set of classes, decided by words in ERROR; docs/imagepull.md
lists the real messages behind each rule. Before matching, quoted strings and every token
holding a `/` (URLs, image references, paths) are removed, so a registry or repository
named `quota` or `forbidden` cannot pick the class.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime

from kube_scale_exporter.containerd.reference import parse
from kube_scale_exporter.labels import OTHER, sanitize
from kube_scale_exporter.metrics import CounterFamily, Family, GaugeFamily

REASONS = ("rate_limited", "auth", "not_found", "timeout", "tls", "other")
# The window of kubescale_image_pull_failing_nodes, as long as the alerts' rate window.
FAILING_NODES_WINDOW = 600.0
# What client-go's EventAggregatorByReasonMessageFunc puts before the message (0.34: tools/record/events_cache.go).
COMBINED_PREFIX = "(combined from similar events): "
_PULLED_IMAGE = re.compile(r'^Successfully pulled image "([^"]*)"')
_FAILED = re.compile(r'^Failed to pull image "([^"]*)": (.*)$', re.DOTALL)
# Runtime errors are a few hundred bytes; past this an event message is not one.
MAX_ERROR_CHARS = 4096
# First match wins, in this order: a registry that rate-limits anonymous pulls answers
# 429 with "toomanyrequests" (before any auth word in the same text); Docker Hub says
# "pull access denied ... insufficient_scope: authorization failed" for a repository that
# may not exist, which only the registry can tell apart, so auth comes before not_found;
# "TLS handshake timeout" is a slow network, so timeout comes before tls.
_RULES = (
    ("rate_limited", re.compile(r"toomanyrequests|too many requests|rate.?limit|quota")),
    (
        "auth",
        re.compile(
            r"unauthori[sz]ed|forbidden|denied|insufficient_scope|"
            r"authori[sz]ation failed|failed to authori[sz]e|"
            r"no basic auth credentials|authentication required"
        ),
    ),
    (
        "not_found",
        re.compile(
            r"not found|manifest unknown|name unknown|blob unknown|"
            r"does not exist"
        ),
    ),
    (
        "timeout",
        re.compile(
            r"deadline exceeded|timeout|timed out|request canceled|"
            r"context canceled|no progress|cancel+ed while"
        ),
    ),
    ("tls", re.compile(r"x509|tls:|certificate|server gave http response to https client")),
)


def uncombined(message: str | None) -> str:
    """The kubelet's message, without the prefix of the recorder's combined event."""
    return (message or "").removeprefix(COMBINED_PREFIX)


def classify(error: str) -> str:
    """The reason class of a runtime's pull error text (one of REASONS)."""
    # str.split, not a regex: a 1 MB message of one token must cost linear time.
    text = " ".join(error[:MAX_ERROR_CHARS].lower().split('"')[0::2])
    text = " ".join(t for t in text.split() if "/" not in t)
    for reason, pattern in _RULES:
        if pattern.search(text):
            return reason
    return "other"


def parse_failed(message: str) -> tuple[str, str] | None:
    """(registry host, reason class) of a `Failed to pull image` message; None for any
    other message. The host is as the image names it, sanitized; an image reference that
    does not parse gives "invalid"."""
    match = _FAILED.match(uncombined(message))
    if match is None:
        return None
    try:
        host = sanitize(parse(match.group(1)).host)
    except ValueError:
        host = "invalid"
    return host, classify(match.group(2))


class RegistryLabels:
    """Admits registry label values first come, first served, up to `cap`; later ones
    read as "other".

    Counters need stable label sets: a top-n re-ranked each scrape would move a
    registry's count into "other" and back, which reads as resets and jumps. So a value
    admitted once keeps its series for the life of the process, and a flood of distinct
    hosts costs at most cap + 1 series per reason."""

    def __init__(self, cap: int):
        self.cap = cap
        self._admitted: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, host: str) -> str:
        with self._lock:
            if host in self._admitted:
                return host
            if host != OTHER and len(self._admitted) < self.cap:
                self._admitted.add(host)
                return host
        return OTHER


def registry_of_pulled(message: str) -> str | None:
    """The sanitized registry host of a `Successfully pulled image "X" ...` message."""
    match = _PULLED_IMAGE.match(uncombined(message))
    if match is None:
        return None
    try:
        return sanitize(parse(match.group(1)).host)
    except ValueError:
        return "invalid"


def created_since(event: dict, since: float) -> bool:
    """Whether the event was created at or after `since`: the first list replays the
    last hour of events, which happened before this process could count them."""
    created = (event.get("metadata") or {}).get("creationTimestamp")
    return bool(created) and datetime.fromisoformat(created).timestamp() >= since


@dataclass(frozen=True)
class FailureState:
    failures: dict[tuple[str, str], int]  # (registry, reason) -> count
    succeeded: dict[str, int]  # registry -> count
    failing_nodes: dict[str, int]  # registry -> nodes with a failure in the window


class FailureCounts:
    """Failed pulls by (registry, reason) from Failed events, successes by registry from
    the Pulled handler, and the nodes failing recently per registry. Thread-safe: the
    two watches feed it from their own threads."""

    def __init__(self, since: float, registries: RegistryLabels, clock=time.monotonic):
        self.since = since
        self.registries = registries
        self.clock = clock
        self._failures: dict[tuple[str, str], int] = {}
        self._succeeded: dict[str, int] = {}
        # registry -> {node: when its last failure came}; nodes are bounded by the
        # cluster's size and pruned to the window at each snapshot.
        self._nodes: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()

    def _failed(self, event: dict, times: int) -> None:
        if times <= 0 or not created_since(event, self.since):
            return
        parsed = parse_failed(event.get("message", ""))
        if parsed is None:
            return
        registry, reason = self.registries(parsed[0]), parsed[1]
        node = sanitize((event.get("source") or {}).get("host") or "unknown", 253)
        with self._lock:
            self._failures[registry, reason] = self._failures.get((registry, reason), 0) + times
            self._nodes.setdefault(registry, {})[node] = self.clock()

    def on_add(self, event: dict) -> None:
        self._failed(event, event.get("count") or 1)

    def on_update(self, old: dict, new: dict) -> None:
        # The kubelet folds an identical repeat into the same event, raising its count; a
        # combined event's count rises for each similar one, its message the newest's.
        self._failed(new, (new.get("count") or 1) - (old.get("count") or 1))

    def succeeded(self, host: str | None, times: int) -> None:
        if host is None:
            return
        registry = self.registries(host)
        with self._lock:
            self._succeeded[registry] = self._succeeded.get(registry, 0) + times

    def snapshot(self) -> FailureState:
        cutoff = self.clock() - FAILING_NODES_WINDOW
        with self._lock:
            for nodes in self._nodes.values():
                for node in [n for n, at in nodes.items() if at < cutoff]:
                    del nodes[node]
            return FailureState(
                dict(self._failures),
                dict(self._succeeded),
                {r: len(n) for r, n in self._nodes.items()},
            )


def failure_families(state: FailureState) -> list[Family]:
    failures = CounterFamily(
        "kubescale_image_pull_failures",
        "Failed image pulls reported by kubelet Failed events, by registry and cause.",
        labels=["registry", "reason"],
    )
    for (registry, reason), count in sorted(state.failures.items()):
        failures.add_metric([registry, reason], count)
    succeeded = CounterFamily(
        "kubescale_image_pulls_succeeded",
        "Successful image pulls reported by kubelet Pulled events, by registry.",
        labels=["registry"],
    )
    for registry, count in sorted(state.succeeded.items()):
        succeeded.add_metric([registry], count)
    nodes = GaugeFamily(
        "kubescale_image_pull_failing_nodes",
        "Nodes that reported a failed pull from the registry in the last 10 minutes.",
        labels=["registry"],
    )
    for registry, count in sorted(state.failing_nodes.items()):
        nodes.add_metric([registry], count)
    return [failures, succeeded, nodes]
