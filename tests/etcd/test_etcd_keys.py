"""Key counts per resource: exact against keys written, cheap, and bounded against junk."""

from collections import Counter

import pytest

from kube_scale_exporter.etcd.keys import OTHER, resource_of
from tests.etcd.conftest import samples, value
from testbed.etcd_server import put_many
from kube_scale_exporter.cli import main

WRITTEN = {
    "pods": 300,
    "events": 0,
    "configmaps": 120,
    "services/specs": 7,
    "services/endpoints": 9,
    "leases": 0,
    "apiregistration.k8s.io/apiservices": 3,
    "example.com/widgets": 40,
    "deployments": 1,
}


def kube_keys(counts):
    for resource, n in counts.items():
        for i in range(n):
            yield f"/registry/{resource}/ns{i % 3}/obj-{i}", "value-not-read"


@pytest.mark.integration
def test_two_clusters_with_key_counts_per_resource(etcd_factory, collector_factory):
    main = etcd_factory(version="3.7", name="main")
    events = etcd_factory(version="3.5", name="events")
    put_many(main.session(), main.client_url, kube_keys(WRITTEN))
    # The same prefix with nothing else: not counted; keys outside the prefix: not counted.
    put_many(
        main.session(),
        main.client_url,
        [("/registry/ranges/serviceips", "x"), ("/other/thing", "x"), ("/registry", "x")],
    )
    put_many(events.session(), events.client_url, kube_keys({"events": 500}))
    collector = collector_factory(
        "--etcd.cluster", f"main={main.client_url}", "--etcd.cluster", f"events={events.client_url}"
    )
    collector.count_keys()
    found = samples(collector)

    expected_main = {r: n for r, n in WRITTEN.items() if n}
    expected_main["ranges"] = 1
    got_main = {
        dict(k[1])["resource"]: v
        for k, v in found.items()
        if k[0] == "kubescale_etcd_keys" and dict(k[1])["etcd_cluster"] == "main"
    }
    assert got_main == expected_main
    assert value(found, "kubescale_etcd_keys", etcd_cluster="events", resource="events") == 500
    for cluster, member in (("main", "main"), ("events", "events")):
        assert value(found, "kubescale_etcd_member_up", etcd_cluster=cluster, member=member) == 1
        assert (
            value(found, "kubescale_etcd_keys_refresh_timestamp_seconds", etcd_cluster=cluster)
            > 1.7e9
        )
    # Main holds no events: nothing to advise. Then events land in main: advice.
    # (Only that advice: on a busy disk the latency advice about the cluster named
    # "events" says "events" too.)
    assert not [f for f in collector.advise(collector.observe()) if "event keys" in f.summary]
    put_many(main.session(), main.client_url, kube_keys({"events": 50}))
    collector.count_keys()
    advice = [f for f in collector.advise(collector.observe()) if "event keys" in f.summary]
    assert len(advice) == 1 and "--etcd-servers-overrides=/events#" in advice[0].advice
    assert "etcd main" in advice[0].summary


@pytest.mark.integration
def test_walk_costs_two_requests_per_resource_whatever_the_key_count(
    etcd_factory, collector_factory
):
    etcd = etcd_factory(version="3.5")
    put_many(
        etcd.session(), etcd.client_url, kube_keys({"pods": 5000, "secrets": 2000, "nodes": 50})
    )
    collector = collector_factory("--etcd.cluster", f"main={etcd.client_url}")
    cluster = collector.clusters[0]
    before = cluster.requests_sent()
    collector.count_keys()
    # 1 member list to find an answering endpoint, then per resource: first key + count,
    # then one first-key request that finds the end.
    assert cluster.requests_sent() - before == 1 + 2 * 3 + 1
    found = samples(collector)
    assert value(found, "kubescale_etcd_keys", etcd_cluster="main", resource="pods") == 5000


@pytest.mark.integration
def test_junk_prefixes_cannot_blow_the_series_budget(etcd_factory, collector_factory):
    etcd = etcd_factory(version="3.7")
    junk = [(f'/registry/zz-junk-{i:04d}\u00e9 "x"/a/b', "x") for i in range(600)]
    junk += [("/registry/\xff\xfe/a", "x"), ("/registry/OTHER/x", "x"), ("/registry//x", "x")]
    put_many(etcd.session(), etcd.client_url, [*junk, *kube_keys({"pods": 900, "nodes": 30})])
    collector = collector_factory(
        "--etcd.cluster", f"main={etcd.client_url}", "--etcd.keys-max-resources", "5"
    )
    cluster = collector.clusters[0]
    before = cluster.requests_sent()
    collector.count_keys()
    walked = cluster.requests_sent() - before
    assert walked <= 1 + 2 * 4 * 5 + 1  # bounded by 4 x max resources, not by 600 prefixes
    found = samples(collector)
    keys = {dict(k[1])["resource"]: v for k, v in found.items() if k[0] == "kubescale_etcd_keys"}
    assert len(keys) == 6 and OTHER in keys  # 5 largest + other
    assert sum(keys.values()) == len(junk) + 900 + 30  # nothing lost, nothing double counted
    # Resources met before the walk's bound keep their own names when among the largest.
    assert keys["pods"] == 900 and keys["nodes"] == 30
    for name in keys:
        assert all(c.isascii() and (c.isalnum() or c in "._/-") for c in name), name


@pytest.mark.unit
def test_resource_of_follows_kubernetes_layout():
    prefix = b"/registry/"
    assert resource_of(b"/registry/pods/ns/name", prefix) == ("pods", b"/registry/pods/")
    assert resource_of(b"/registry/example.com/widgets/ns/w", prefix) == (
        "example.com/widgets",
        b"/registry/example.com/widgets/",
    )
    assert resource_of(b"/registry/ranges/serviceips", prefix) == ("ranges", b"/registry/ranges/")
    assert resource_of(b"/registry/services/endpoints/ns/svc", prefix) == (
        "services/endpoints",
        b"/registry/services/endpoints/",
    )
    assert resource_of(b"/registry/health", prefix) == ("health", b"/registry/health")
    assert resource_of(b"/registry/Other/x", prefix) == ("_other", b"/registry/Other/")
    names = Counter(
        resource_of(f"/registry/{c}/x".encode(), prefix)[0] for c in ("a b", "a\tb", "a{b")
    )
    assert names == Counter({"a_b": 3})  # sanitized names merge, counts add up


@pytest.mark.integration
def test_check_command_advises_moving_events_out_of_main(etcd_factory, capsys):

    etcd = etcd_factory(version="3.5")
    put_many(etcd.session(), etcd.client_url, kube_keys({"pods": 40, "events": 200}))
    status = main(["check", "--mode", "cluster", "--etcd.cluster", f"main={etcd.client_url}"])
    out = capsys.readouterr().out
    assert status == 1
    assert "[etcd]" in out and "etcd main: holds 200 event keys (83% of 240)" in out
    assert "--etcd-servers-overrides=/events#" in out
