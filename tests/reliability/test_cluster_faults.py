"""Faults under a real cluster-mode exporter: balloon and imagepull_events on a real
kube-apiserver (through a fault proxy for the answers it will not give on demand: 410,
429 with Retry-After, 5xx, a watch that never answers), etcd beside them.

The Kubernetes collectors serve their informer caches, so an API outage shows in
kubescale_kube_watch_up 0 and a growing kubescale_kube_last_sync_age_seconds rather than
in their success; before the first sync they fail. Every scrape answers within its timeout
throughout, the other collectors stay up, and the watches come back on their own.
"""

import json
import re
import time

import pytest

from testbed.metrics import wait_until
from tests.reliability.conftest import COLLECTORS, FIGURES, WATCH, timed

pytestmark = pytest.mark.integration

SCRAPE_TIMEOUT = 3.0
# After n failures the informer waits at most min(30, 2^(n-1)) s: a few failures of a
# restart or an injected burst are over well within this.
RECOVERY_SECONDS = 30


def all_up(scrape):
    return all(scrape.success.get(name) == 1 for name in COLLECTORS)


def watch_up(scrape, resource="pods"):
    return scrape.value("kubescale_kube_watch_up", resource=resource)


def status_body(code, reason):
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": reason,
            "code": code,
            "message": reason,
        }
    ).encode()


def test_api_server_stopped_then_restarted(cluster, cluster_exporter):
    cluster.stop()
    try:
        down = cluster_exporter.wait_for(lambda s: watch_up(s) == 0, within=10)
        assert all_up(down)  # caches served; etcd unaffected
        time.sleep(3)
        later = cluster_exporter.wait_for(lambda s: True, within=0)
        age = later.value("kubescale_kube_last_sync_age_seconds", resource="pods")
        assert age is not None and age >= 3
    finally:
        cluster.start()
    timed(
        "kube-apiserver restarted: watch_up 1 after it is ready",
        lambda: cluster_exporter.wait_for(
            lambda s: all_up(s) and watch_up(s) == 1, within=RECOVERY_SECONDS
        ),
    )


def test_410_gone_relists(proxy, cluster_exporter):
    before = cluster_exporter.scrape().value("kubescale_kube_relists_total", resource="pods")
    # The open watch is cut; the informer resumes from its resourceVersion and is told
    # that it is gone.
    proxy.inject(
        WATCH,
        status=410,
        body=status_body(410, "Expired"),
        headers={"Content-Type": "application/json"},
        times=1,
    )
    _end_pod_watches(proxy)
    after = timed(
        "410 Gone: relisted and watching after the cut",
        lambda: cluster_exporter.wait_for(
            lambda s: (
                s.value("kubescale_kube_relists_total", resource="pods") == before + 1
                and watch_up(s) == 1
            ),
            within=RECOVERY_SECONDS,
        ),
    )
    assert all_up(after)


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_backs_off_and_recovers(proxy, cluster_exporter, status):
    proxy.inject(
        WATCH,
        status=status,
        body=status_body(status, "InternalError"),
        headers={"Content-Type": "application/json"},
    )
    _end_pod_watches(proxy)
    cluster_exporter.wait_for(lambda s: watch_up(s) == 0, within=10)
    start = time.monotonic()
    first = proxy.count(WATCH, status)
    # Doubling from 0.5-1 s: 2 to 5 attempts in 8 s. It keeps trying (waited for, as a
    # loaded machine slows the attempts down), never in a tight loop: at most 6 of the
    # attempts the proxy saw fall in the 8 s from `start`, however long the wait took.
    assert wait_until(lambda: proxy.count(WATCH, status) - first >= 2, 30)
    time.sleep(max(0.0, start + 8 - time.monotonic()))
    in_window = sum(
        1
        for _, path, got, t in list(proxy.requests)
        if got == status and re.search(WATCH, path) and start < t <= start + 8
    )
    assert in_window <= 6, in_window
    proxy.clear()
    s = timed(
        f"{status} on every watch: watch_up 1 after the errors stop",
        lambda: cluster_exporter.wait_for(lambda s: watch_up(s) == 1, within=RECOVERY_SECONDS),
    )
    assert all_up(s)
    assert time.monotonic() - start < 8 + RECOVERY_SECONDS


def test_429_retry_after_then_recovers(proxy, cluster_exporter):
    proxy.inject(
        WATCH,
        status=429,
        body=status_body(429, "TooManyRequests"),
        headers={"Content-Type": "application/json", "Retry-After": "2"},
        times=3,
    )
    _end_pod_watches(proxy)
    s = cluster_exporter.wait_for(
        lambda s: watch_up(s) == 1 and proxy.count(WATCH, 429) == 3, within=RECOVERY_SECONDS
    )
    assert all_up(s)


def test_429_retry_after_is_honoured(proxy, cluster_exporter):
    proxy.inject(
        WATCH,
        status=429,
        body=status_body(429, "TooManyRequests"),
        headers={"Content-Type": "application/json", "Retry-After": "3"},
        times=2,
    )
    _end_pod_watches(proxy)
    cluster_exporter.wait_for(lambda s: proxy.count(WATCH, 429) == 2, within=RECOVERY_SECONDS)
    times = [
        t
        for _, path, got, t in proxy.requests
        if got == 429 and "watch=1" in path and "/pods" in path
    ]
    retried = [
        t
        for _, path, got, t in proxy.requests
        if "watch=1" in path and "/pods" in path and t > times[0]
    ]
    assert retried[0] - times[0] >= 3.0, f"retried {retried[0] - times[0]:.2f}s after a 429"


def test_hung_watch_keeps_scrapes_fast_and_is_visible(proxy, cluster_exporter):
    proxy.inject(WATCH, hang=True)
    _end_pod_watches(proxy)
    time.sleep(4)
    s = cluster_exporter.wait_for(lambda s: True, within=0)
    assert all_up(s)
    # No event or bookmark arrives: the cache's age says how stale it is.
    assert s.value("kubescale_kube_last_sync_age_seconds", resource="pods") >= 3
    proxy.clear()  # also lets the hung request go
    timed(
        "hung watch: watch_up 1 after its release",
        lambda: cluster_exporter.wait_for(lambda s: watch_up(s) == 1, within=RECOVERY_SECONDS),
    )


def test_sigterm_with_a_hung_watch_exits_within_seconds(proxy, cluster_exporter):
    proxy.inject(r"watch=1", hang=True)
    hung = proxy.count(r"watch=1", "hang")
    _end_all_watches(proxy)
    # A re-watch is in flight, hung, when the signal comes.
    assert wait_until(lambda: proxy.count(r"watch=1", "hang") > hung, 10)
    code, took = cluster_exporter.terminate()
    FIGURES["SIGTERM, a re-watch hung at the proxy: exit in"] = took
    assert code == 0
    assert took < 3.0, f"shutdown took {took:.2f}s"


def test_sigterm_with_open_watches_is_clean(cluster_exporter):
    code, took = cluster_exporter.terminate()
    FIGURES["SIGTERM, every watch open: exit in"] = took
    assert code == 0 and took < 3.0, (code, took)
    with open(cluster_exporter.log_path) as f:
        log = f.read()
    assert "shutting down" in log and "Traceback" not in log, log[-2000:]


def _end_pod_watches(proxy):
    proxy.cut_streams(WATCH)


def _end_all_watches(proxy):
    proxy.cut_streams(r"watch=1")
