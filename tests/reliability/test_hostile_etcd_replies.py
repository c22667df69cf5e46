"""Hostile etcd replies by size and pace, under a real exporter process.

A real etcd answers behind the fault proxy; the proxy replaces one kind of answer with a
reply of hundreds of MiB, one with no end, a /metrics line with no end, a reply that
drips a byte a second, or a member list of hundreds of members. Each time the exporter's
peak RSS (VmHWM) stays within a few MiB of where it was, the etcd collector (or the
cluster's up series) reports 0 with an error naming the cap or the deadline, scrapes stay
within their timeout, and the collector recovers once the answers are sane again.
"""

import gzip
import json
import socket
import threading
import time
import tracemalloc

import pytest

from kube_scale_exporter.etcd.client import EtcdClient, EtcdError, TLSFiles, new_session
from testbed.etcd_server import EtcdServer
from testbed.faultproxy import FaultProxy, drip, endless, repeat
from testbed.procs import rss_mib

# What a scrape's transient allocations, thread stacks and logging may add to the peak.
SLACK_MIB = 6.0
MEMBERS = "/v3/cluster/member/list"


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    server = EtcdServer(tmp_path_factory.mktemp("etcd")).start()
    yield server
    server.stop()


@pytest.fixture
def proxy(etcd):
    p = FaultProxy(etcd.client_url).start()
    # The member list as etcd sends it, with the member's client URL turned into the
    # proxy's: Status and /metrics (asked at that URL) go through the proxy too.
    real = p.session.post(p.url + MEMBERS, json={}, timeout=5).json()
    for member in real["members"]:
        member["clientURLs"] = [p.url]
    p.sane = json.dumps(real).encode()
    sane(p)
    yield p
    p.stop()


def sane(proxy):
    proxy.clear()
    proxy.inject(MEMBERS, status=200, body=proxy.sane, headers={"Content-Type": "application/json"})


def hostile(proxy, pattern, **fault):
    """Answer `pattern` with the fault, everything else as etcd (through the proxy)."""
    proxy.clear()
    proxy.inject(pattern, **fault)
    proxy.inject(MEMBERS, status=200, body=proxy.sane, headers={"Content-Type": "application/json"})


@pytest.fixture
def exporter(proxy, run_exporter):
    # /metrics (quota, disk latency, reads) is read on every refresh, each min-interval.
    running = run_exporter(
        [
            "--mode",
            "node",
            "--collector.disable-defaults",
            "--etcd.cluster",
            f"main={proxy.url}",
            "--etcd.timeout",
            "1",
            "--etcd.min-interval",
            "0.2",
            "--etcd.keys-interval",
            "0.5",
        ]
    )
    running.wait_for(lambda s: s.success.get("etcd") == 1, within=10)
    for _ in range(5):  # warm: allocator, HTTP threads, the first key count
        running.scrape()
    return running


def peak(exporter) -> float:
    return rss_mib(exporter.proc.pid)[1]


def fails_naming(exporter, words, within=10):
    failed = exporter.wait_for(lambda s: s.success.get("etcd") == 0, within=within)
    log = exporter.proc.log_tail(200)
    assert any(w in log for w in words), log
    return failed


def recovers(exporter, proxy):
    sane(proxy)
    exporter.wait_for(
        lambda s: s.success.get("etcd") == 1 and s.value("kubescale_etcd_member_up") == 1, within=10
    )


def hold(exporter, seconds=3.0):
    """Scrape for a while under the fault: the peak must not creep up."""
    stop = threading.Event()
    timer = threading.Timer(seconds, stop.set)
    timer.start()
    while not stop.is_set():
        scrape = exporter.scrape()
        assert scrape.status == 200 and scrape.seconds < 3.5


@pytest.mark.integration
@pytest.mark.parametrize("length", [400 << 20, None], ids=["400MiB", "400MiB-chunked"])
def test_a_huge_member_list_costs_its_cap_not_its_size(exporter, proxy, length):
    before = peak(exporter)
    hostile(
        proxy,
        MEMBERS,
        status=200,
        chunks=lambda: repeat(b'{"members":[' + b" " * 99, 400 << 20),
        length=length,
    )
    fails_naming(exporter, ["MEMBER_LIST_BYTES"])
    hold(exporter)
    grew = peak(exporter) - before
    print(f"member list 400 MiB ({'declared' if length else 'chunked'}): peak +{grew:.1f} MiB")
    assert grew < SLACK_MIB
    recovers(exporter, proxy)


