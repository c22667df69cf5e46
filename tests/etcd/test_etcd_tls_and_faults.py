"""Client TLS made by openssl, and faults: the etcd collector fails alone, in time, and recovers."""

import socket
import threading
import time

import pytest
import requests

from kube_scale_exporter.metrics import GaugeFamily
from kube_scale_exporter.web.routes import App, make_server
from kube_scale_exporter.registry import Collector
from kube_scale_exporter.scrape import Scraper
from tests.etcd.conftest import quota_source, samples, success_of, value
from testbed.etcd_server import make_tls

MEMBER = {"etcd_cluster": "main", "member": "default"}


class Steady(Collector):
    """Another collector in the same scrape: it must keep answering whatever etcd does."""

    name = "steady"

    def observe(self):
        return 1.0

    @staticmethod
    def families(state):
        return [GaugeFamily("kubescale_test_steady", "Always 1.", value=state)]


def recovered(scrape, within=10.0):
    """The first scrape in which etcd succeeds again, within `within` seconds: a thawed or
    restarted etcd first works through what queued, and a refresh waits --etcd.min-interval."""
    deadline = time.monotonic() + within
    while True:
        text, _ = scrape()
        if success_of(text, "etcd") == 1:
            return text
        assert time.monotonic() < deadline, f"etcd not back within {within}s:\n{text}"
        time.sleep(0.1)


