"""The capacitybuffer collector against a real kube-apiserver with the CapacityBuffer CRD of
cluster-autoscaler 1.36.1 (both versions served), as a service account holding exactly the
rules the collector declares. Statuses are written through the status subresource and
events posted as the autoscaler's recorder posts them: the collector's own tests; the real
autoscaler writing them is tests/autoscaler's."""

import time

import pytest

from kube_scale_exporter.cli import make_scraper, parse
from kube_scale_exporter.collectors.capacitybuffer import CapacityBufferCollector
from testbed.accounts import service_account
from testbed.kube_apiserver import etcd_compact
from testbed.metrics import sample, wait_until
from tests.capacitybuffer.conftest import CRDS
from tests.capacitybuffer.objects import condition, ready, template

pytestmark = pytest.mark.integration

GROUP = "autoscaling.x-k8s.io"
NODE = {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8", "pods": "110"}


def buffers(version, ns, name=""):
    path = f"/apis/{GROUP}/{version}/namespaces/{ns}/capacitybuffers"
    return f"{path}/{name}" if name else path


class Cluster:
    def __init__(self, api, tmp_path):
        self.api, self.tmp_path = api, tmp_path
        self.made = []

    def collector(self, *flags, rules=None):
        if rules is None:
            # What the collector declares for these flags (parsed against a kubeconfig
            # that loads: validation reads it).
            probe = self.api.write_kubeconfig(self.tmp_path / "probe", token="unused")
            args, classes = parse(
                [
                    "--mode",
                    "cluster",
                    "--collector.capacitybuffer",
                    "--kube.kubeconfig",
                    probe,
                    *flags,
                ]
            )
            assert classes == [CapacityBufferCollector]
            rules = list(CapacityBufferCollector.needs_for(args).rbac_rules)
        account = service_account(self.api, "cb", rules, self.tmp_path)
        args, _ = parse(
            [
                "--mode",
                "cluster",
                "--collector.capacitybuffer",
                "--capacitybuffer.discovery-interval",
                "1s",
                "--kube.kubeconfig",
                account.kubeconfig,
                *flags,
            ]
        )
        c = CapacityBufferCollector(args)
        self.made.append(c)
        c.start()
        return c

    def close(self):
        for c in self.made:
            c.close()


@pytest.fixture
def cluster(own_apiserver, tmp_path):
    c = Cluster(own_apiserver, tmp_path)
    yield c
    c.close()


def maybe(families, metric, /, **labels):
    """The sample's value, or None where the scrape has no such series (testbed's
    sample() cannot be asked for a `name` label)."""
    for f in families:
        for s in f.samples:
            if s.name == metric and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


def scrape(c):
    result = make_scraper([c]).scrape(10)
    [outcome] = [o for o in result.outcomes if o.name == "capacitybuffer"]
    return outcome, result.families


def value(c, metric, /, **labels):
    outcome, fams = scrape(c)
    assert outcome.ok, outcome.error
    return maybe(fams, metric, **labels)


def eventually(c, metric, expected, /, timeout=15, **labels):
    seen = [None]

    def check():
        seen[0] = value(c, metric, **labels)
        return seen[0] == expected

    assert wait_until(check, timeout), f"{metric}{labels}: {seen[0]} != {expected}"


def install_crd(api, crd):
    api.admin.request("POST", CRDS, crd, ok=(201, 409))
    served = [v["name"] for v in crd["spec"]["versions"] if v["served"]]

    def listed():
        for v in served:
            doc = api.admin.request("GET", f"/apis/{GROUP}/{v}", ok=(200, 404))
            if not isinstance(doc, dict) or "capacitybuffers" not in {
                r["name"] for r in doc.get("resources", [])
            }:
                return False
        return True

    assert wait_until(listed, 30, interval=0.2), "the CRD is not served"
    return served


def test_1_api_absent_is_off_not_failed_then_on_once_the_crd_is_installed(
    cluster, capacity_buffer_crd, uniq
):
    api = cluster.api
    c = cluster.collector()
    outcome, fams = scrape(c)
    assert outcome.ok, outcome.error
    assert sample(fams, "kubescale_capacitybuffer_api_served", version="v1beta1") == 0
    assert sample(fams, "kubescale_capacitybuffer_api_served", version="v1alpha1") == 0
    assert maybe(fams, "kubescale_capacitybuffer_buffers") is None
    assert maybe(fams, "kubescale_kube_watch_up", resource="capacitybuffers") is None

    served = install_crd(api, capacity_buffer_crd)
    assert sorted(served) == ["v1alpha1", "v1beta1"]
    eventually(c, "kubescale_capacitybuffer_api_watched", 1, version="v1beta1")
    assert value(c, "kubescale_capacitybuffer_api_served", version="v1alpha1") == 1
    eventually(c, "kubescale_capacitybuffer_buffers", 0)
    _, fams = scrape(c)
    for resource in ("capacitybuffers", "podtemplates", "events", "nodes"):
        assert sample(fams, "kubescale_kube_watch_up", resource=resource) == 1, resource


@pytest.fixture
def ns(cluster, capacity_buffer_crd, uniq):
    api = cluster.api
    install_crd(api, capacity_buffer_crd)
    api.admin.create("/api/v1/namespaces", {"metadata": {"name": uniq}})
    node = f"{uniq}-n1"
    api.admin.create("/api/v1/nodes", {"metadata": {"name": node}})
    api.admin.merge_patch(
        f"/api/v1/nodes/{node}/status", {"status": {"capacity": NODE, "allocatable": NODE}}
    )
    return uniq


def put_template(api, ns, name, requests):
    api.admin.create(f"/api/v1/namespaces/{ns}/podtemplates", template(name, ns, requests))


def put_buffer(api, ns, name, spec, version="v1beta1"):
    api.admin.create(
        buffers(version, ns),
        {
            "apiVersion": f"{GROUP}/{version}",
            "kind": "CapacityBuffer",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def put_status(api, ns, name, status, version="v1beta1"):
    api.admin.merge_patch(buffers(version, ns, name) + "/status", {"status": status})


def post_event(api, ns, name, reason, uid, when):
    """A core/v1 event on the buffer, as client-go's recorder writes it for the autoscaler."""
    api.admin.create(
        f"/api/v1/namespaces/{ns}/events",
        {
            "metadata": {"name": f"{name}.{reason.lower()}.{int(time.time() * 1000)}"},
            "involvedObject": {
                "kind": "CapacityBuffer",
                "apiVersion": f"{GROUP}/v1beta1",
                "namespace": ns,
                "name": name,
                "uid": uid,
            },
            "reason": reason,
            "message": f"capacity buffer 2 fake pods {reason}",
            "type": "Normal",
            "source": {"component": "cluster-autoscaler"},
            "firstTimestamp": when,
            "lastTimestamp": when,
            "count": 1,
        },
    )


def rfc3339(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def test_a_buffer_through_its_life(cluster, ns):
    api = cluster.api
    put_template(api, ns, "web", {"cpu": "2", "memory": "8Gi"})
    put_template(api, ns, "capacity-buffer-web-pod-template", {"cpu": "2", "memory": "8Gi"})
    put_buffer(api, ns, "web", {"podTemplateRef": {"name": "web"}, "replicas": 4})
    c = cluster.collector()
    key = {"namespace": ns, "name": "web"}
    # Before the autoscaler has looked at it: asked for, nothing resolved, not ready.
    eventually(c, "kubescale_capacitybuffer_replicas", 4, source="spec", **key)
    assert value(c, "kubescale_capacitybuffer_replicas", source="status", **key) == 0
    assert (
        value(c, "kubescale_capacitybuffer_pod_requests", resource="cpu", unit="core", **key) == 2
    )
    assert value(c, "kubescale_capacitybuffer_problems", reason="not_ready") >= 1
    assert (
        value(
            c,
            "kubescale_capacitybuffer_info",
            strategy="active_capacity",
            template_from="PodTemplate",
            **key,
        )
        == 1
    )

    # The autoscaler resolves it, quota-limited to 3, and provisions.
    status = ready(
        3,
        "capacity-buffer-web-pod-template",
        condition("LimitedByQuotas", "True", "ResourceQuotasAllocated"),
    )
    put_status(api, ns, "web", status)
    eventually(c, "kubescale_capacitybuffer_replicas", 3, source="status", **key)
    assert (
        value(c, "kubescale_capacitybuffer_reserved", resource="memory", unit="byte", **key)
        == 3 * 8 * 2**30
    )
    assert (
        value(
            c,
            "kubescale_capacitybuffer_condition",
            condition="LimitedByQuotas",
            status="True",
            reason="ResourceQuotasAllocated",
            **key,
        )
        == 1
    )
    assert (
        value(
            c,
            "kubescale_capacitybuffer_condition",
            condition="ReadyForProvisioning",
            status="True",
            reason="AttributesSetSuccessfully",
            **key,
        )
        == 1
    )

    # Its last word: NotTriggerScaleUp, then TriggeredScaleUp.
    uid = api.admin.get(buffers("v1beta1", ns, "web"))["metadata"]["uid"]
    post_event(api, ns, "web", "NotTriggerScaleUp", uid, rfc3339(time.time() - 30))
    wait_until(
        lambda: (
            value(
                c,
                "kubescale_capacitybuffer_scale_up_event_age_seconds",
                reason="NotTriggerScaleUp",
                **key,
            )
            is not None
        ),
        15,
    )
    assert (
        25
        <= value(
            c,
            "kubescale_capacitybuffer_scale_up_event_age_seconds",
            reason="NotTriggerScaleUp",
            **key,
        )
        < 120
    )
    post_event(api, ns, "web", "TriggeredScaleUp", uid, rfc3339(time.time()))
    assert wait_until(
        lambda: (
            value(
                c,
                "kubescale_capacitybuffer_scale_up_event_age_seconds",
                reason="TriggeredScaleUp",
                **key,
            )
            is not None
        ),
        15,
    )

    # Its PodTemplate deleted: a reason of its own, the rest of the collector unaffected.
    put_template(api, ns, "other", {"cpu": "1"})
    put_buffer(api, ns, "other", {"podTemplateRef": {"name": "other"}, "replicas": 1})
    api.admin.delete(f"/api/v1/namespaces/{ns}/podtemplates/web")
    eventually(c, "kubescale_capacitybuffer_problem", 1, reason="pod_template_missing", **key)
    assert (
        value(
            c,
            "kubescale_capacitybuffer_pod_requests",
            resource="cpu",
            unit="core",
            namespace=ns,
            name="other",
        )
        == 1
    )


def test_bad_input_each_with_its_reason(cluster, ns):
    api = cluster.api
    put_template(api, ns, "huge", {"cpu": "64"})
    put_template(api, ns, "idle", {})
    # The CRD lets each of these through; each gets its own reason.
    put_buffer(
        api, ns, "bare", {"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "x"}}
    )
    put_buffer(
        api,
        ns,
        "widget",
        {"scalableRef": {"apiGroup": "example.com", "kind": "Widget", "name": "w"}, "replicas": 1},
    )
    put_buffer(api, ns, "nothing", {"replicas": 1})
    put_buffer(api, ns, "missing", {"podTemplateRef": {"name": "absent"}, "replicas": 1})
    put_buffer(api, ns, "huge", {"podTemplateRef": {"name": "huge"}, "replicas": 1})
    put_buffer(api, ns, "idle", {"podTemplateRef": {"name": "idle"}, "replicas": 1})
    c = cluster.collector()
    for name, reason in {
        "bare": "no_replicas_or_limits",
        "widget": "scalable_kind_unknown",
        "nothing": "no_template",
        "missing": "pod_template_missing",
        "huge": "requests_fit_no_node",
        "idle": "no_requests",
    }.items():
        eventually(c, "kubescale_capacitybuffer_problem", 1, namespace=ns, name=name, reason=reason)
    # A quantity the API server refuses never reaches the cache: the CRD's own pattern.
    resp = api.admin.request(
        "POST",
        buffers("v1beta1", ns),
        {
            "apiVersion": f"{GROUP}/v1beta1",
            "kind": "CapacityBuffer",
            "metadata": {"name": "badq"},
            "spec": {"podTemplateRef": {"name": "idle"}, "limits": {"cpu": "lots"}},
        },
        ok=(422,),
    )
    assert "limits" in str(resp)


def test_both_versions_are_one_object_and_either_can_be_watched(cluster, ns):
    api = cluster.api
    put_template(api, ns, "t", {"cpu": "500m", "memory": "1Gi"})
    put_buffer(api, ns, "old", {"podTemplateRef": {"name": "t"}, "replicas": 2}, version="v1alpha1")
    put_status(api, ns, "old", ready(2, "t"), version="v1alpha1")
    key = {"namespace": ns, "name": "old"}
    beta = cluster.collector()
    alpha = cluster.collector("--capacitybuffer.api-version", "v1alpha1")
    for c, version in ((beta, "v1beta1"), (alpha, "v1alpha1")):
        eventually(c, "kubescale_capacitybuffer_api_watched", 1, version=version)
        eventually(c, "kubescale_capacitybuffer_reserved", 1.0, resource="cpu", unit="core", **key)


def test_least_privilege_without_the_fit_check_and_a_missing_grant_fails_only_it(cluster, ns):
    api = cluster.api
    put_template(api, ns, "t", {"cpu": "1"})
    put_buffer(api, ns, "b", {"podTemplateRef": {"name": "t"}, "replicas": 1})
    strict = cluster.collector("--no-capacitybuffer.node-fit")
    eventually(
        strict, "kubescale_capacitybuffer_replicas", 1, source="spec", namespace=ns, name="b"
    )
    _, fams = scrape(strict)
    assert maybe(fams, "kubescale_kube_watch_up", resource="nodes") is None
    assert (
        maybe(fams, "kubescale_capacitybuffer_cluster_placeable", resource="cpu", unit="core")
        is None
    )
    # Without podtemplates the collector cannot sync: it fails, and says which watch.
    rules = [
        r
        for r in CapacityBufferCollector.needs_in("cluster").rbac_rules
        if "podtemplates" not in r["resources"]
    ]
    rules.append({"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"]})
    short = cluster.collector(rules=rules)
    assert wait_until(lambda: scrape(short)[0].ok is False, 30)
    assert "podtemplates" in str(scrape(short)[0].error)


def buffer_relists(c):
    _, fams = scrape(c)
    return maybe(fams, "kubescale_kube_relists_total", resource="capacitybuffers") or 0


def names_of(fams, metric):
    return {s.labels["name"] for f in fams if f.name == metric for s in f.samples}


def test_past_the_cache_cap_every_buffer_is_counted_and_the_collector_keeps_working(
    fresh_apiserver, capacity_buffer_crd, tmp_path
):
    """More buffers and PodTemplates than --capacitybuffer.max-cached-objects, on an API
    server of its own (exact counts): the collector keeps working, caches its cap of each,
    counts every buffer, says which it leaves out of the sums and why, and stays true
    through deletions of cached and uncached buffers and through a relist after a real
    410 (its API server down while a second one on the same etcd deletes and creates,
    etcd compacted)."""
    api = fresh_apiserver(watch_cache=False)  # its watches read etcd: compaction bites
    install_crd(api, capacity_buffer_crd)
    cap, count, templates = 25, 60, 30
    ns = "flood"
    api.admin.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    for i in range(templates):
        put_template(api, ns, f"t{i:02d}", {"cpu": "1"})
    for i in range(count):
        spec = {"podTemplateRef": {"name": f"t{i % templates:02d}"}, "replicas": 1}
        put_buffer(api, ns, f"b{i:02d}", spec)
        put_status(api, ns, f"b{i:02d}", ready(1, f"t{i % templates:02d}"))
    cluster = Cluster(api, tmp_path)
    try:
        c = cluster.collector(
            "--capacitybuffer.max-cached-objects",
            str(cap),
            "--capacitybuffer.max-buffers",
            "3",
            "--no-capacitybuffer.node-fit",
        )
        eventually(c, "kubescale_capacitybuffer_buffers", count, timeout=30)
        outcome, fams = scrape(c)
        assert outcome.ok, outcome.error
        # A list from etcd comes in key order: the first `cap` of each are cached.
        buffers_cached = [f"b{i:02d}" for i in range(cap)]
        expect = {
            ("kubescale_capacitybuffer_objects_not_cached", "capacitybuffers"): count - cap,
            ("kubescale_capacitybuffer_objects_not_cached", "podtemplates"): templates - cap,
            ("kubescale_capacitybuffer_objects_not_cached", "events"): 0,
        }
        for (metric, resource), want in expect.items():
            assert sample(fams, metric, resource=resource) == want, resource
        assert sample(fams, "kubescale_capacitybuffer_buffers_untracked", reason="cache_full") == (
            count - cap
        )
        assert (
            sample(fams, "kubescale_capacitybuffer_buffers_untracked", reason="template_not_cached")
            == 0  # the first 25 buffers name t00..t24, all cached
        )
        assert sample(fams, "kubescale_capacitybuffer_buffers_over_cap") == cap - 3
        assert names_of(fams, "kubescale_capacitybuffer_info") == set(buffers_cached[:3])
        assert (
            sample(fams, "kubescale_capacitybuffer_cluster_reserved", resource="cpu", unit="core")
            == cap
        )
        # A PodTemplate past the cap exists: no buffer reads pod_template_missing.
        assert sample(fams, "kubescale_capacitybuffer_problems", reason="pod_template_missing") == 0
        assert sample(fams, "kubescale_kube_watch_up", resource="capacitybuffers") == 1

        # Deleted: a cached buffer and one counted by key.
        api.admin.delete(buffers("v1beta1", ns, "b00"))
        api.admin.delete(buffers("v1beta1", ns, f"b{count - 1:02d}"))
        eventually(c, "kubescale_capacitybuffer_buffers", count - 2)
        assert value(c, "kubescale_capacitybuffer_buffers_untracked", reason="cache_full") == (
            count - cap - 1
        )
        assert (
            value(c, "kubescale_capacitybuffer_cluster_reserved", resource="cpu", unit="core")
            == cap - 1
        )

        # A 410: while its API server is down, a cached and a counted buffer are deleted and
        # one created; the relist finds what exists.
        other = fresh_apiserver(etcd=api.etcd)
        synced = buffer_relists(c)
        api.stop()
        other.admin.delete(buffers("v1beta1", ns, "b01"))
        other.admin.delete(buffers("v1beta1", ns, f"b{count - 2:02d}"))
        put_buffer(other, ns, "late", {"podTemplateRef": {"name": "t00"}, "replicas": 1})
        etcd_compact(api.etcd.client_url)
        api.start()
        assert wait_until(lambda: buffer_relists(c) > synced, 30)
        eventually(c, "kubescale_capacitybuffer_buffers", count - 4 + 1)
        outcome, fams = scrape(c)
        assert outcome.ok, outcome.error
        # Cached again: the first 25 by key (b02..b26), the rest (b27..b57, late) counted.
        assert sample(fams, "kubescale_capacitybuffer_buffers_untracked", reason="cache_full") == (
            count - 4 + 1 - cap
        )
        assert names_of(fams, "kubescale_capacitybuffer_info") == {"b02", "b03", "b04"}
        # b25 and b26 name t25 and t26, past the PodTemplates' cap: left out of the sums.
        assert (
            sample(fams, "kubescale_capacitybuffer_buffers_untracked", reason="template_not_cached")
            == 2
        )
        assert (
            sample(fams, "kubescale_capacitybuffer_cluster_reserved", resource="cpu", unit="core")
            == cap - 2
        )
    finally:
        cluster.close()
