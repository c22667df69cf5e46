"""One scrape: run every enabled collector concurrently under a deadline.

A collector that raises, or that is still running when the deadline passes, is reported
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
import platform
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from prometheus_client.core import GaugeMetricFamily, Metric

from kube_scale_exporter import __version__
from kube_scale_exporter.kube import health_families, live_informers
from kube_scale_exporter.registry import Collector

log = logging.getLogger(__name__)

# SIGTERM to exit: Kubernetes' default grace period is 30 s, a rollout waits on every pod.
CLOSE_SECONDS = 2.0


class Scraper:
    """Runs collectors for each scrape; safe to call from many HTTP threads at once."""

    def __init__(self, collectors: Iterable[Collector]):
        self.collectors = list(collectors)
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
    def _run(collector: Collector) -> tuple[list[Metric], float]:
        start = time.monotonic()
        families = list(collector.collect())
        return families, time.monotonic() - start

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

    def scrape(self, timeout: float) -> list[Metric]:
        start = time.monotonic()
        deadline = start + timeout
        futures = {c.name: self._submit(c) for c in self.collectors}
        outcomes: list[tuple[str, bool, float]] = []
        out: list[Metric] = []
        for name, future in futures.items():
            ok, error = False, None
            try:
                families, elapsed = future.result(timeout=max(0.0, deadline - time.monotonic()))
                out.extend(families)
                ok = True
            except FutureTimeout:
                error, elapsed = f"timed out after {timeout:.2f}s", timeout
            except Exception as exc:  # noqa: BLE001  (any collector error stays its own)
                error, elapsed = f"{type(exc).__name__}: {exc}", time.monotonic() - start
            with self._lock:
                self._report(name, error)
            outcomes.append((name, ok, elapsed))
        # The API watches are the process's, shared by collectors: their health is the
        # scrape's, present even when the collector reading them fails.
        informers = live_informers()
        health = health_families(informers) if informers else []
        return [build_info(), *collector_status(outcomes), *health, *out]

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """Close every collector at once and wait at most `timeout` in all.

        A collector whose thread is blocked on a hung backend (a watch that never answered,
        a frozen socket) may not return from close() for its own timeouts; SIGTERM must
        still end the process within seconds, and its threads are daemons.
        """
        threads = [threading.Thread(target=self._close_one, args=(c,), daemon=True,
                                    name=f"close-{c.name}") for c in self.collectors]
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name.removeprefix("close-") for t in threads if t.is_alive()]
        if stuck:
            log.warning("collectors still closing after %.1fs, exiting anyway: %s",
                        timeout, ", ".join(stuck))
        self._pool.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _close_one(collector: Collector) -> None:
        try:
            collector.close()
        except Exception:
            log.exception("closing collector %s", collector.name)


def collector_status(outcomes: list[tuple[str, bool, float]]) -> list[GaugeMetricFamily]:
    """Success and duration per collector, from (name, succeeded, seconds) of one scrape."""
    success = GaugeMetricFamily(
        "kubescale_scrape_collector_success",
        "Whether the collector succeeded in this scrape (0 on error or timeout).",
        labels=["collector"],
    )
    duration = GaugeMetricFamily(
        "kubescale_scrape_collector_duration_seconds",
        "How long the collector took in this scrape (up to the deadline on timeout).",
        labels=["collector"],
    )
    for name, ok, seconds in outcomes:
        success.add_metric([name], 1.0 if ok else 0.0)
        duration.add_metric([name], seconds)
    return [success, duration]


def build_info(version: str = __version__,
               python_version: str = platform.python_version()) -> GaugeMetricFamily:
    info = GaugeMetricFamily(
        "kubescale_build_info",
        "A constant 1, labelled with the exporter's version and Python version.",
        labels=["version", "python_version"],
    )
    info.add_metric([version, python_version], 1.0)
    return info