@pytest.fixture
def serve():
    """serve(collector) -> scrape(timeout) through the real HTTP server; returns (text, seconds)."""
    servers = []

    def start(collector):
        scraper = Scraper([collector, Steady(None)])
        server = make_server(App(scraper, "/metrics", 10.0, 0), "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append((server, scraper))
        session = requests.Session()
        session.trust_env = False

        def scrape(timeout=5.0):
            began = time.monotonic()
            reply = session.get(
                f"http://127.0.0.1:{server.server_port}/metrics",
                headers={"X-Prometheus-Scrape-Timeout-Seconds": str(timeout)},
                timeout=timeout + 5,
            )
            reply.raise_for_status()
            return reply.text, time.monotonic() - began

        scrape.scraper = scraper
        return scrape

    yield start
    for server, scraper in servers:
        server.shutdown()
        server.server_close()
        scraper.close()


def tls_flags(tls, ca=None):
    return [
        "--etcd.ca-file",
        ca or tls["ca"],
        "--etcd.cert-file",
        tls["client_cert"],
        "--etcd.key-file",
        tls["client_key"],
    ]


@pytest.mark.integration
def test_tls_with_ca_and_client_certificate(tmp_path, etcd_factory, collector_factory, version):
    tls = make_tls(tmp_path / "pki")
    etcd = etcd_factory(version=version, tls=tls, quota_bytes=32 * 1024 * 1024)
    assert etcd.client_url.startswith("https://")
    collector = collector_factory("--etcd.cluster", f"main={etcd.client_url}", *tls_flags(tls))
    found = samples(collector)
    assert value(found, "kubescale_etcd_member_up", **MEMBER) == 1
    assert value(found, "kubescale_etcd_quota_bytes", **MEMBER) == 32 * 1024 * 1024
    assert value(found, "kubescale_etcd_quota_info", source=quota_source(version), **MEMBER) == 1


@pytest.mark.integration
def test_local_mode_over_tls_with_given_certificates(tmp_path, etcd_factory, collector_factory):
    tls = make_tls(tmp_path / "pki")
    etcd = etcd_factory(version="3.5", tls=tls)
    collector = collector_factory(
        "--etcd.local",
        f"main={etcd.client_url}",
        "--etcd.local-access=full",
        *tls_flags(tls),
        mode="node",
    )
    assert value(samples(collector), "kubescale_etcd_member_up", **MEMBER) == 1


@pytest.mark.integration
@pytest.mark.parametrize("flags", ["wrong CA", "no client certificate"])
def test_bad_tls_fails_alone_within_the_timeout(
    tmp_path, etcd_factory, collector_factory, serve, flags
):
    tls = make_tls(tmp_path / "pki")
    other = make_tls(tmp_path / "other-pki", name="other")
    etcd = etcd_factory(version="3.5", tls=tls)
    extra = tls_flags(tls, ca=other["ca"]) if flags == "wrong CA" else ["--etcd.ca-file", tls["ca"]]
    collector = collector_factory(
        "--etcd.cluster", f"main={etcd.client_url}", "--etcd.timeout", "1", *extra
    )
    scrape = serve(collector)
    text, seconds = scrape(timeout=5)
    assert success_of(text, "etcd") == 0 and success_of(text, "steady") == 1
    assert "kubescale_test_steady 1.0" in text and "kubescale_etcd_db_size_bytes{" not in text
    assert seconds < 2
    error = scrape.scraper.last_error("etcd")
    assert "SSLError" in error and etcd.client_url in error, error


@pytest.mark.unit
def test_port_that_accepts_but_never_answers(collector_factory, serve):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # the kernel completes handshakes; nothing ever reads or answers
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        collector = collector_factory(
            "--etcd.cluster", f"main={url}", "--etcd.timeout", "0.5", "--etcd.min-interval", "30"
        )
        scrape = serve(collector)
        text, seconds = scrape(timeout=5)
        assert success_of(text, "etcd") == 0 and success_of(text, "steady") == 1
        assert 0.5 <= seconds < 1.5
        # The read timeout or the whole-request deadline, whichever fires first.
        error = scrape.scraper.last_error("etcd")
        assert "ReadTimeout" in error or "no complete answer within 0.5s" in error, error
        # The failure is cached like a success: other scrapers do not wait again.
        text, seconds = scrape(timeout=5)
        assert success_of(text, "etcd") == 0 and seconds < 0.3
    finally:
        silent.close()


@pytest.mark.integration
def test_etcd_stopped_mid_run_then_back(etcd_factory, collector_factory, serve, version):
    etcd = etcd_factory(version=version)
    collector = collector_factory(
        "--etcd.cluster",
        f"main={etcd.client_url}",
        "--etcd.timeout",
        "1",
        "--etcd.min-interval",
        "0.2",
    )
    scrape = serve(collector)
    text, _ = scrape()
    assert success_of(text, "etcd") == 1

    etcd.stop()
    time.sleep(0.25)  # past --etcd.min-interval: a refresh, not the cached success
    text, seconds = scrape()
    assert success_of(text, "etcd") == 0 and success_of(text, "steady") == 1 and seconds < 1.5

    etcd.start()
    text = recovered(scrape)
    assert 'kubescale_etcd_member_up{etcd_cluster="main",member="default"} 1.0' in text


@pytest.mark.integration
def test_etcd_frozen_then_thawed(etcd_factory, collector_factory, serve):
    etcd = etcd_factory(version="3.7")
    collector = collector_factory(
        "--etcd.cluster",
        f"main={etcd.client_url}",
        "--etcd.timeout",
        "0.5",
        "--etcd.min-interval",
        "0.2",
    )
    scrape = serve(collector)
    assert success_of(scrape()[0], "etcd") == 1
    etcd.proc.pause()  # SIGSTOP: connections are accepted by the kernel, never answered
    try:
        time.sleep(0.25)  # past --etcd.min-interval: a refresh, not the cached success
        text, seconds = scrape(timeout=5)
        assert success_of(text, "etcd") == 0 and success_of(text, "steady") == 1
        assert seconds < 1.5
    finally:
        etcd.proc.resume()
    recovered(scrape)


@pytest.mark.integration
def test_one_cluster_down_leaves_the_other_reported(etcd_factory, collector_factory, serve):
    main = etcd_factory(version="3.7", name="main")
    events = etcd_factory(version="3.5", name="events")
    collector = collector_factory(
        "--etcd.cluster",
        f"main={main.client_url}",
        "--etcd.cluster",
        f"events={events.client_url}",
        "--etcd.timeout",
        "0.5",
        "--etcd.min-interval",
        "0.1",
    )
    scrape = serve(collector)
    assert success_of(scrape()[0], "etcd") == 1
    events.stop()
    time.sleep(0.15)
    text, _ = scrape()
    assert success_of(text, "etcd") == 1  # main still answers
    assert 'kubescale_etcd_up{etcd_cluster="events"} 0.0' in text
    assert 'kubescale_etcd_member_up{etcd_cluster="events",member="events"} 0.0' in text
    assert 'kubescale_etcd_db_size_bytes{etcd_cluster="main",member="main"}' in text


@pytest.mark.integration
def test_one_frozen_member_of_three_costs_one_timeout(etcd_factory, collector_factory, serve):
    members = etcd_factory.cluster(3, version="3.5")
    collector = collector_factory(
        "--etcd.cluster",
        f"main={members[0].client_url}",
        "--etcd.timeout",
        "0.5",
        "--etcd.min-interval",
        "0.1",
    )
    scrape = serve(collector)
    assert success_of(scrape()[0], "etcd") == 1
    members[2].proc.pause()
    try:
        time.sleep(0.15)
        text, seconds = scrape(timeout=5)
    finally:
        members[2].proc.resume()
    assert seconds < 1.2  # members are asked in parallel: one timeout, not one each
    assert success_of(text, "etcd") == 1
    assert 'kubescale_etcd_member_up{etcd_cluster="main",member="m2"} 0.0' in text
    assert 'kubescale_etcd_member_up{etcd_cluster="main",member="m1"} 1.0' in text
