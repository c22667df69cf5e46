"""--web.kube-rbac: Kubernetes authorization of scrapes, in process (no kube-rbac-proxy).

A request's bearer token is checked by the API server: a TokenReview (who is it? the
API server's default audiences) and a SubjectAccessReview (may that user `get` the
non-resource URL of the telemetry path?). RBAC grants it with a ClusterRole rule
`nonResourceURLs: ["/metrics"], verbs: ["get"]` bound to Prometheus' service account.

What it costs, and why a flood cannot starve Prometheus:
- Verdicts are cached by the SHA-256 of the token (raw tokens are never kept), at most
  MAX_ENTRIES of them, least recently used dropped first: allowed for `ttl`, refused for
  NEGATIVE_TTL. A flood of one bad token costs one review per NEGATIVE_TTL.
- Reviews of unknown tokens run at most MAX_REVIEWS at once and REVIEWS_PER_SECOND on
  average; past either the request gets 429 at once, without asking the API server. A
  token already cached as allowed is served from the cache whatever the flood; it is
  reviewed again from half its TTL on, when a review is free, on a thread of its own: the
  scrape that finds it due is answered at once, so an API server that is slow (restarting,
  overloaded) never delays a scrape whose grant is cached, and a busy or failing one
  leaves the grant standing until it really expires.
- One token is reviewed once at a time; other requests with it meanwhile get 429 (none
  waits on a worker thread).
- This runs before a request takes a --web.max-requests slot (kube_scale_exporter/web/routes.py).
- The API server failing or unreachable: 503 for tokens not cached (fail closed), logged
  at most every 10 s. A grant whose TTL runs out while the API server cannot be asked
  (a review found it unreachable or failing) is served up to STALE_GRACE longer, reviewed
  again in the background meanwhile: an API server restart or upgrade costs Prometheus no
  scrape, and the first answer the API server gives replaces it, a refusal included.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from kube_scale_exporter.web.ratelog import RateLimitedLog

log = logging.getLogger("kube_scale_exporter.http")

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
# What the exporter's ServiceAccount needs for the reviews; deploy/components/kube-rbac
# grants exactly this (tests/deploy checks it).
RBAC_RULES = (
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["subjectaccessreviews"],
        "verbs": ["create"],
    },
)
MAX_ENTRIES = 1024
# Refusals are cached this long at most: a token granted the permission a moment ago
# works within seconds.
NEGATIVE_TTL = 5.0
MAX_REVIEWS = 4
REVIEWS_PER_SECOND = 20.0
# Both reviews of one token within this, in all (Prometheus' scrape timeout is 10 s).
REVIEW_TIMEOUT = 5.0
# How long past its TTL a grant stands while the API server cannot be asked: a control
# plane restart or upgrade takes minutes; a permission revoked meanwhile could not have
# been reviewed anyway, and the first review that gets an answer ends it.
STALE_GRACE = 300.0

ALLOWED, UNAUTHENTICATED, FORBIDDEN, BUSY, UNAVAILABLE = (
    "allowed",
    "unauthenticated",
    "forbidden",
    "busy",
    "unavailable",
)


@dataclass
class _Entry:
    verdict: str
    at: float
    expires: float
    unreachable: bool = False  # its last review could not ask the API server


class _Bucket:
    """A token bucket: `rate` per second, bursts of `rate`."""

    def __init__(self, rate: float, clock):
        self.rate, self.clock = rate, clock
        self.tokens, self.at = rate, clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.rate, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class KubeRBAC:
    def __init__(
        self,
        client,
        path: str = "/metrics",
        ttl: float = 60.0,
        negative_ttl: float = NEGATIVE_TTL,
        max_entries: int = MAX_ENTRIES,
        max_reviews: int = MAX_REVIEWS,
        reviews_per_second: float = REVIEWS_PER_SECOND,
        stale_grace: float = STALE_GRACE,
        clock=time.monotonic,
    ):
        self.client = client
        self.path = path
        self.ttl = ttl
        self.negative_ttl = min(negative_ttl, ttl)
        self.stale_grace = stale_grace
        self.max_entries = max_entries
        self.clock = clock
        self._lock = threading.Lock()
        self._cache: OrderedDict[bytes, _Entry] = OrderedDict()
        self._inflight: dict[bytes, None] = {}
        self._reviews = threading.BoundedSemaphore(max_reviews)
        self._bucket = _Bucket(reviews_per_second, clock)
        self.notes = RateLimitedLog(log)
        self.reviews = 0  # TokenReviews sent, for tests and the curious

    def check(self, authorization: str) -> str:
        """The verdict for a request's Authorization header."""
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return UNAUTHENTICATED
        key = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        now = self.clock()
        with self._lock:
            entry = self._cache.get(key)
            grace = self.stale_grace if entry is not None and entry.verdict == ALLOWED else 0.0
            if entry is not None and entry.expires + grace <= now:
                del self._cache[key]
                entry = None
            # A grant past its TTL serves again only once the API server has been found
            # unreachable; until then it is reviewed first, kept for that fallback.
            stale = None
            if entry is not None and entry.expires <= now and not entry.unreachable:
                stale, entry = entry, None
            if entry is not None:
                self._cache.move_to_end(key)
                fresh = entry.verdict != ALLOWED or now - entry.at < self.ttl / 2
                if fresh or key in self._inflight:
                    return entry.verdict
            # The same token already under review: 429 rather than a worker thread
            # waiting on it (a flood of one token must not hold the workers).
            if key in self._inflight:
                return BUSY
            # Ours to review if a slot and the rate allow it; else the cached verdict (a
            # grant past half its TTL) stands, or 429.
            if not self._reviews.acquire(blocking=False):
                return entry.verdict if entry is not None else BUSY
            if not self._bucket.take():
                self._reviews.release()
                return entry.verdict if entry is not None else BUSY
            self._inflight[key] = None
        if entry is not None:
            # A grant past half its TTL: refreshed in the background, served meanwhile.
            threading.Thread(
                target=self._review_and_release, args=(key, token), daemon=True
            ).start()
            return entry.verdict
        verdict = self._review_and_release(key, token)
        if verdict == UNAVAILABLE and stale is not None:
            return ALLOWED  # the API server cannot be asked: the grant stands, in grace
        return verdict

    def _review_and_release(self, key: bytes, token: str) -> str:
        """Review `token`, remember the verdict, or where there was none (the API server
        could not be asked) mark the cached grant so: it stands until its expiry, then for
        the grace. Free the token and the slot."""
        try:
            verdict = self._review(token)
            if verdict != UNAVAILABLE:
                self._remember(key, verdict)
            else:
                with self._lock:
                    entry = self._cache.get(key)
                    if entry is not None and entry.verdict == ALLOWED:
                        entry.unreachable = True
            return verdict
        finally:
            with self._lock:
                del self._inflight[key]
            self._reviews.release()

    def _remember(self, key: bytes, verdict: str) -> None:
        now = self.clock()
        ttl = self.ttl if verdict == ALLOWED else self.negative_ttl
        with self._lock:
            self._cache[key] = _Entry(verdict, now, now + ttl)
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)

    def _review(self, token: str) -> str:
        self.reviews += 1
        started = time.monotonic()
        try:
            review = self.client.create(
                TOKEN_REVIEWS,
                {
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": {"token": token},
                },
                timeout=REVIEW_TIMEOUT,
            )
            status = review.get("status") or {}
            if not status.get("authenticated"):
                return UNAUTHENTICATED
            user = status.get("user") or {}
            spec = {
                "user": user.get("username", ""),
                "groups": user.get("groups") or [],
                "nonResourceAttributes": {"path": self.path, "verb": "get"},
            }
            if user.get("uid"):
                spec["uid"] = user["uid"]
            if user.get("extra"):
                spec["extra"] = user["extra"]
            access = self.client.create(
                ACCESS_REVIEWS,
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": spec,
                },
                timeout=max(0.1, REVIEW_TIMEOUT - (time.monotonic() - started)),
            )
            allowed = (access.get("status") or {}).get("allowed") is True
            return ALLOWED if allowed else FORBIDDEN
        except Exception as exc:  # noqa: BLE001  (no verdict, whatever the cause: fail closed)
            self.notes.note(
                "kube-rbac",
                "scrapes refused (503): the API server's token or access review failed",
                f"{type(exc).__name__}: {exc}",
                level=logging.WARNING,
            )
            return UNAVAILABLE