@pytest.mark.integration
def test_an_endless_chunked_reply_costs_its_cap(exporter, proxy):
    before = peak(exporter)
    hostile(proxy, r"/v3/maintenance/status", status=200, chunks=lambda: endless(b"[" * 7 + b"0,"))
    fails_naming(exporter, ["STATUS_BYTES"])
    hold(exporter)
    grew = peak(exporter) - before
    print(f"endless Status: peak +{grew:.1f} MiB")
    assert grew < SLACK_MIB
    recovers(exporter, proxy)


@pytest.mark.integration
def test_an_endless_metrics_line_costs_its_cap(exporter, proxy):
    before = peak(exporter)
    hostile(proxy, r"/metrics", status=200, chunks=lambda: endless(b"etcd_"))
    exporter.wait_for(lambda s: s.value("kubescale_etcd_member_metrics_up") == 0, within=10)
    assert "METRICS_LINE_BYTES" in exporter.proc.log_tail(200)
    hold(exporter)
    grew = peak(exporter) - before
    print(f"endless /metrics line: peak +{grew:.1f} MiB")
    assert grew < SLACK_MIB
    sane(proxy)
    exporter.wait_for(lambda s: s.value("kubescale_etcd_member_metrics_up") == 1, within=10)


@pytest.mark.integration
def test_a_reply_dripping_a_byte_a_second_ends_at_the_timeout(exporter, proxy):
    hostile(proxy, MEMBERS, status=200, chunks=lambda: drip(b'{"members": []}', every=0.3))
    failed = fails_naming(exporter, ["no complete answer within 1s"])
    # --etcd.timeout 1 bounds the request, not each read: the scrape ends within it.
    assert failed.seconds < 2.0
    recovers(exporter, proxy)


def member_list(n, url):
    return json.dumps(
        {
            "header": {"member_id": "1"},
            "members": [{"ID": str(i + 1), "name": f"m{i}", "clientURLs": [url]} for i in range(n)],
        }
    ).encode()


@pytest.mark.integration
@pytest.mark.parametrize("n", [300, 2000])
def test_a_member_list_past_the_cap_fails_the_cluster_with_bounded_series(exporter, proxy, n):
    before = peak(exporter)
    body = member_list(n, proxy.url)
    hostile(proxy, MEMBERS, status=200, body=body, headers={"Content-Type": "application/json"})
    failed = fails_naming(exporter, ["over the cap of 15 (MAX_MEMBERS"])
    series = [s for s in failed.samples if s.name.startswith("kubescale_etcd_")]
    # Its only cluster down, the collector fails and sends no etcd series at all.
    assert series == [], len(series)
    hold(exporter)
    threads = int(open(f"/proc/{exporter.proc.pid}/status").read().split("Threads:")[1].split()[0])
    # Threads must not follow the member count (2,000 members once started ~1,000); the
    # rest is the process's own: HTTP workers start on demand, up to --web.max-requests + 8,
    # so a loaded machine answering the test's scrapes slowly can add a few.
    assert threads < 64, threads
    grew = peak(exporter) - before
    print(f"{n} members: {len(series)} etcd series, {threads} threads, peak +{grew:.1f} MiB")
    assert grew < SLACK_MIB
    recovers(exporter, proxy)


@pytest.mark.unit
def test_headers_dripping_a_byte_at_a_time_end_at_the_timeout():
    """The deadline covers the status line and headers too, not only the body: a server
    sending them a byte every 0.2 s (each read well within the timeout) is cut at 1 s."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    stop = threading.Event()

    def serve():
        conn, _ = listener.accept()
        with conn:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" * 100:
                if stop.is_set():
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.2)

    threading.Thread(target=serve, daemon=True).start()
    client = EtcdClient(
        new_session(TLSFiles()), f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=1.0
    )
    start = time.monotonic()
    try:
        with pytest.raises(EtcdError, match=r"no complete answer within 1s \(--etcd.timeout"):
            client.status()
        assert time.monotonic() - start < 1.5
    finally:
        stop.set()
        listener.close()


@pytest.mark.integration
def test_a_gzip_bomb_costs_the_cap_of_its_decoded_bytes(proxy):
    bomb = gzip.compress(b" " * (64 << 20), compresslevel=9)  # ~64 KiB on the wire
    hostile(
        proxy,
        r"/v3/maintenance/status",
        status=200,
        body=bomb,
        headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
    )
    client = EtcdClient(new_session(TLSFiles()), proxy.url, timeout=2)
    tracemalloc.start()
    try:
        with pytest.raises(EtcdError, match="STATUS_BYTES"):
            client.status()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak
