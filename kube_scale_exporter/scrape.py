"""One scrape: run every enabled collector concurrently under a deadline.

Each collector's `observe()` and `families(state)` run in a worker thread; the scrape
returns a ScrapeResult: each collector's outcome, the states it observed (what `check`
advises on) and the metric families to serve. A collector that raises, or that is still running when the deadline passes, is reported
with `kubescale_scrape_collector_success{collector="NAME"} 0` and contributes no other
series; the others are unaffected. Concurrent scrapes share a collector's run in flight
(several Prometheus replicas cost one backend call), and a collector hung on its backend
is not started again until that call returns: it costs one worker thread, not one per
scrape.

    # HELP kubescale_scrape_collector_success Whether the collector succeeded in this scrape.
    # TYPE kubescale_scrape_collector_success gauge
    kubescale_scrape_collector_success{collector="neighbor"} 1.0
    # HELP kubescale_scrape_collector_duration_seconds How long the collector took in this scrape.
    # TYPE kubescale_scrape_collector_duration_seconds gauge
    kubescale_scrape_collector_duration_seconds{collector="neighbor"} 0.0012
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from dataclasses import dataclass, field
from typing import Any

from kube_scale_exporter import PYTHON_VERSION, __version__
from kube_scale_exporter.metrics import Family, GaugeFamily
from kube_scale_exporter.registry import Collector

log = logging.getLogger(__name__)

# SIGTERM to exit: Kubernetes' default grace period is 30 s, a rollout waits on every pod.
CLOSE_SECONDS = 2.0


@dataclass(frozen=True)
class Outcome:
    """How one collector did in one scrape; `error` is None when it succeeded."""

    name: str
    ok: bool
    seconds: float
    error: str | None = None


@dataclass
class ScrapeResult:
    """One scrape: outcomes in collector order, the states observed, the exposition."""

    outcomes: list[Outcome]
    states: dict[str, Any] = field(default_factory=dict)  # collector name -> its state
    families: list[Family] = field(default_factory=list)


# A source of families that belong to the process rather than to one collector (the API
# watches' health): called on every scrape, after the collectors.
Source = Callable[[], Iterable[Family]]


class Scraper:
    """Runs collectors for each scrape; safe to call from many HTTP threads at once."""

    def __init__(self, collectors: Iterable[Collector], sources: Iterable[Source] = ()):
        self.collectors = list(collectors)
        self.sources = list(sources)
        # One run in flight per collector, so one worker each is enough.
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, len(self.collectors)), thread_name_prefix="collect"
        )
        self._lock = threading.Lock()
        self._inflight: dict[str, Future] = {}
        self._last_error: dict[str, str] = {}

    def _submit(self, collector: Collector) -> Future:
        with self._lock:
            running = self._inflight.get(collector.name)
            if running is not None and not running.done():
                return running
            future = self._pool.submit(self._run, collector)
            self._inflight[collector.name] = future
            return future

    @staticmethod
    def _run(collector: Collector) -> tuple[Any, list[Family], float]:
        start = time.monotonic()
        state = collector.observe()
        families = list(collector.families(state))
        return state, families, time.monotonic() - start

    def _report(self, name: str, error: str | None) -> None:
        """Log a collector's failures when they start or change, and its recovery."""
        previous = self._last_error.get(name)
        if error is None:
            if previous is not None:
                log.info("collector %s recovered", name)
                del self._last_error[name]
        elif error != previous:
            log.warning("collector %s failed: %s", name, error)
            self._last_error[name] = error

    def last_error(self, name: str) -> str | None:
        """The collector's current error, or None when its last scrape succeeded."""
        with self._lock:
            return self._last_error.get(name)

    def scrape(self, timeout: float) -> ScrapeResult:
        start = time.monotonic()
        deadline = start + timeout
        futures = {c.name: self._submit(c) for c in self.collectors}
        result = ScrapeResult(outcomes=[])
        out: list[Family] = []
        for name, future in futures.items():
            error = None
            try:
                state, families, elapsed = future.result(
                    timeout=max(0.0, deadline - time.monotonic())
                )
                result.states[name] = state
                out.extend(families)
            except FutureTimeout:
                error, elapsed = f"timed out after {timeout:.2f}s", timeout
            except Exception as exc:  # noqa: BLE001  (any collector error stays its own)
                error, elapsed = f"{type(exc).__name__}: {exc}", time.monotonic() - start
            with self._lock:
                self._report(name, error)
            result.outcomes.append(Outcome(name, error is None, elapsed, error))
        # Process-wide families (the API watches' health) come even when the collector
        # reading those watches fails.
        shared = [family for source in self.sources for family in source()]
        result.families = [build_info(), *collector_status(result.outcomes), *shared, *out]
        return result

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """Close every collector at once and wait at most `timeout` in all.

        A collector whose thread is blocked on a hung backend (a watch that never answered,
        a frozen socket) may not return from close() for its own timeouts; SIGTERM must
        still end the process within seconds, and its threads are daemons.
        """
        threads = [
            threading.Thread(target=self._close_one, args=(c,), daemon=True, name=f"close-{c.name}")
            for c in self.collectors
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name.removeprefix("close-") for t in threads if t.is_alive()]
        if stuck:
            log.warning(
                "collectors still closing after %.1fs, exiting anyway: %s",
                timeout,
                ", ".join(stuck),
            )
        self._pool.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _close_one(collector: Collector) -> None:
        try:
            collector.close()
        except Exception:
            log.exception("closing collector %s", collector.name)


def collector_status(outcomes: Iterable[Outcome]) -> list[GaugeFamily]:
    """Success and duration per collector of one scrape."""
    success = GaugeFamily(
        "kubescale_scrape_collector_success",
        "Whether the collector succeeded in this scrape (0 on error or timeout).",
        labels=["collector"],
    )
    duration = GaugeFamily(
        "kubescale_scrape_collector_duration_seconds",
        "How long the collector took in this scrape (up to the deadline on timeout).",
        labels=["collector"],
    )
    for o in outcomes:
        success.add_metric([o.name], 1.0 if o.ok else 0.0)
        duration.add_metric([o.name], o.seconds)
    return [success, duration]


def build_info(version: str = __version__, python_version: str = PYTHON_VERSION) -> GaugeFamily:
    info = GaugeFamily(
        "kubescale_build_info",
        "A constant 1, labelled with the exporter's version and Python version.",
        labels=["version", "python_version"],
    )
    info.add_metric([version, python_version], 1.0)
    return info
