"""The HTTP endpoints, the scrape-timeout header and the concurrency cap, in process."""

import html
import http.client
import threading
import time

import pytest
import requests

from kube_scale_exporter.web.routes import App, make_server
from kube_scale_exporter.scrape import Scraper
from testbed.metrics import parse_exposition, sample, wait_until

pytestmark = pytest.mark.unit


@pytest.fixture
def serve():
    servers = []

    def start(collectors, max_timeout=5.0, max_requests=40, process_metrics=None):
        app = App(Scraper(collectors), "/metrics", max_timeout, max_requests, process_metrics)
        server = make_server(app, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def get(url, **kw):
    return requests.get(url, timeout=10, **kw)


def test_landing_health_and_not_found(serve, scripted):
    base = serve([scripted("a")])
    page = get(base + "/")
    assert page.status_code == 200 and 'href="/metrics"' in page.text and "a" in page.text
    assert get(base + "/healthz").text == "ok\n"
    assert get(base + "/nope").status_code == 404


def test_the_landing_page_escapes_what_it_echoes_as_html_escape_does(scripted):
    hostile = """/m"><script>alert('x')</script>&"""
    app = App(Scraper([scripted("a")]), hostile, 5.0, 40, title="<kse> & 'co'")
    page = app.landing_page().decode()
    assert f'href="{html.escape(hostile)}"' in page
    assert f"<title>{html.escape(app.title)}</title>" in page
    assert "<script>" not in page


@pytest.mark.parametrize("clients", [1, 2])
def test_back_to_back_scrapes_take_one_worker_thread_per_client(scripted, clients):
    """A connection is handed back to the loop only once its thread is free for the next
    request, and a thread starts only for a request no free thread will take: one
    Prometheus, or an HA pair, scraping back to back keeps one thread each. Before, one
    client started a thread about every 60 requests, and two grew the pool to its size."""
    server = make_server(App(Scraper([scripted("a")]), "/metrics", 5.0, 40), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    failures = []

    def scrape():
        conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
        try:
            for _ in range(300):
                conn.request("GET", "/metrics")
                reply = conn.getresponse()
                if reply.status != 200 or not reply.read():
                    failures.append(reply.status)
        except OSError as exc:  # http.client's errors too: a client that gave up failed
            failures.append(repr(exc))
        finally:
            conn.close()

    try:
        scrapers = [threading.Thread(target=scrape) for _ in range(clients)]
        for t in scrapers:
            t.start()
        for t in scrapers:
            t.join(60)
        assert not failures
        assert server.worker_threads() == clients
    finally:
        server.shutdown()
        server.server_close()


def test_metrics_without_client_library_defaults(serve, scripted):
    text = get(serve([scripted("a")]) + "/metrics").text
    names = {f.name for f in parse_exposition(text)}
    assert "kubescale_build_info" in names
    assert not any(n.startswith(("process_", "python_")) for n in names), names


def test_scrape_timeout_header_sets_the_deadline(serve, scripted):
    hung = scripted("hung")
    hung.hang.set()
    base = serve([hung, scripted("good")], max_timeout=20)
    start = time.monotonic()
    reply = get(base + "/metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "1"})
    took = time.monotonic() - start
    assert reply.status_code == 200
    assert took < 1.5, f"answered after {took:.2f}s for a 1s scrape timeout"
    families = parse_exposition(reply.text)
    assert sample(families, "kubescale_scrape_collector_success", collector="hung") == 0.0
    assert sample(families, "kubescale_scrape_collector_success", collector="good") == 1.0


def test_concurrent_scrapes_all_answer(serve, scripted):
    base = serve([scripted("a"), scripted("b")])
    results = []

    def scrape():
        r = get(base + "/metrics")
        results.append(
            (r.status_code, "kubescale_test_a" in r.text and "kubescale_test_b" in r.text)
        )

    threads = [threading.Thread(target=scrape) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [(200, True)] * 16


def test_scrapes_past_the_cap_get_503(serve, scripted):
    hung = scripted("hung")
    hung.hang.set()
    base = serve([hung], max_timeout=2, max_requests=1)
    first = threading.Thread(target=get, args=(base + "/metrics",))
    first.start()
    assert wait_until(lambda: hung.calls == 1)  # it holds the one slot
    assert get(base + "/metrics").status_code == 503
    first.join()
    hung.release.set()
    assert get(base + "/metrics").status_code == 200


def test_openmetrics_and_gzip_are_negotiated(serve, scripted):
    base = serve([scripted("a")])
    r = get(
        base + "/metrics",
        headers={
            "Accept": "application/openmetrics-text; version=1.0.0",
            "Accept-Encoding": "gzip",
        },
    )
    assert r.headers["Content-Type"].startswith("application/openmetrics-text")
    assert r.headers["Content-Encoding"] == "gzip"
    assert r.text.rstrip().endswith("# EOF")
