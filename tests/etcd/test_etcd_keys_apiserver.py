"""Key counts per resource on the keys a real kube-apiserver 1.37 writes, with /events in
an etcd of its own (--etcd-servers-overrides), as large clusters run it.

test_etcd_keys.py checks the walk on keys the test made up; this checks it on Kubernetes'
own layout: the storage names (Nodes as `minions`), the resources of API groups that
keep their group in the key (CRDs, APIServices, custom resources), Services and
Endpoints one level deeper, and which etcd an event lands in. The expected counts come
from etcd itself, a keys-only range over the prefix grouped by the rule docs/etcd.md
states, written out again here rather than taken from kube_scale_exporter.etcd.keys.
"""

import base64
import time

import pytest

from testbed.etcd_server import prefix_range
from testbed.fleet import NAMESPACE, Fleet, FleetSize
from testbed.metrics import wait_until
from tests.etcd.conftest import samples

pytestmark = pytest.mark.integration

PREFIX = "/registry/"
OURS = "keys"  # the namespace this test writes its objects in
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def keys_under(etcd, prefix=PREFIX):
    """Every key under `prefix` in one etcd: one keys-only range through its JSON gateway
    (a few hundred keys, well under a reply's size limit)."""
    body = prefix_range(etcd, prefix, keys_only=True)
    keys = [base64.b64decode(kv["key"]).decode() for kv in body.get("kvs", [])]
    assert len(keys) == int(body.get("count", 0)), "the range was cut short"
    return keys


def resource_by_docs(key):
    """docs/etcd.md's rule: the first segment after the prefix; `group/resource` when that
    segment is an API group (it has a dot); `services/specs` and `services/endpoints`."""
    first, *rest = key[len(PREFIX) :].split("/")
    if ("." in first or first == "services") and len(rest) >= 2:
        return f"{first}/{rest[0]}"
    return first


def per_resource(keys):
    counts = {}
    for key in keys:
        resource = resource_by_docs(key)
        counts[resource] = counts.get(resource, 0) + 1
    return counts


