"""The informer against a real API server: list paging, events, resume, 410, restarts,
token rotation, and node mode's request budget counted at the API server."""

import logging
import os
import random
import shutil
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kube_scale_exporter import kube
from kube_scale_exporter.kube import informer
from kube_scale_exporter.kube.backoff import Backoff
from testbed.faultproxy import FaultProxy
from testbed.kube_apiserver import etcd_compact, pod_manifest
from testbed.metrics import sample, wait_until

FAST = {"backoff": Backoff(initial=0.1, cap=0.5)}


class Recorder:
    """Collects handler calls (from the informer's thread)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.events = []

    def add(self, obj):
        with self.lock:
            self.events.append(("add", obj["metadata"]["name"]))

    def update(self, old, new):
        with self.lock:
            self.events.append(("update", new["metadata"]["name"]))

    def delete(self, obj):
        with self.lock:
            self.events.append(("delete", obj["metadata"]["name"]))

    def handlers(self):
        return {"on_add": self.add, "on_update": self.update, "on_delete": self.delete}

    def of(self, kind):
        with self.lock:
            return [name for k, name in self.events if k == kind]


def names(informer):
    return sorted(o["metadata"]["name"] for o in informer.items())


def create_pods(api, ns, count, prefix="p", **kw):
    for i in range(count):
        api.admin.create(f"/api/v1/namespaces/{ns}/pods", pod_manifest(f"{prefix}{i}", **kw))


@pytest.mark.unit
def test_backoff_doubles_with_jitter_up_to_the_cap_and_resets():
    lows = Backoff(initial=1.0, cap=30.0, rand=lambda: 0.0)
    assert [lows.next_delay() for _ in range(7)] == [0.5, 1, 2, 4, 8, 15, 15]
    highs = Backoff(initial=1.0, cap=30.0, rand=lambda: 1.0)
    assert [highs.next_delay() for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    highs.reset()
    assert highs.next_delay() == 1
    rng = random.Random(7)
    spread = Backoff(rand=rng.random)
    delays = [spread.next_delay() for _ in range(3)]
    assert 0.5 <= delays[0] <= 1 and 1 <= delays[1] <= 2 and 2 <= delays[2] <= 4


@pytest.mark.integration
def test_paged_list_then_events_in_order(apiserver, namespace, make_client, informers):
    create_pods(apiserver, namespace, 7)
    client = make_client(apiserver)
    lists_before = apiserver.metric_sum("apiserver_request_total", resource="pods", verb="LIST")
    rec = Recorder()
    inf = informers(
        kube.Informer(
            client, kube.PODS, namespace=namespace, page_size=3, watch_list=False, **rec.handlers()
        )
    )
    assert inf.wait_synced(10)
    assert names(inf) == [f"p{i}" for i in range(7)]
    # 7 pods in pages of 3: three LIST requests, one list.
    lists = apiserver.metric_sum("apiserver_request_total", resource="pods", verb="LIST")
    assert lists - lists_before == 3
    assert sorted(rec.of("add")) == [f"p{i}" for i in range(7)]

    base = f"/api/v1/namespaces/{namespace}/pods"
    apiserver.admin.create(base, pod_manifest("late"))
    apiserver.admin.merge_patch(f"{base}/p1/status", {"status": {"phase": "Running"}})
    apiserver.admin.delete(f"{base}/p2")
    assert wait_until(lambda: "p2" in rec.of("delete"), 10)
    assert "late" in rec.of("add") and "p1" in rec.of("update")
    assert inf.get(f"{namespace}/p1")["status"]["phase"] == "Running"
    assert inf.get(f"{namespace}/p2") is None
    assert "managedFields" not in inf.get(f"{namespace}/late")["metadata"]
    h = inf.health()
    assert h.up and h.relists == 0 and h.last_sync_age < 10


@pytest.mark.integration
def test_label_selector_is_applied_by_the_server(apiserver, namespace, make_client, informers):
    create_pods(apiserver, namespace, 2, prefix="in", labels={"role": "balloon"})
    create_pods(apiserver, namespace, 2, prefix="out", labels={"role": "other"})
    inf = informers(kube.Informer(make_client(apiserver), kube.PODS, label_selector="role=balloon"))
    assert inf.wait_synced(10)
    assert [
        o["metadata"]["name"] for o in inf.items() if o["metadata"]["namespace"] == namespace
    ] == ["in0", "in1"]


@pytest.mark.integration
def test_resumes_from_last_resource_version_when_the_server_ends_the_watch(
    apiserver, namespace, make_client, informers
):
    client = make_client(apiserver)
    rec = Recorder()
    inf = informers(
        kube.Informer(
            client, kube.PODS, namespace=namespace, watch_timeout=(1, 1), **FAST, **rec.handlers()
        )
    )
    assert inf.wait_synced(10)
    watches_before = apiserver.metric_sum("apiserver_request_total", resource="pods", verb="WATCH")
    for i in range(4):  # changes spread over several 1-second watches
        apiserver.admin.create(f"/api/v1/namespaces/{namespace}/pods", pod_manifest(f"r{i}"))
        time.sleep(0.7)
    assert wait_until(lambda: len(rec.of("add")) == 4, 10)
    assert wait_until(  # the server closed several watches ...
        lambda: (
            apiserver.metric_sum("apiserver_request_total", resource="pods", verb="WATCH")
            - watches_before
            >= 3
        ),
        10,
    )
    assert inf.health().relists == 0  # ... and each resumed without a list
    assert sorted(rec.of("add")) == ["r0", "r1", "r2", "r3"]  # no event lost or replayed
    assert rec.of("update") == [] and rec.of("delete") == []


@pytest.mark.integration
@pytest.mark.parametrize("watch_list", [False, True], ids=["paged", "streaming"])
def test_relists_after_410_gone_and_delivers_missed_deletions(
    fresh_apiserver, make_client, informers, watch_list, caplog
):
    """The informer's API server is down while, through a second API server on the same
    etcd, a pod is deleted and etcd is compacted: resuming gives 410, and the relist
    (paged, or streamed) reports the deletion it missed."""
    caplog.set_level(logging.INFO, logger="kube_scale_exporter.kube.informer")
    api = fresh_apiserver(watch_cache=False)  # its watches read etcd: compaction bites
    other = fresh_apiserver(etcd=api.etcd)
    ns = "gone"
    api.admin.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    create_pods(api, ns, 3)
    rec = Recorder()
    inf = informers(
        kube.Informer(
            make_client(api),
            kube.PODS,
            namespace=ns,
            watch_list=watch_list,
            **FAST,
            **rec.handlers(),
        )
    )
    assert inf.wait_synced(10)
    synced_rv = int(inf.resource_version)
    api.stop()
    assert wait_until(lambda: not inf.health().up, 10)
    other.admin.delete(f"/api/v1/namespaces/{ns}/pods/p0")
    assert etcd_compact(api.etcd.client_url) > synced_rv
    api.start()
    assert wait_until(lambda: inf.health().relists == 1, 15), inf.health()
    assert wait_until(lambda: "p0" in rec.of("delete"), 10)
    assert names(inf) == ["p1", "p2"]
    streamed = [r for r in caplog.records if "from a streaming list" in r.getMessage()]
    assert len(streamed) == (2 if watch_list else 0)  # the relist streamed, as the list did
    assert inf.watch_list == watch_list
    assert sorted(rec.of("add")) == ["p0", "p1", "p2"]  # the relist re-added nothing
    api.admin.create(f"/api/v1/namespaces/{ns}/pods", pod_manifest("after"))
    assert wait_until(lambda: names(inf) == ["after", "p1", "p2"], 10)
    assert inf.health().up and inf.health().relists == 1


@pytest.mark.integration
def test_node_mode_relist_after_410_waits_its_jitter(fresh_apiserver, make_client, informers):
    """A 410 for every node's informer at once (here: one) must not relist at once: the
    relist waits its random share of the jitter, the cache serving what it held."""
    api = fresh_apiserver(watch_cache=False)  # its watches read etcd: compaction bites
    other = fresh_apiserver(etcd=api.etcd)
    node = "jitter-node"
    ns = "jitter"
    api.admin.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    create_pods(api, ns, 2, node=node)
    # The draw at its top: the relist comes 8 s after the 410 (which can come while
    # api.start() still waits for readiness).
    inf = informers(
        kube.for_node(
            make_client(api), kube.PODS, node, relist_jitter=8.0, rand=lambda: 1.0, **FAST
        )
    )
    assert inf.wait_synced(10)
    assert inf.relist_jitter == 8.0
    api.stop()
    other.admin.delete(f"/api/v1/namespaces/{ns}/pods/p0")
    etcd_compact(api.etcd.client_url)
    api.start()
    # Resuming gives 410 within the backoff (0.5 s at most); the relist waits 8 s more.
    assert not wait_until(lambda: inf.health().relists == 1, 1.5)
    assert names(inf) == ["p0", "p1"]  # meanwhile the cache serves what it had
    assert wait_until(lambda: inf.health().relists == 1, 15), inf.health()
    assert names(inf) == ["p1"]


@pytest.mark.unit
def test_node_mode_relists_are_jittered_by_default():
    inf = kube.for_node(None, kube.PODS, "n1")
    assert inf.relist_jitter == informer.NODE_RELIST_JITTER_SECONDS > 0
    assert kube.Informer(None, kube.PODS).relist_jitter == 0  # cluster mode: one informer


@pytest.mark.integration
def test_a_continue_token_expired_mid_list_lists_again_from_the_start(
    fresh_apiserver, make_client, informers
):
    """Pages of 2, decoded as they stream: while the first page is read, a pod is created
    and etcd compacted past the list's resourceVersion, so the second page's continue
    token gets the real server's 410 Expired; the informer lists again from the start and
    ends with every pod, the late one too. Without the watch cache: 1.34 serves a paged
    list from a snapshot of its cache (ListFromCacheSnapshot), whose continue tokens a
    compaction does not expire."""
    api = fresh_apiserver(watch_cache=False)
    ns = "expired"
    api.admin.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    create_pods(api, ns, 5)
    compacted = []

    def compact_once(pod):
        if not compacted:
            api.admin.create(f"/api/v1/namespaces/{ns}/pods", pod_manifest("late"))
            compacted.append(etcd_compact(api.etcd.client_url))
        return pod

    expired_before = api.metric_sum("apiserver_request_total", resource="pods", code="410")
    inf = informers(
        kube.Informer(
            make_client(api),
            kube.PODS,
            namespace=ns,
            page_size=2,
            transform=compact_once,
            watch_list=False,
            **FAST,
        )
    )
    assert inf.wait_synced(15)
    assert names(inf) == ["late", "p0", "p1", "p2", "p3", "p4"]
    expired = api.metric_sum("apiserver_request_total", resource="pods", code="410")
    assert expired - expired_before == 1  # the continue, refused once
    assert inf.health().up


@pytest.mark.integration
def test_recovers_after_the_api_server_restarts(fresh_apiserver, make_client, informers):
    api = fresh_apiserver()
    client = make_client(api)
    inf = informers(kube.Informer(client, kube.PODS, namespace="default", **FAST))
    assert inf.wait_synced(10)
    api.stop()
    assert wait_until(lambda: not inf.health().up, 10)
    api.start()
    api.admin.create("/api/v1/namespaces/default/pods", pod_manifest("after-restart"))
    assert wait_until(lambda: names(inf) == ["after-restart"], 20)
    assert wait_until(lambda: inf.health().up, 10)


def _service_account_token(api, ns, sa, secret):
    """A TokenRequest token bound to a Secret: deleting the Secret revokes the token."""
    made = api.admin.create(f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": secret}})
    req = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": ["https://kubernetes.default.svc"],
            "expirationSeconds": 3600,
            "boundObjectRef": {
                "kind": "Secret",
                "apiVersion": "v1",
                "name": secret,
                "uid": made["metadata"]["uid"],
            },
        },
    }
    out = api.admin.create(f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", req)
    return out["status"]["token"]


def _reader_sa(api, ns):
    api.admin.create(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "reader"}})
    api.admin.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}],
        },
    )
    api.admin.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        {
            "metadata": {"name": "pod-reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
        },
    )


def _status(api, token, path):
    try:
        api.user(token).get(path)
        return 200
    except AssertionError as e:
        return int(str(e).split(": ", 1)[1].split()[0])


def _in_cluster_client(api, sa_dir):
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(api.port)}
    return kube.KubeClient(kube.config.in_cluster(sa_dir=str(sa_dir), environ=env))


@pytest.mark.integration
def test_rotated_token_file_is_picked_up(apiserver, namespace, tmp_path, informers):
    """The kubelet swaps the projected token file; the next request uses the new token."""
    _reader_sa(apiserver, namespace)
    old = _service_account_token(apiserver, namespace, "reader", "s-old")
    new = _service_account_token(apiserver, namespace, "reader", "s-new")
    sa = tmp_path / "sa"
    sa.mkdir()
    shutil.copy(apiserver.ca, sa / "ca.crt")
    (sa / "token").write_text(old)
    client = _in_cluster_client(apiserver, sa)
    inf = informers(
        kube.Informer(client, kube.PODS, namespace=namespace, watch_timeout=(1, 1), **FAST)
    )
    assert inf.wait_synced(10)
    # Rotate like the kubelet (a new file moved into place), then revoke the old token.
    (sa / "token.new").write_text(new)
    os.replace(sa / "token.new", sa / "token")
    apiserver.admin.delete(f"/api/v1/namespaces/{namespace}/secrets/s-old")
    path = f"/api/v1/namespaces/{namespace}/pods"
    assert wait_until(lambda: _status(apiserver, old, path) == 401, 20)  # old one revoked
    apiserver.admin.create(path, pod_manifest("seen"))
    assert wait_until(lambda: names(inf) == ["seen"], 10)
    time.sleep(2.5)  # more 1-second watches, all with the new token
    assert inf.health().up
    client.close()


@pytest.mark.integration
def test_401_makes_the_client_read_the_token_again(apiserver, namespace, tmp_path):
    """A rewrite the file's stamp cannot show (same inode, size and mtime) is caught by 401."""
    _reader_sa(apiserver, namespace)
    old = _service_account_token(apiserver, namespace, "reader", "s-a")
    new = _service_account_token(apiserver, namespace, "reader", "s-b")
    width = max(len(old), len(new))
    sa = tmp_path / "sa"
    sa.mkdir()
    shutil.copy(apiserver.ca, sa / "ca.crt")
    token_file = sa / "token"
    token_file.write_text(old.ljust(width))
    client = _in_cluster_client(apiserver, sa)
    path = f"/api/v1/namespaces/{namespace}/pods"
    assert client.get(path)["items"] == []
    st = os.stat(token_file)
    with open(token_file, "r+") as f:  # same inode and size ...
        f.write(new.ljust(width))
    os.utime(token_file, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and mtime
    apiserver.admin.delete(f"/api/v1/namespaces/{namespace}/secrets/s-a")
    # The API server caches good token reviews for 10 s: wait until the old one is refused.
    assert wait_until(lambda: _status(apiserver, old, path) == 401, 20)
    assert client.config.token.get() == old  # the stamp did not change: still cached
    assert client.get(path)["items"] == []  # 401, re-read, retried with the new token
    assert client.config.token.get() == new
    client.close()


@pytest.mark.integration
def test_node_mode_steady_state_is_one_list_and_one_watch(
    apiserver, namespace, make_client, informers
):
    """Counted at the API server: node mode costs one LIST and one open WATCH, however
    many changes flow, and the cache holds only this node's pods."""
    base = f"/api/v1/namespaces/{namespace}/pods"
    node = f"node-{namespace}"
    create_pods(apiserver, namespace, 3, prefix="mine", node=node)
    create_pods(apiserver, namespace, 3, prefix="other", node=f"elsewhere-{namespace}")

    def counts():
        return (
            apiserver.metric_sum("apiserver_request_total", resource="pods", verb="LIST"),
            apiserver.metric_sum("apiserver_request_total", resource="pods", verb="WATCH"),
            apiserver.metric_sum("apiserver_longrunning_requests", resource="pods", verb="WATCH"),
        )

    def from_cache():
        # 1.37 counts the watch cache's lists in apiserver_storage_list_total{storage=
        # "watchcache"} and hides apiserver_cache_list_total (deprecated); 1.35 has only that.
        by_index = {"resource": "pods", "index": "f:spec.nodeName"}
        served = apiserver.metric_sum(
            "apiserver_storage_list_total", storage="watchcache", **by_index
        )
        return served or apiserver.metric_sum("apiserver_cache_list_total", **by_index)

    def etcd_pod_lists():
        text = apiserver.admin.request("GET", "/metrics")
        return sum(
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "etcd_requests_total"
            and s.labels.get("resource") == "pods"
            and "list" in s.labels.get("operation", "").lower()
        )

    before, cached_before, etcd_before = counts(), from_cache(), etcd_pod_lists()
    rec = Recorder()
    inf = informers(kube.for_node(make_client(apiserver), kube.PODS, node, **rec.handlers()))
    assert inf.wait_synced(10)
    for i in range(3):
        apiserver.admin.merge_patch(f"{base}/mine{i}/status", {"status": {"phase": "Running"}})
        apiserver.admin.merge_patch(f"{base}/other{i}/status", {"status": {"phase": "Running"}})
    apiserver.admin.create(base, pod_manifest("mine-late", node=node))
    apiserver.admin.delete(f"{base}/mine0")
    assert wait_until(lambda: "mine0" in rec.of("delete"), 10)
    time.sleep(3)
    lists, watches_done, watches_open = (a - b for a, b in zip(counts(), before, strict=True))
    assert (lists, watches_done, watches_open) == (1, 0, 1)
    # The list came from the watch cache through its spec.nodeName index, never from etcd:
    # 7,500 of these at a DaemonSet rollout read nothing from etcd.
    assert from_cache() - cached_before == 1
    assert etcd_pod_lists() == etcd_before
    assert inf.health().relists == 0
    assert sorted(o["metadata"]["name"] for o in inf.items()) == ["mine-late", "mine1", "mine2"]
    assert {"mine1", "mine2"} <= set(rec.of("update")) <= {"mine0", "mine1", "mine2"}
    assert not [n for n in rec.events if n[1].startswith("other")]


@pytest.mark.integration
def test_node_mode_needs_a_node_name(apiserver, make_client):
    with pytest.raises(ValueError, match="NODE_NAME"):
        kube.for_node(make_client(apiserver), kube.PODS, "")


@pytest.mark.integration
def test_stop_interrupts_a_blocked_watch_promptly(apiserver, namespace, make_client):
    inf = kube.Informer(make_client(apiserver), kube.PODS, namespace=namespace).start()
    assert inf.wait_synced(10)
    time.sleep(0.3)  # now blocked reading a quiet watch
    start = time.monotonic()
    inf.stop()
    assert time.monotonic() - start < 2
    assert not inf._thread.is_alive()


@pytest.mark.integration
def test_health_families(apiserver, namespace, make_client, informers):
    inf = informers(kube.Informer(make_client(apiserver), kube.PODS, namespace=namespace))
    assert inf.wait_synced(10)
    fams = kube.health_families([inf])
    assert sample(fams, "kubescale_kube_watch_up", resource="pods") == 1
    assert sample(fams, "kubescale_kube_relists_total", resource="pods") == 0
    assert 0 <= sample(fams, "kubescale_kube_last_sync_age_seconds", resource="pods") < 10


@pytest.fixture
def proxied(apiserver, make_client):
    """A client that reaches the API server through a fault-injecting proxy."""
    proxy = FaultProxy(
        apiserver.server,
        upstream_verify=apiserver.ca,
        certfile=apiserver.ca,
        keyfile=apiserver.serving_key,
    ).start()
    yield proxy, make_client(apiserver, server=proxy.url)
    proxy.stop()


@pytest.mark.integration
def test_a_watch_hung_before_answering_times_out_and_recovers(
    apiserver, namespace, proxied, informers
):
    proxy, client = proxied
    inf = informers(
        kube.Informer(
            client, kube.PODS, namespace=namespace, watch_timeout=(1, 1), read_timeout=1.0, **FAST
        )
    )
    assert inf.wait_synced(10)
    proxy.inject(r"watch=1", hang=True)
    assert wait_until(lambda: not inf.health().up, 10)  # the read timeout fired
    proxy.clear()
    apiserver.admin.create(f"/api/v1/namespaces/{namespace}/pods", pod_manifest("back"))
    assert wait_until(lambda: names(inf) == ["back"] and inf.health().up, 10)
    assert inf.health().relists == 0


@pytest.mark.integration
def test_watches_closed_at_once_back_off_instead_of_spinning(
    apiserver, namespace, proxied, informers
):
    proxy, client = proxied
    proxy.inject(r"watch=1", status=200, headers={"Content-Type": "application/json"})
    inf = informers(
        kube.Informer(client, kube.PODS, namespace=namespace, backoff=Backoff(initial=0.2, cap=0.4))
    )
    assert inf.wait_synced(10)
    start = time.monotonic()
    # Each empty watch waits 0.1-0.4 s: at most ~12 in 2 s (thousands without the backoff).
    # At least 3 are waited for (a loaded machine slows them), the most counted in 2 s.
    assert wait_until(lambda: proxy.count(r"watch=1") >= 3, 20)
    time.sleep(max(0.0, start + 2 - time.monotonic()))
    watches = sum(
        1 for _, path, _, t in list(proxy.requests) if "watch=1" in path and t <= start + 2
    )
    assert watches <= 14, watches
    proxy.clear()
    apiserver.admin.create(f"/api/v1/namespaces/{namespace}/pods", pod_manifest("ok"))
    assert wait_until(lambda: names(inf) == ["ok"], 10)


@pytest.mark.integration
def test_a_silent_watch_is_resumed_without_an_error(
    apiserver, namespace, make_client, informers, caplog
):
    """No event and no bookmark within the read timeout: resume from the last RV, quietly."""
    inf = informers(
        kube.Informer(
            make_client(apiserver), kube.PODS, namespace=namespace, read_timeout=1.0, **FAST
        )
    )
    assert inf.wait_synced(10)
    caplog.set_level("INFO", logger="kube_scale_exporter.kube.informer")
    downs = 0
    deadline = time.monotonic() + 3.5
    while time.monotonic() < deadline:
        downs += not inf.health().up
        time.sleep(0.05)
    resumed = [r for r in caplog.records if "silent" in r.getMessage()]
    assert len(resumed) >= 2 and downs == 0
    apiserver.admin.create(f"/api/v1/namespaces/{namespace}/pods", pod_manifest("heard"))
    assert wait_until(lambda: names(inf) == ["heard"], 10)
    assert inf.health().relists == 0


@pytest.mark.integration
def test_bookmarks_carry_a_quiet_node_watch_forward(apiserver, namespace, make_client, informers):
    """Nothing happens on this node while the cluster changes: BOOKMARKs move the
    informer's resourceVersion forward anyway, so resuming never falls behind into 410."""
    node = f"quiet-{namespace}"
    inf = informers(
        kube.for_node(make_client(apiserver), kube.PODS, node, watch_timeout=(10, 10), **FAST)
    )
    assert inf.wait_synced(10)
    start_rv = int(inf.resource_version)
    made = apiserver.admin.create(
        f"/api/v1/namespaces/{namespace}/pods", pod_manifest("elsewhere", node=f"busy-{namespace}")
    )
    cluster_rv = int(made["metadata"]["resourceVersion"])
    assert cluster_rv > start_rv
    # The server sends a bookmark 2 s before it ends each 10-second watch (only if it
    # registered the watch before then: a slow, loaded server can miss one cycle).
    assert wait_until(lambda: int(inf.resource_version) >= cluster_rv, 35), (
        inf.resource_version,
        cluster_rv,
    )
    assert inf.items() == [] and inf.health().relists == 0


@pytest.mark.integration
def test_health_reports_informers_of_one_resource_together(
    apiserver, namespace, make_client, informers, tmp_path
):
    good = informers(kube.Informer(make_client(apiserver), kube.PODS, namespace=namespace))
    assert good.wait_synced(10)
    dead_config = kube.load(
        apiserver.write_kubeconfig(tmp_path / "dead", server="https://127.0.0.1:1")
    )
    dead = informers(kube.Informer(kube.KubeClient(dead_config), kube.PODS, **FAST))
    fams = kube.health_families([good, dead])
    assert sample(fams, "kubescale_kube_watch_up", resource="pods") == 0  # not all up
    with pytest.raises(KeyError):  # one has never synced: no age to show
        sample(fams, "kubescale_kube_last_sync_age_seconds", resource="pods")
    # The scrape source sees the informers the collectors hand it, each collector's own.
    source = kube.watch_health([Watching(good), Watching(dead)])
    assert sample(source(), "kubescale_kube_watch_up", resource="pods") == 0
    assert kube.watch_health([Watching()])() == []  # no watch: no kube series at all
    assert sample(kube.health_families([good]), "kubescale_kube_watch_up", resource="pods") == 1


class Watching:
    """What a collector hands the scrape: the informers it runs."""

    def __init__(self, *informers):
        self._informers = list(informers)

    def informers(self):
        return self._informers


@pytest.mark.unit
@pytest.mark.parametrize(
    "event",
    [
        [],
        5,
        {"type": "ADDED", "object": []},
        {"type": "ADDED"},
        {"type": "MODIFIED", "object": {"metadata": []}},
        {"type": "DELETED", "object": {"metadata": {"name": ["x"]}}},
    ],
)
def test_a_malformed_watch_event_is_a_value_error_and_changes_nothing(event):
    """Found by fuzz/kube_watch.py: an event that is not an object, or whose object has no
    string metadata.name, raised AttributeError, KeyError or TypeError; the informer
    counts ValueError as a bad stream (re-watch, logged without a traceback)."""
    informer = kube.Informer(None, kube.PODS)
    good = {
        "type": "ADDED",
        "object": {"metadata": {"name": "a", "namespace": "n", "resourceVersion": "7"}},
    }
    informer._apply(good)
    with pytest.raises(ValueError, match="not one|without a name"):
        informer._apply(event)
    assert list(informer._items) == ["n/a"] and informer.resource_version == "7"
