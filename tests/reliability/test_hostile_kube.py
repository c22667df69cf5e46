"""Hostile Kubernetes input under a real cluster-mode exporter.

Watch streams: the real API server only sends well-formed events, so the fault proxy
answers one pods watch with a malformed stream (junk lines, objects missing fields or of
the wrong type, a bookmark with a resourceVersion the server never issued, huge values).
After it the exporter must still answer, and the pods watch must come back on its own with
the collector succeeding: a bad event may cost one re-watch, never the cache for good.

Event messages: anyone allowed to create events can write a Pulled event; one with an
absurd duration goes through the real API server to the imagepull_events histograms.
"""

import json
import math
import socket
import threading
import time

import pytest

from kube_scale_exporter import httpclient
from kube_scale_exporter.kube.client import MAX_WATCH_LINE, KubeClient
from kube_scale_exporter.kube.config import KubeConfig, load
from testbed.faultproxy import drip, endless, repeat
from testbed.procs import rss_mib
from tests.reliability.conftest import COLLECTORS, WATCH

RECOVERY_SECONDS = 30
HUGE = "x" * 2_000_000


def pod_event(kind, **overrides):
    """A pod event carrying no resourceVersion: the informer keeps resuming from the real
    one, so the outcome does not hang on whether the server still holds it (410)."""
    obj = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": "hostile",
            "namespace": "default",
            "labels": {"run": "overprovisioning"},
            "creationTimestamp": "2030-01-01T00:00:00Z",
        },
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Pending"},
    }
    obj.update(overrides)
    return {"type": kind, "object": obj}


def lines(*events):
    return b"".join((e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n" for e in events)


STREAMS = {
    "not-json": lines(b"{not json", b"\xff\xfe"),
    "no-object": lines({"type": "ADDED"}, {"type": "MODIFIED", "object": None}),
    "no-name": lines(pod_event("ADDED", metadata={"namespace": "default"})),
    "unknown-type-and-fields": lines(
        {"type": "SURPRISE", "object": {"x": 1}}, pod_event("ADDED", future={"field": [1, 2]})
    ),
    "error-500": lines({"type": "ERROR", "object": {"kind": "Status", "code": 500}}),
    "huge-label": lines(
        pod_event(
            "ADDED",
            metadata={
                "name": "huge",
                "namespace": "default",
                "labels": {"run": HUGE},
                "creationTimestamp": "2030-01-01T00:00:00Z",
            },
        )
    ),
    "wrong-types": lines(pod_event("ADDED", spec="junk", status=["junk"])),
    "bad-quantity": lines(
        pod_event(
            "ADDED",
            spec={"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]},
        )
    ),
    "bookmark-with-junk-version": lines(
        {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "junk"}}}
    ),
}


@pytest.mark.integration
@pytest.mark.parametrize("name", list(STREAMS))
def test_a_malformed_watch_stream_costs_at_most_a_rewatch(proxy, cluster_exporter, name):
    proxy.inject(
        WATCH, status=200, body=STREAMS[name], headers={"Content-Type": "application/json"}, times=1
    )
    proxy.cut_streams(WATCH)
    assert proxy_answered(proxy, 10), "the informer did not watch again"
    scrape = cluster_exporter.wait_for(
        lambda s: (
            all(s.success.get(c) == 1 for c in COLLECTORS)
            and s.value("kubescale_kube_watch_up", resource="pods") == 1
            and time.monotonic() > settled_after(proxy)
        ),
        within=RECOVERY_SECONDS,
    )
    assert len(scrape.text) < 1_000_000  # nothing of the huge value reached the exposition


def proxy_answered(proxy, within):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not proxy._faults:  # the injected answer was taken
            return True
        time.sleep(0.1)
    return False


def settled_after(proxy):
    """Three seconds after the last pods watch request: long enough to see a
    re-watch fail again (the first retry waits 0.5-1 s)."""
    with proxy._lock:
        last = max(t for _, path, _, t in proxy.requests if "watch=1" in path and "/pods" in path)
    return last + 3


@pytest.mark.integration
def test_an_absurd_pulled_event_through_the_api_server(cluster, cluster_exporter):
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1))
    for i, message in enumerate(
        [
            'Successfully pulled image "x" in ' + "9" * 400 + "h",
            'Successfully pulled image "y" in 2.5s (3s including waiting)',
        ]
    ):
        cluster.admin.create(
            "/api/v1/namespaces/default/events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"pulled-{time.time_ns()}-{i}", "namespace": "default"},
                "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p"},
                "reason": "Pulled",
                "message": message,
                "type": "Normal",
                "count": 1,
                "firstTimestamp": now,
                "lastTimestamp": now,
            },
        )
    scrape = cluster_exporter.wait_for(
        lambda s: (s.value("kubescale_image_pull_duration_seconds_count") or 0) >= 1, within=15
    )
    assert math.isfinite(scrape.value("kubescale_image_pull_duration_seconds_sum"))