def write_objects(api):
    """A few objects of the kinds whose keys the rule treats differently (storage names,
    API groups, Services and Endpoints, events), written through the API server so that the
    keys are the ones Kubernetes makes."""
    api.create("/api/v1/namespaces", {"metadata": {"name": OURS}})
    base = f"/api/v1/namespaces/{OURS}"
    api.create(f"{base}/configmaps", {"metadata": {"name": "settings"}, "data": {"a": "b"}})
    api.create(f"{base}/secrets", {"metadata": {"name": "token"}, "stringData": {"a": "b"}})
    api.create(
        f"{base}/services",
        {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}], "selector": {"a": "b"}}},
    )
    # No controller-manager runs to write it, so the test writes the Service's Endpoints.
    api.create(
        f"{base}/endpoints",
        {
            "metadata": {"name": "web"},
            "subsets": [{"addresses": [{"ip": "10.64.0.5"}], "ports": [{"port": 80}]}],
        },
    )
    # Stored as `controllers`; no controller-manager runs, so it makes no pods.
    api.create(
        f"{base}/replicationcontrollers",
        {
            "metadata": {"name": "rc"},
            "spec": {
                "replicas": 0,
                "selector": {"app": "rc"},
                "template": {
                    "metadata": {"labels": {"app": "rc"}},
                    "spec": {"containers": [{"name": "pause", "image": "pause:3.9"}]},
                },
            },
        },
    )
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    regarding = {"kind": "Service", "namespace": OURS, "name": "web", "apiVersion": "v1"}
    api.create(
        f"{base}/events",
        {
            "metadata": {"name": "web.core"},
            "involvedObject": regarding,
            "reason": "Tested",
            "message": "written through core/v1",
            "type": "Normal",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": "kse-test"},
        },
    )
    api.create(
        f"/apis/events.k8s.io/v1/namespaces/{OURS}/events",
        {
            "metadata": {"name": "web.events-k8s-io"},
            "eventTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()),
            "regarding": regarding,
            "reason": "Tested",
            "note": "written through events.k8s.io/v1",
            "type": "Normal",
            "action": "Test",
            "reportingController": "kse.test/keys",
            "reportingInstance": "kse-test",
        },
    )
    api.create(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        CRD,
    )
    widgets = f"/apis/example.com/v1/namespaces/{OURS}/widgets"

    # The CRD's REST path is served a moment after it is created (Established, then the
    # handler, then its watch cache): wait for a list to answer rather than for a time.
    # Until then it is a plain-text 404 page, then 429 "storage is (re)initializing".
    def served():
        answer = api.request("GET", widgets, ok=(200, 404, 429))
        return isinstance(answer, dict) and answer.get("kind") == "WidgetList"

    assert wait_until(served, timeout=30), "the widgets resource was never served"
    api.create(
        widgets, {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    )


@pytest.fixture
def kube_keys(tmp_path):
    """A main etcd 3.7 and an events etcd 3.7 under a 1.37 API server (Fleet without
    players: no scheduler, controller-manager or kwok), two Nodes with a Running pod each
    and write_objects()' objects; stopped by PID after."""
    f = Fleet(
        tmp_path / "fleet", FleetSize(nodes=2, gpu_nodes=0, pods=0, gpu_pods=0), players=False
    ).start()
    try:
        f.create_nodes()
        f.create_bound_pods(per_node=1)
        write_objects(f.admin)
        yield f
    finally:
        f.stop()


def test_counts_match_what_a_real_kube_apiserver_wrote(kube_keys, collector_factory):
    f = kube_keys
    version = f.admin.get("/version")["gitVersion"]
    collector = collector_factory(
        "--etcd.cluster",
        f"main={f.main_etcd.client_url}",
        "--etcd.cluster",
        f"events={f.events_etcd.client_url}",
    )

    # The API server keeps writing (its identity lease, bootstrap objects): compare the
    # collector's walk with ranges taken just before and just after it, in a window where
    # the two ranges agree, so both sides counted the same keys.
    taken = {}

    def counted_in_a_still_window():
        before = {e: keys_under(getattr(f, f"{e}_etcd")) for e in ("main", "events")}
        collector.count_keys()
        after = {e: keys_under(getattr(f, f"{e}_etcd")) for e in ("main", "events")}
        taken.update(keys=before, found=samples(collector))
        return before == after

    assert wait_until(counted_in_a_still_window, timeout=60)
    keys, found = taken["keys"], taken["found"]
    got = {"main": {}, "events": {}}
    for (name, labels), value in found.items():
        if name == "kubescale_etcd_keys":
            labels = dict(labels)
            got[labels["etcd_cluster"]][labels["resource"]] = value
    expected = {e: per_resource(k) for e, k in keys.items()}
    print(
        f"kube-apiserver {version}: main etcd {len(keys['main'])} keys in "
        f"{len(expected['main'])} resources, events etcd {len(keys['events'])} keys; "
        f"main: {dict(sorted(expected['main'].items()))}"
    )

    # Every resource and count as the keys-only range says, nothing named `other`
    # (fewer resources than --etcd.keys-max-resources) and no name changed by sanitizing.
    assert got == expected
    # The layout the rule is for, as Kubernetes writes it: storage names, API groups kept
    # in the key, Services and Endpoints a level deeper, a custom resource by group.
    main = expected["main"]
    assert main["minions"] == 2 and "nodes" not in main
    assert main["controllers"] == 1 and "replicationcontrollers" not in main
    assert main["pods"] == 2 and main["secrets"] == 1
    assert main["services/endpoints"] == 1
    assert main["apiextensions.k8s.io/customresourcedefinitions"] == 1
    assert main["example.com/widgets"] == 1
    assert main["apiregistration.k8s.io/apiservices"] > 10  # one per built-in group version
    assert {
        f"{PREFIX}minions/{f.nodes[0]}",
        f"{PREFIX}pods/{NAMESPACE}/{f.nodes[0]}-0",
        f"{PREFIX}namespaces/{OURS}",
        f"{PREFIX}configmaps/{OURS}/settings",
        f"{PREFIX}controllers/{OURS}/rc",
        f"{PREFIX}services/specs/{OURS}/web",
        f"{PREFIX}services/specs/default/kubernetes",  # the API server's own
        f"{PREFIX}services/endpoints/{OURS}/web",
        f"{PREFIX}example.com/widgets/{OURS}/w",
    } <= set(keys["main"])

    # The events etcd holds events only, both APIs' (events.k8s.io/v1 shares core/v1's
    # storage, so the override moves it too); main holds none, so nothing to advise.
    assert set(expected["events"]) == {"events"}
    assert {f"{PREFIX}events/{OURS}/web.core", f"{PREFIX}events/{OURS}/web.events-k8s-io"} <= set(
        keys["events"]
    )
    assert "events" not in main
    advice = collector.advise(collector.observe())
    assert not [finding for finding in advice if "event keys" in finding.summary]
