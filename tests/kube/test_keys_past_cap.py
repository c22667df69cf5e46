"""A store that keeps the keys of the objects past its cap (`keys_past_cap`): it caches
max_objects of them, counts the rest by key, and the two stay a true count of what exists
through ADDED, MODIFIED and DELETED events and relists (paged, streamed, after a 410).
Unit tests of the store and a list's split; then the informer on the real API server."""

import random

import pytest

from kube_scale_exporter import kube
from kube_scale_exporter.kube.backoff import Backoff
from kube_scale_exporter.kube.listing import Fresh, InitialEvents
from kube_scale_exporter.kube.store import Store
from testbed.kube_apiserver import etcd_compact, pod_manifest
from testbed.metrics import wait_until

from .test_informer import Recorder, create_pods


def obj(name, rv="1", ns="ns"):
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv}}


def store(cap=3, **handlers):
    return Store("/api/v1/pods", "pods", max_objects=cap, keys_past_cap=True, **handlers)


def split(s):
    cached, past = s.snapshot()
    return sorted(o["metadata"]["name"] for o in cached), sorted(k.split("/")[1] for k in past)


@pytest.mark.unit
def test_past_the_cap_objects_are_counted_by_key_and_handlers_see_only_the_cached():
    rec = Recorder()
    s = store(**rec.handlers())
    s.replace({})
    for name in "abcde":
        s.apply("ADDED", obj(name))
    assert split(s) == (["a", "b", "c"], ["d", "e"])
    s.check_cache()  # never dropped, never a failure
    assert s.cache_full is None and s.health().up
    s.apply("MODIFIED", obj("d", "2"))  # still no room: still a key
    assert split(s) == (["a", "b", "c"], ["d", "e"])
    s.apply("DELETED", obj("e"))
    s.apply("DELETED", obj("never-seen"))  # a deletion of what was never counted
    assert split(s) == (["a", "b", "c"], ["d"])
    s.apply("DELETED", obj("a"))
    assert split(s) == (["b", "c"], ["d"])
    s.apply("MODIFIED", obj("d", "3"))  # room again: its next change caches it
    assert split(s) == (["b", "c", "d"], [])
    assert s.get("ns/d")["metadata"]["resourceVersion"] == "3"
    assert rec.of("add") == ["a", "b", "c", "d"]
    assert rec.of("update") == []
    assert rec.of("delete") == ["never-seen", "a"]


@pytest.mark.unit
def test_a_relist_installs_the_lists_own_split_and_handlers_see_the_cached_differences():
    rec = Recorder()
    s = store(**rec.handlers())
    s.replace({})
    for name in "abcde":
        s.apply("ADDED", obj(name))
    # During a gap (a 410): a (cached) and e (a key) deleted, f created, b changed.
    fresh = Fresh("/api/v1/pods", lambda o: o, 3, keys_past_cap=True)
    for o in (obj("b", "2"), obj("c"), obj("d"), obj("f")):
        fresh.keep(o)
    s.replace(fresh.items, fresh.past_cap)
    assert split(s) == (["b", "c", "d"], ["f"])
    assert s.health().relists == 1
    assert rec.of("delete") == ["a"] and rec.of("update") == ["b"]
    assert rec.of("add") == ["a", "b", "c", "d"]  # d: cached now, seen as an add


@pytest.mark.unit
def test_a_streaming_lists_deletions_remove_a_key_past_the_cap():
    initial = InitialEvents("/api/v1/pods", lambda o: o, 2, keys_past_cap=True)
    for name in "abcd":
        assert initial.take("ADDED", obj(name)) is None
    initial.take("DELETED", obj("d"))
    initial.take("DELETED", obj("a"))
    initial.take("MODIFIED", obj("c", "2"))  # room: cached
    assert sorted(initial.fresh.items) == ["ns/b", "ns/c"] and initial.fresh.past_cap == set()


@pytest.mark.unit
def test_without_keys_past_cap_the_cap_still_drops():
    s = Store("/api/v1/pods", "pods", max_objects=1)
    s.replace({})
    s.apply("ADDED", obj("a"))
    with pytest.raises(kube.CacheFull):
        s.apply("ADDED", obj("b"))
    fresh = Fresh("/api/v1/pods", lambda o: o, 1)
    fresh.keep(obj("a"))
    with pytest.raises(kube.CacheFull):
        fresh.keep(obj("b"))