# ---- replies by size and pace ----------------------------------------------------------

SLACK_MIB = 6.0  # what scrapes, thread stacks and logging may add to the peak
LIST = r"/api/v1/pods\?(?!.*watch=1)"


def peak_mib(exporter):
    return rss_mib(exporter.proc.pid)[1]


def watch_down_naming(exporter, cap):
    exporter.wait_for(
        lambda s: s.value("kubescale_kube_watch_up", resource="pods") == 0, within=RECOVERY_SECONDS
    )
    exporter.wait_for(lambda s: cap in exporter.proc.log_tail(300), within=RECOVERY_SECONDS)


def watch_back(exporter, proxy):
    proxy.clear()
    proxy.cut_streams(WATCH)
    exporter.wait_for(
        lambda s: (
            all(s.success.get(c) == 1 for c in COLLECTORS)
            and s.value("kubescale_kube_watch_up", resource="pods") == 1
        ),
        within=RECOVERY_SECONDS,
    )


@pytest.mark.integration
@pytest.mark.parametrize(
    "line",
    [b'{"type":"ADDED","object":{"metadata":{"name":"' + b"x" * 90, b"x" * 100],
    ids=["endless-object", "endless-junk"],
)
def test_an_endless_watch_line_costs_its_cap(proxy, cluster_exporter, line):
    before = peak_mib(cluster_exporter)
    proxy.inject(
        WATCH,
        status=200,
        chunks=lambda: endless(line),
        headers={"Content-Type": "application/json"},
    )
    proxy.cut_streams(WATCH)
    watch_down_naming(cluster_exporter, "MAX_WATCH_LINE")
    time.sleep(2)  # a re-watch or two more against the same reply
    grew = peak_mib(cluster_exporter) - before
    print(f"endless watch line: peak +{grew:.1f} MiB")
    assert grew < MAX_WATCH_LINE / 2**20 + SLACK_MIB
    watch_back(cluster_exporter, proxy)


# Hostile list pages (the informer lists again after a 410 on its watch): each is refused
# with an error naming its cap, and a page costs about one object whatever its size, since
# items are decoded one at a time as they stream (kube/listing.py).
def page(head, chunks):
    yield head
    yield from chunks


