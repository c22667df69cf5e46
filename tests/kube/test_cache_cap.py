"""The informer's cap on cached objects and the field projection, on the real API server:
past the cap the cache is dropped and said so, and a shrink brings it back."""

import logging

import pytest

from kube_scale_exporter import kube
from kube_scale_exporter.kube.backoff import Backoff
from testbed.kube_apiserver import pod_manifest
from testbed.metrics import wait_until

from .test_informer import Recorder, create_pods, names

FAST = {"backoff": Backoff(initial=0.1, cap=0.5), "full_retry": 0.5}


def _full_logs(caplog):
    return [r for r in caplog.records if "to cache" in r.getMessage()]


PAGED_OR_STREAMING = pytest.mark.parametrize(
    "watch_list", [False, True], ids=["paged", "streaming"]
)


@pytest.mark.integration
@PAGED_OR_STREAMING
def test_a_list_past_the_cap_drops_the_cache_until_the_namespace_shrinks(
    apiserver, namespace, make_client, informers, caplog, watch_list
):
    caplog.set_level(logging.WARNING, logger="kube_scale_exporter.kube.informer")
    create_pods(apiserver, namespace, 6)
    rec = Recorder()
    inf = informers(
        kube.Informer(
            make_client(apiserver),
            kube.PODS,
            namespace=namespace,
            page_size=2,
            max_objects=5,
            watch_list=watch_list,
            **FAST,
            **rec.handlers(),
        )
    )
    assert inf.wait_synced(10)  # the cap is known at once, not at a timeout
    with pytest.raises(kube.CacheFull, match="more than 5 pods"):
        inf.check_cache()
    assert inf.items() == [] and not inf.health().up
    # Lists are retried (every 0.5 s here): the error is logged once, not per retry. A
    # paged list stops after its third page; a streaming list (a WATCH) at its sixth pod.
    verb = "WATCH" if watch_list else "LIST"
    lists = apiserver.metric_sum("apiserver_request_total", resource="pods", verb=verb)
    assert wait_until(
        lambda: (
            apiserver.metric_sum("apiserver_request_total", resource="pods", verb=verb)
            >= lists + (2 if watch_list else 6)
        ),
        10,
    )
    assert len(_full_logs(caplog)) == 1
    assert rec.of("add") == []  # nothing half-listed reached the handlers

    apiserver.admin.delete(f"/api/v1/namespaces/{namespace}/pods/p0")
    assert wait_until(lambda: inf.cache_full is None, 10)
    inf.check_cache()
    assert names(inf) == [f"p{i}" for i in range(1, 6)]
    assert inf.health().up
    assert rec.of("add") == []  # the list after the drop is a new start
    apiserver.admin.delete(f"/api/v1/namespaces/{namespace}/pods/p1")
    assert wait_until(lambda: rec.of("delete") == ["p1"], 10)  # watching again
    assert any("within the cap of 5 again" in r.getMessage() for r in caplog.records)
    assert inf.watch_list == watch_list  # the cap is no reason to stop streaming


@pytest.mark.integration
@PAGED_OR_STREAMING
def test_a_watch_past_the_cap_drops_the_cache_and_it_recovers(
    apiserver, namespace, make_client, informers, caplog, watch_list
):
    caplog.set_level(logging.WARNING, logger="kube_scale_exporter.kube.informer")
    create_pods(apiserver, namespace, 3)
    inf = informers(
        kube.Informer(
            make_client(apiserver),
            kube.PODS,
            namespace=namespace,
            max_objects=4,
            watch_list=watch_list,
            **FAST,
        )
    )
    assert inf.wait_synced(10) and len(inf.items()) == 3
    base = f"/api/v1/namespaces/{namespace}/pods"
    apiserver.admin.create(base, pod_manifest("fourth"))
    assert wait_until(lambda: len(inf.items()) == 4, 10)
    apiserver.admin.merge_patch(f"{base}/fourth/status", {"status": {"phase": "Running"}})
    assert wait_until(lambda: inf.get(f"{namespace}/fourth")["status"]["phase"] == "Running", 10)
    inf.check_cache()  # updates at the cap are no new objects
    apiserver.admin.create(base, pod_manifest("fifth"))
    assert wait_until(lambda: inf.cache_full is not None, 10)
    assert inf.items() == [] and len(_full_logs(caplog)) == 1
    for name in ("p0", "p1"):
        apiserver.admin.delete(f"{base}/{name}")
    assert wait_until(lambda: inf.cache_full is None, 10)
    assert names(inf) == ["fifth", "fourth", "p2"]


BALLOON_FIELDS = kube.Fields({"spec": {"containers": {"resources": ("requests",)}}})


@pytest.mark.integration
@PAGED_OR_STREAMING
def test_fields_keep_what_is_declared_from_list_and_watch(
    apiserver, namespace, make_client, informers, watch_list
):
    create_pods(apiserver, namespace, 1, requests={"cpu": "2"}, labels={"a": "b"})
    inf = informers(
        kube.Informer(
            make_client(apiserver),
            kube.PODS,
            namespace=namespace,
            transform=BALLOON_FIELDS,
            watch_list=watch_list,
        )
    )
    assert inf.wait_synced(10)
    apiserver.admin.create(
        f"/api/v1/namespaces/{namespace}/pods", pod_manifest("w", requests={"memory": "1Gi"})
    )
    assert wait_until(lambda: inf.get(f"{namespace}/w") is not None, 10)
    listed, watched = inf.get(f"{namespace}/p0"), inf.get(f"{namespace}/w")
    for pod in (listed, watched):
        assert set(pod) == {"metadata", "spec"}  # no status, no apiVersion/kind
        assert set(pod["metadata"]) == {"name", "namespace", "uid", "resourceVersion"}
        assert [set(c) for c in pod["spec"]["containers"]] == [{"resources"}]
    assert listed["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "2"}}
    assert watched["spec"]["containers"][0]["resources"] == {"requests": {"memory": "1Gi"}}
