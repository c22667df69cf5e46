"""One collector's failure or hang never fails the scrape or the other collectors."""

import sys
import threading
import time

import pytest

from kube_scale_exporter.scrape import Scraper
from testbed.metrics import sample, wait_until

pytestmark = pytest.mark.unit


def waits_on_a_result(thread):
    """`thread` is blocked in Future.result(): its scrape waits on a run in flight."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "result" and code.co_filename.endswith("concurrent/futures/_base.py"):
            return True
        frame = frame.f_back
    return False


def test_all_collectors_succeed_and_report_their_series(scripted):
    a, b = scripted("a", value=3.0), scripted("b", value=4.0)
    families = Scraper([a, b]).scrape(timeout=2).families
    assert sample(families, "kubescale_scrape_collector_success", collector="a") == 1.0
    assert sample(families, "kubescale_scrape_collector_success", collector="b") == 1.0
    assert sample(families, "kubescale_test_a") == 3.0
    assert sample(families, "kubescale_test_b") == 4.0
    assert sample(families, "kubescale_build_info") == 1.0
    assert 0 <= sample(families, "kubescale_scrape_collector_duration_seconds", collector="a") < 2


def test_a_raising_collector_fails_alone_then_recovers(scripted):
    bad, good = scripted("bad"), scripted("good", value=7.0)
    scraper = Scraper([bad, good])
    bad.error = OSError("backend down")
    families = scraper.scrape(timeout=2).families
    assert sample(families, "kubescale_scrape_collector_success", collector="bad") == 0.0
    assert sample(families, "kubescale_scrape_collector_success", collector="good") == 1.0
    assert sample(families, "kubescale_test_good") == 7.0
    assert not [f for f in families if f.name == "kubescale_test_bad"]
    assert "backend down" in scraper.last_error("bad")

    bad.error = None
    families = scraper.scrape(timeout=2).families
    assert sample(families, "kubescale_scrape_collector_success", collector="bad") == 1.0
    assert scraper.last_error("bad") is None


def test_a_hung_collector_times_out_and_is_not_started_twice(scripted):
    hung, good = scripted("hung"), scripted("good")
    scraper = Scraper([hung, good])
    hung.hang.set()
    start = time.monotonic()
    families = scraper.scrape(timeout=0.3).families
    took = time.monotonic() - start
    assert took < 1.5, f"scrape took {took:.2f}s with a 0.3s deadline"
    assert sample(families, "kubescale_scrape_collector_success", collector="hung") == 0.0
    assert sample(families, "kubescale_scrape_collector_duration_seconds", collector="hung") >= 0.3
    assert sample(families, "kubescale_scrape_collector_success", collector="good") == 1.0

    families = scraper.scrape(timeout=0.3).families
    assert hung.calls == 1, "a collector still running must not be started again"
    assert "timed out" in scraper.last_error("hung")
    assert sample(families, "kubescale_scrape_collector_success", collector="good") == 1.0

    hung.hang.clear()
    hung.release.set()
    assert wait_until(
        lambda: (
            sample(
                scraper.scrape(timeout=1).families,
                "kubescale_scrape_collector_success",
                collector="hung",
            )
            == 1.0
        )
    )


def test_concurrent_scrapes_share_one_run(scripted):
    slow = scripted("slow")
    slow.hang.set()
    scraper = Scraper([slow])
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(scraper.scrape(timeout=5).families))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    assert wait_until(lambda: slow.calls == 1)
    assert wait_until(lambda: all(waits_on_a_result(t) for t in threads))  # all 4 share it
    slow.release.set()
    for t in threads:
        t.join()
    assert slow.calls == 1
    assert [sample(r, "kubescale_scrape_collector_success", collector="slow") for r in results] == [
        1.0
    ] * 4