def whole(piece):
    """`piece` for ever, in blocks of whole pieces: the JSON stays valid."""
    return endless(piece, size=len(piece) * (65536 // len(piece)))


ITEMS = b'{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":['
# (reply, words of the error, peak RSS growth allowed in MiB). The allowances are the
# growth measured on the project's 2-core machine under load plus headroom; the figures
# are in docs/reliability.md ("Hostile input"). Before the page was decoded as it
# streamed, the chunked 400 MiB page cost +32.2 MiB (its cap, MAX_REPLY_BYTES).
PAGES = {
    # 400 MiB of whitespace inside the items array, declared and chunked: whitespace is
    # read, never kept, and refused past MAX_ITEM_BYTES (measured +0.2 / +0.4 MiB).
    "400MiB-declared": (
        dict(chunks=lambda: page(ITEMS, repeat(b" " * 100, 400 << 20)), length=400 << 20),
        "MAX_ITEM_BYTES",
        SLACK_MIB,
    ),
    "400MiB-chunked": (
        dict(chunks=lambda: page(ITEMS, repeat(b" " * 100, 400 << 20))),
        "MAX_ITEM_BYTES",
        SLACK_MIB,
    ),
    # One item that never ends: its pieces are kept, not copied, up to the 4 MiB
    # MAX_ITEM_BYTES (measured +4.2 MiB; +12.2 while it was parsed again as it grew).
    "endless-item": (
        dict(chunks=lambda: page(ITEMS + b'{"metadata":{"name":"', endless(b"x" * 100))),
        "MAX_ITEM_BYTES",
        4 + SLACK_MIB,
    ),
    # Valid small pods for ever, where the page asked for limit=500 (measured +0.4 MiB).
    "endless-items": (
        dict(
            chunks=lambda: page(ITEMS, whole(b'{"metadata":{"name":"x","namespace":"default"}},'))
        ),
        "limit=500 was asked",
        SLACK_MIB,
    ),
    # An item of empty objects: 4 MiB of them would decode to ~100 MiB; counted as they
    # arrive and refused before they are decoded (measured +3.3 MiB).
    "tiny-values": (
        dict(chunks=lambda: page(ITEMS + b'{"a":[', whole(b"{},"))),
        "MAX_OBJECT_VALUES",
        SLACK_MIB,
    ),
    # Objects nested for ever: the decoder's recursion limit (measured +0.2 MiB).
    "nested": (dict(chunks=lambda: page(ITEMS, whole(b'{"a":'))), "recursion depth", SLACK_MIB),
}


@pytest.mark.integration
@pytest.mark.parametrize("page", list(PAGES))
def test_a_hostile_list_page_costs_about_one_object(proxy, cluster_exporter, page):
    answer, cap, allowed_mib = PAGES[page]
    before = peak_mib(cluster_exporter)
    # A 410 on the watch makes the informer list again; the list is the hostile reply.
    proxy.inject(WATCH, status=410, body=b'{"kind":"Status","code":410,"reason":"Gone"}')
    proxy.inject(LIST, status=200, headers={"Content-Type": "application/json"}, **answer)
    proxy.cut_streams(WATCH)
    watch_down_naming(cluster_exporter, cap)
    time.sleep(2)  # a relist or two more against the same reply
    grew = peak_mib(cluster_exporter) - before
    print(f"hostile list page {page}: peak +{grew:.1f} MiB")
    assert grew < allowed_mib
    watch_back(cluster_exporter, proxy)


@pytest.mark.integration
def test_a_dripping_list_ends_at_the_request_timeout(cluster, proxy, workdir):
    config = load(cluster.write_kubeconfig(f"{workdir}/kubeconfig", server=proxy.url))
    client = KubeClient(config, request_timeout=1.0)
    proxy.inject(
        LIST,
        status=200,
        chunks=lambda: drip(b'{"items": []}', every=0.3),
        headers={"Content-Type": "application/json"},
    )
    start = time.monotonic()
    with pytest.raises(httpclient.Timeout, match="no complete answer within 1s"):
        client.get("/api/v1/pods", {"limit": "500"})
    assert time.monotonic() - start < 2.0
    proxy.clear()
    assert "items" in client.get("/api/v1/pods", {"limit": "1"})


@pytest.mark.unit
def test_watch_headers_dripping_end_at_the_read_timeout():
    """Watches stay open for minutes, bounded per read; their headers are bounded in all."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def serve():
        conn, _ = listener.accept()
        with conn:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" * 100:
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.2)

    threading.Thread(target=serve, daemon=True).start()
    client = KubeClient(KubeConfig(server=f"http://127.0.0.1:{listener.getsockname()[1]}"))
    start = time.monotonic()
    try:
        with pytest.raises(httpclient.TransportError):
            client.watch("/api/v1/pods", {}, read_timeout=1.0)
        assert time.monotonic() - start < 1.5
    finally:
        listener.close()