@pytest.mark.unit
@pytest.mark.parametrize("seed", range(5))
def test_cached_plus_counted_is_what_exists_through_any_sequence(seed):
    """Random events and relists against the set of objects that exist: the store's
    cached and counted keys are that set, split, never both, the cache within its cap."""
    rng = random.Random(seed)
    cap, names = 20, [f"b{i:03d}" for i in range(60)]
    s = store(cap)
    exists = {}
    s.replace({})
    for step in range(3000):
        name = rng.choice(names)
        relisted = rng.random() < 0.03
        if relisted:  # a relist: what exists, in key order, split by a list
            fresh = Fresh("/api/v1/pods", lambda o: o, cap, keys_past_cap=True)
            for n in sorted(exists):
                fresh.keep(obj(n, exists[n]))
            s.replace(fresh.items, fresh.past_cap)
        elif name in exists and rng.random() < 0.5:
            del exists[name]
            s.apply("DELETED", obj(name))
        else:
            kind = "MODIFIED" if name in exists else "ADDED"
            exists[name] = str(step)
            s.apply(kind, obj(name, exists[name]))
        if rng.random() < 0.05:  # a DELETED the watch repeats, or of what never existed
            s.apply("DELETED", obj(rng.choice(names) + "-x"))
        cached, past = s.snapshot()
        keys = {f"ns/{o['metadata']['name']}" for o in cached}
        assert keys | past == {f"ns/{n}" for n in exists}, step
        assert not keys & past and len(keys) <= cap
        if relisted:  # a list fills the cache first; events may leave room until the next
            assert len(keys) == min(cap, len(exists)), step
        for o in cached:  # the cached objects are the latest
            assert o["metadata"]["resourceVersion"] == exists[o["metadata"]["name"]]


# ---- the informer on the real API server -------------------------------------------------
FAST = {"backoff": Backoff(initial=0.1, cap=0.5)}


def counted(inf):
    cached, past = inf.snapshot()
    return len(cached), len(past)


@pytest.mark.integration
@pytest.mark.parametrize("watch_list", [False, True], ids=["paged", "streaming"])
def test_past_the_cap_the_informer_caches_its_cap_and_counts_the_rest(
    apiserver, namespace, make_client, informers, watch_list
):
    create_pods(apiserver, namespace, 8)
    inf = informers(
        kube.Informer(
            make_client(apiserver),
            kube.PODS,
            namespace=namespace,
            page_size=2,
            max_objects=5,
            keys_past_cap=True,
            watch_list=watch_list,
            **FAST,
        )
    )
    assert inf.wait_synced(10)
    inf.check_cache()
    assert counted(inf) == (5, 3) and inf.health().up
    path = f"/api/v1/namespaces/{namespace}/pods"
    apiserver.admin.create(path, pod_manifest("p8"))
    assert wait_until(lambda: counted(inf) == (5, 4), 10), counted(inf)
    cached = {o["metadata"]["name"] for o in inf.items()}
    uncached = sorted({f"p{i}" for i in range(9)} - cached)
    apiserver.admin.delete(f"{path}/{uncached[0]}")
    assert wait_until(lambda: counted(inf) == (5, 3), 10), counted(inf)
    apiserver.admin.delete(f"{path}/{sorted(cached)[0]}")
    assert wait_until(lambda: counted(inf) == (4, 3), 10), counted(inf)
    # A change to a counted pod caches it, now that there is room.
    apiserver.admin.merge_patch(f"{path}/{uncached[1]}", {"metadata": {"labels": {"x": "1"}}})
    assert wait_until(lambda: counted(inf) == (5, 2), 10), counted(inf)
    assert inf.get(f"{namespace}/{uncached[1]}") is not None
    assert inf.health().relists == 0 and inf.watch_list == watch_list


@pytest.mark.integration
def test_after_a_410_the_relist_counts_what_exists(fresh_apiserver, make_client, informers):
    """The informer's API server down while, through a second one on the same etcd, a
    cached pod and a counted one are deleted and one created, then etcd compacted: the
    resumed watch gets the real 410, and the relist's split is the truth again."""
    api = fresh_apiserver(watch_cache=False)  # its watches read etcd: compaction bites
    other = fresh_apiserver(etcd=api.etcd)
    ns = "past-cap"
    api.admin.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    create_pods(api, ns, 6)
    inf = informers(
        kube.Informer(
            make_client(api),
            kube.PODS,
            namespace=ns,
            max_objects=4,
            keys_past_cap=True,
            watch_list=False,
            **FAST,
        )
    )
    assert inf.wait_synced(10)
    assert counted(inf) == (4, 2)
    cached = sorted(o["metadata"]["name"] for o in inf.items())
    uncached = sorted({f"p{i}" for i in range(6)} - set(cached))
    synced_rv = int(inf.resource_version)
    api.stop()
    assert wait_until(lambda: not inf.health().up, 10)
    path = f"/api/v1/namespaces/{ns}/pods"
    other.admin.delete(f"{path}/{cached[0]}")
    other.admin.delete(f"{path}/{uncached[0]}")
    other.admin.create(path, pod_manifest("late"))
    assert etcd_compact(api.etcd.client_url) > synced_rv
    api.start()
    assert wait_until(lambda: inf.health().relists == 1, 15), inf.health()
    assert counted(inf) == (4, 1)
    cached_now, past = inf.snapshot()
    names = {o["metadata"]["name"] for o in cached_now} | {k.split("/")[1] for k in past}
    assert names == {f"p{i}" for i in range(6)} - {cached[0], uncached[0]} | {"late"}
