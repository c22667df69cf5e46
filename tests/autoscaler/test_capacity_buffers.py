"""CapacityBuffers with the real cluster-autoscaler (kwok provider) on the real control plane:
the warm headroom the balloon story keeps, held the 2026 way. The autoscaler injects virtual
pods for each buffer; no pod, preemption or PriorityClass exists. Each test starts its own
cluster (testbed/fleet.py), installs the CapacityBuffer CRD of the autoscaler's own release
and runs the autoscaler with its buffer controller and pod injection on, the exporter's
`capacitybuffer` collector, and a live Prometheus (the newest release the tests run)
evaluating the mixin's buffer rules and alerts, their windows shortened (KNOBS).

- the story: buffers provision nodes in the CPU and the GPU group; a burst of real pods
  takes the headroom at once and the autoscaler brings it back; with the CPU group at its
  max the buffer stays unprovisioned (NotTriggerScaleUp) and the alert fires, until the max
  is raised and it clears;
- both API versions: a v1alpha1 and a v1beta1 buffer, each read through the other version,
  both provisioned; then one's PodTemplate is deleted, and one is cut by a ResourceQuota;
- the API absent: the collector is off, not failed, and the autoscaler with its buffer
  switches on does nothing at all until the CRD is installed;
- the autoscaler's RBAC for buffers: as a service account of its own rules and the
  buffers' (testbed/autoscaler.py), without `create pods` (the dry run) the buffer is not
  ready, with it the buffer is provisioned.
"""

import json
import pathlib
import shutil
import tempfile
import time

import pytest
import requests

from testbed import prometheus
from testbed.accounts import service_account
from testbed.autoscaler import (
    AUTOSCALER_RULES,
    BUFFER_RULES,
    BUFFER_VERSIONS,
    DRY_RUN_RULE,
    ClusterAutoscaler,
    NodeGroup,
    install_capacity_buffer_crd,
)
from testbed.builds import cluster_autoscaler_version
from testbed.exporter import start_exporter
from testbed.fleet import CPU_NODE, GPU_RESOURCE, Fleet, FleetSize
from testbed.metrics import parse_exposition
from testbed.prometheus import PrometheusServer
from tests.autoscaler.support import (
    Buffers,
    apply_deployment,
    deployment,
    rule_files,
    wait_for,
)
from tests.mixin.support import prometheus_binary

pytestmark = pytest.mark.integration

BUFFER_NS = "buffers"
WORKLOAD_NS = "workload"
CLUSTER_JOB = "kube-scale-exporter-cluster"
CPU_GROUP = NodeGroup("cpu", max_size=4)
GPU_GROUP = NodeGroup("gpu", max_size=1, gpu=True)
# One replica fills a node of its group (the template also carries a kube-proxy the
# autoscaler adds to its simulation; 1 CPU and 8 GiB are left for it and daemons).
FILL_CPU = {"cpu": str(int(CPU_NODE["cpu"]) - 1), "memory": "120Gi"}
FILL_GPU = {"cpu": "8", "memory": "64Gi", GPU_RESOURCE: "8"}
GIB = 2**30
# A kwok scale-up here: the autoscaler's loop (2 s), the Node created, kwok marks it Ready:
# seconds. A minute and a half before a step fails, for a loaded machine.
STEP_TIMEOUT = 90.0
# The mixin's windows, shortened: a NotTriggerScaleUp counts for 30 s of `for` instead of
# 15 minutes. capacityBufferEventCurrentSeconds stays at its default: the story is shorter.
KNOBS = {"capacityBufferNotProvisionedFor": "30s", "gapTolerance": "20s"}
NOT_PROVISIONED = "KubeScaleCapacityBufferNotProvisioned"
EVERY = 2  # seconds between scrapes, and between rule evaluations
# The collector asks discovery this often (default 1m), so the API's arrival shows fast.
DISCOVERY = "2s"


class Cluster:
    """The control plane, the autoscaler, the exporter and Prometheus, and what the test
    reads of them."""

    def __init__(self, fleet, ca, exporter, prom):
        self.fleet, self.ca, self.exporter, self.prom = fleet, ca, exporter, prom
        self.admin = fleet.admin
        self.buffers = Buffers(fleet.admin, BUFFER_NS)
        self.t0 = time.monotonic()
        self.log = []  # (seconds since start, what)

    def note(self, what, at=None):
        self.log.append((round((at or time.monotonic()) - self.t0, 1), what))

    def wait(self, what, predicate, timeout=STEP_TIMEOUT, every=1.0):
        try:
            at = wait_for(
                what, predicate, timeout, every, check=(self.fleet.check_alive, self.ca.check_alive)
            )
        except TimeoutError as e:
            raise TimeoutError(
                f"{e}; log {self.log}\ncluster-autoscaler:\n{self.ca.proc.log_tail(25)}"
            ) from None
        self.note(what, at)
        return at

    def condition_turns(self, name, kind, status):
        """Once buffer `name`'s condition `kind` reads `status`: its (reason, message)."""
        b = self.buffers
        self.wait(
            f"{name} {kind} {status}", lambda: (b.condition(name, kind) or ("",))[0] == status
        )
        return b.condition(name, kind)[1:]

    def ready_nodes(self, group):
        nodes = self.admin.get("/api/v1/nodes", labelSelector=f"kse.test/node-group={group}")
        return sum(
            1
            for n in nodes["items"]
            for c in n.get("status", {}).get("conditions", [])
            if c["type"] == "Ready" and c["status"] == "True"
        )

    def node_names(self, group) -> set:
        nodes = self.admin.get("/api/v1/nodes", labelSelector=f"kse.test/node-group={group}")
        return {n["metadata"]["name"] for n in nodes["items"]}

    def placed_on(self, ns, label) -> set:
        """The nodes the pods matching `label` are bound to."""
        pods = self.admin.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=label)["items"]
        return {p["spec"].get("nodeName") for p in pods}

    def running(self, ns, label):
        pods = self.admin.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=label)["items"]
        return sum(1 for p in pods if p.get("status", {}).get("phase") == "Running")

    # ---- the exporter and Prometheus ----------------------------------------------------
    def scrape(self) -> dict:
        """The collector's series of one scrape and its success: {(name, labels...): value}."""
        text = requests.get(self.exporter.url + "/metrics", timeout=10).text
        out = {}
        for family in parse_exposition(text):
            for s in family.samples:
                if s.name.startswith("kubescale_capacitybuffer_") or (
                    s.name == "kubescale_scrape_collector_success"
                    and s.labels.get("collector") == "capacitybuffer"
                ):
                    out[(s.name, *sorted(s.labels.items()))] = s.value
        return out

    def series(self, metric, /, **labels):
        return self.scrape().get((f"kubescale_capacitybuffer_{metric}", *sorted(labels.items())))

    def shows_condition(self, name, condition, status, reason) -> bool:
        """The exporter's condition series of buffer `name` reads so."""
        labels = dict(condition=condition, status=status, reason=reason)
        return self.series("condition", namespace=BUFFER_NS, name=name, **labels) == 1

    def last_word(self, name):
        """The reason of the autoscaler's last event on buffer `name`, as the exporter has it."""
        words = [
            dict(key[1:])["reason"]
            for key in self.scrape()
            if key[0] == "kubescale_capacitybuffer_scale_up_event_age_seconds"
            and dict(key[1:])["name"] == name
        ]
        return words[0] if words else None

    def alerts(self) -> dict:
        reply = self.prom.session.get(self.prom.url + "/api/v1/alerts", timeout=5).json()
        return {
            (a["labels"]["alertname"], a["labels"].get("name")): a["state"]
            for a in reply["data"]["alerts"]
            if a["labels"]["alertname"].startswith("KubeScaleCapacityBuffer")
        }


def keep_group(name):
    # The buffer rules and alerts; the slow groups (headroom views, fit-no-node every 4 m)
    # have nothing to show within this story.
    return "capacitybuffer" in name and "slow" not in name and "views" not in name


@pytest.fixture
def make_cluster(tmp_path):
    parts = {}
    workdir = tempfile.mkdtemp(prefix="ca-buffers-", dir="/tmp")

    def make(crd=True, rules=None):
        fleet = parts["fleet"] = Fleet(
            workdir, FleetSize(nodes=0, gpu_nodes=0, pods=0, gpu_pods=0)
        ).start()
        if crd:
            assert install_capacity_buffer_crd(fleet.admin) == list(BUFFER_VERSIONS)
        for ns in (BUFFER_NS, WORKLOAD_NS):
            fleet.admin.create("/api/v1/namespaces", {"metadata": {"name": ns}})
        # With `rules`, the autoscaler runs as a service account holding exactly those.
        kubeconfig = None
        if rules is not None:
            kubeconfig = service_account(fleet.api, "autoscaler", rules, workdir).kubeconfig
        ca = parts["ca"] = ClusterAutoscaler(
            fleet, [CPU_GROUP, GPU_GROUP], buffers=True, kubeconfig=kubeconfig
        ).start()
        assert ca.version == cluster_autoscaler_version()
        print(f"cluster-autoscaler {ca.version} (kwok provider)")
        exporter = parts["exporter"] = start_exporter(
            [
                "--mode",
                "cluster",
                "--collector.capacitybuffer",
                "--capacitybuffer.discovery-interval",
                DISCOVERY,
                "--kube.kubeconfig",
                fleet.kubeconfig,
            ],
            tmp_path,
        )
        target = exporter.url.removeprefix("http://")
        prom = parts["prom"] = PrometheusServer(
            tmp_path,
            {
                "global": {"scrape_interval": f"{EVERY}s", "evaluation_interval": f"{EVERY}s"},
                "rule_files": rule_files(tmp_path, KNOBS, keep_group),
                "scrape_configs": [
                    {
                        "job_name": CLUSTER_JOB,
                        "static_configs": [{"targets": [target], "labels": {"cluster": "kwok"}}],
                    }
                ],
            },
            binary=prometheus_binary(prometheus.NEWEST, "prometheus"),
        ).start()
        return Cluster(fleet, ca, exporter, prom)

    try:
        yield make
    finally:
        for name in ("prom", "ca"):
            if name in parts:
                parts[name].stop()
        if "exporter" in parts:
            parts["exporter"].proc.stop()
        if "fleet" in parts:
            parts["fleet"].stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_buffers_provision_burst_takes_headroom_group_at_max(make_cluster):
    cluster = make_cluster()
    b = cluster.buffers
    b.create_template("cpu-chunk", FILL_CPU)
    b.create_template("gpu-chunk", FILL_GPU, gpu=True)

    # 1. Two buffers on an empty cluster: the autoscaler adds a node per replica in each group.
    created = b.create("cpu", "cpu-chunk", 2)
    b.create("gpu", "gpu-chunk", 1)
    cluster.wait(
        "both buffers ReadyForProvisioning, fake pods injected",
        lambda: b.provisioning("cpu") and b.provisioning("gpu"),
    )
    assert b.get("cpu")["status"]["replicas"] == 2
    assert b.get("gpu")["status"]["replicas"] == 1
    # The autoscaler resolves the template into one it manages (server-side dry run).
    assert b.get("cpu")["status"]["podTemplateRef"]["name"] == "capacitybuffer-cpu-pod-template"
    up = cluster.wait(
        "2 CPU and 1 GPU node Ready for the buffers",
        lambda: (cluster.ready_nodes("cpu"), cluster.ready_nodes("gpu")) == (2, 1),
    )
    cluster.note(f"buffers provisioned {up - created:.0f}s after they were created")
    for name, group in (("cpu", "{cpu 0->2 (max: 4)}"), ("gpu", "{gpu 0->1 (max: 1)}")):
        cluster.wait(f"TriggeredScaleUp on {name}", lambda n=name: b.events(n, "TriggeredScaleUp"))
        message = b.events(name, "TriggeredScaleUp")[0]["message"]
        assert message.startswith("capacity buffer "), message
        assert group in message, message
    assert not b.events("cpu", "NotTriggerScaleUp")
    # Nothing but the Nodes: no pod holds the headroom.
    assert not cluster.admin.get(f"/api/v1/namespaces/{BUFFER_NS}/pods")["items"]

    # What the exporter shows: each buffer, what it holds, and the autoscaler's last word.
    cluster.wait(
        "the exporter sees both buffers provisioned",
        lambda: (
            cluster.last_word("cpu") == "TriggeredScaleUp"
            and cluster.last_word("gpu") == "TriggeredScaleUp"
        ),
    )
    got = cluster.scrape()
    assert got[("kubescale_scrape_collector_success", ("collector", "capacitybuffer"))] == 1
    assert cluster.series("buffers") == 2
    assert cluster.series("replicas", namespace=BUFFER_NS, name="cpu", source="spec") == 2
    assert cluster.series("replicas", namespace=BUFFER_NS, name="cpu", source="status") == 2
    assert (
        cluster.series("reserved", namespace=BUFFER_NS, name="cpu", resource="cpu", unit="core")
        == 2 * 31
    )
    assert (
        cluster.series(
            "reserved", namespace=BUFFER_NS, name="gpu", resource="nvidia_com_gpu", unit="integer"
        )
        == 8
    )
    assert cluster.series("cluster_reserved", resource="cpu", unit="core") == 2 * 31 + 8
    assert cluster.series("cluster_placeable", resource="cpu", unit="core") == 2 * 31 + 8
    assert cluster.series("cluster_reserved", resource="memory", unit="byte") == (240 + 64) * GIB
    for condition, status, reason in (
        ("ReadyForProvisioning", "True", "AttributesSetSuccessfully"),
        ("Provisioning", "True", "FakePodsInjected"),
        ("LimitedByQuotas", "False", "ResourceQuotasAllocated"),
    ):
        assert cluster.shows_condition("cpu", condition, status, reason)
    problems = {k: v for k, v in got.items() if k[0] == "kubescale_capacitybuffer_problems"}
    assert problems and not any(problems.values()), problems

    # 2. A burst of real pods (priority 0, no preemption: nothing to preempt) takes both CPU
    # nodes at once; the buffer's virtual pods no longer fit, and the autoscaler adds two
    # nodes: the headroom is back, the CPU group at its max of 4.
    burst = deployment("app", WORKLOAD_NS, 2, FILL_CPU, labels={"app": "app"}, gpu=False)
    buffer_nodes = cluster.node_names("cpu")
    started = time.monotonic()
    apply_deployment(cluster.admin, burst)
    placed = cluster.wait(
        "the burst Running on the buffer's nodes",
        lambda: cluster.running(WORKLOAD_NS, "app=app") == 2,
        every=0.2,
    )
    # The burst did not wait for a node: it is bound to the nodes the buffer had made. (The
    # autoscaler's two new nodes may already be Ready by now: kwok makes them in a second.)
    assert cluster.placed_on(WORKLOAD_NS, "app=app") == buffer_nodes, "the burst waited for a node"
    back = cluster.wait(
        "headroom back: 4 CPU nodes Ready", lambda: cluster.ready_nodes("cpu") == 4, every=0.5
    )
    cluster.note(
        f"burst Running {placed - started:.1f}s after it was created, headroom back "
        f"{back - placed:.0f}s later"
    )
    assert cluster.ca.logged("Final scale-up plan: [{cpu 2->4 (max: 4)}]")
    # The autoscaler posts one event per reason per buffer in 5 minutes (its recorder's spam
    # filter, unless --record-duplicated-events): this scale-up left no second event.
    (event,) = b.events("cpu", "TriggeredScaleUp")
    assert event.get("count", 1) == 1 and "cpu 0->2" in event["message"], event
    # The buffer's series cannot see the burst: its replicas are virtual, and what it holds
    # is what it asks for; only the nodes tell.
    assert cluster.series("cluster_reserved", resource="cpu", unit="core") == 2 * 31 + 8
    assert cluster.alerts() == {}

    # 3. The burst grows by two nodes' worth and takes them: the CPU group is at its max,
    # the buffer cannot be provisioned and the autoscaler says so on it.
    apply_deployment(cluster.admin, {**burst, "spec": {**burst["spec"], "replicas": 4}})
    cluster.wait("the grown burst Running", lambda: cluster.running(WORKLOAD_NS, "app=app") == 4)
    cluster.wait("NotTriggerScaleUp on cpu", lambda: b.events("cpu", "NotTriggerScaleUp"))
    message = b.events("cpu", "NotTriggerScaleUp")[0]["message"]
    assert message.startswith("capacity buffer 2 fake pods didn't trigger scale-up"), message
    assert "max node group size reached" in message, message
    # The buffer itself still reads ready: only the events tell it is not provisioned.
    assert b.provisioning("cpu")
    assert cluster.ready_nodes("cpu") == CPU_GROUP.max_size
    seen = cluster.wait(
        "the exporter's last word on cpu: NotTriggerScaleUp",
        lambda: cluster.last_word("cpu") == "NotTriggerScaleUp",
        every=0.5,
    )
    # Counted among the cluster's problems (per buffer, only problems of its own objects).
    assert cluster.series("problems", reason="scale_up_not_triggered") == 1
    assert cluster.last_word("gpu") == "TriggeredScaleUp"
    # The alert fires once its `for` has passed, not before; the GPU buffer stays quiet.
    fired = cluster.wait(
        f"{NOT_PROVISIONED} firing",
        lambda: cluster.alerts().get((NOT_PROVISIONED, "cpu")) == "firing",
        every=0.5,
    )
    assert 30 - EVERY <= fired - seen <= 30 + 5 * EVERY, cluster.log
    assert (NOT_PROVISIONED, "gpu") not in cluster.alerts()

    # 4. The group's max raised to 6: the autoscaler adds the two nodes the buffer asks for.
    # The kwok provider reads its groups at start, so the autoscaler starts again (a real
    # provider re-reads them); the new process's event filter starts empty, so it posts a
    # TriggeredScaleUp at once, where a long-running one might hold it back up to 5 minutes.
    raised = time.monotonic()
    cluster.ca.restart([NodeGroup("cpu", max_size=6)])
    cluster.wait("headroom back after the max was raised", lambda: cluster.ready_nodes("cpu") == 6)
    assert cluster.ca.logged("Final scale-up plan: [{cpu 4->6 (max: 6)}]")
    cluster.note(f"max raised: headroom back in {time.monotonic() - raised:.0f}s")
    cluster.wait(
        "TriggeredScaleUp cpu 4->6",
        lambda: any("cpu 4->6" in e["message"] for e in b.events("cpu", "TriggeredScaleUp")),
    )
    word = cluster.wait(
        "the exporter's last word on cpu: TriggeredScaleUp",
        lambda: cluster.last_word("cpu") == "TriggeredScaleUp",
        every=0.5,
    )
    cleared = cluster.wait(f"{NOT_PROVISIONED} cleared", lambda: cluster.alerts() == {}, every=0.5)
    assert cleared - word <= 4 * EVERY, cluster.log
    print(json.dumps(cluster.log))


def test_buffers_both_api_versions_template_deleted_quota(make_cluster):
    cluster = make_cluster()
    b = cluster.buffers
    b.create_template("alpha-chunk", FILL_CPU)
    b.create_template("beta-chunk", FILL_CPU)

    # A buffer made through each version; the API server stores v1beta1 and serves both.
    b.create("alpha", "alpha-chunk", 1, version="v1alpha1")
    b.create("beta", "beta-chunk", 1, version="v1beta1")
    for name in ("alpha", "beta"):
        for version in BUFFER_VERSIONS:
            got = b.get(name, version)
            assert got["apiVersion"] == f"autoscaling.x-k8s.io/{version}"
            assert got["spec"]["replicas"] == 1
            assert got["spec"]["provisioningStrategy"] == "buffer.x-k8s.io/active-capacity"
    cluster.wait(
        "both buffers provisioning", lambda: b.provisioning("alpha") and b.provisioning("beta")
    )
    cluster.wait("a node for each", lambda: cluster.ready_nodes("cpu") == 2)
    for name in ("alpha", "beta"):
        cluster.wait(f"TriggeredScaleUp on {name}", lambda n=name: b.events(n, "TriggeredScaleUp"))
    # The v1alpha1 object's status as the autoscaler (a v1beta1 client) wrote it.
    assert b.get("alpha", "v1alpha1")["status"]["replicas"] == 1
    # The exporter watches v1beta1, where both are, whichever version made them.
    cluster.wait(
        "the exporter sees both provisioned",
        lambda: cluster.last_word("alpha") == cluster.last_word("beta") == "TriggeredScaleUp",
    )
    for version in BUFFER_VERSIONS:
        assert cluster.series("api_served", version=version) == 1
    assert cluster.series("api_watched", version="v1beta1") == 1
    for name in ("alpha", "beta"):
        assert (
            cluster.series("reserved", namespace=BUFFER_NS, name=name, resource="cpu", unit="core")
            == 31
        )

    # The PodTemplate of one is deleted: that buffer is no longer ready, its fake pods go.
    cluster.admin.delete(f"/api/v1/namespaces/{BUFFER_NS}/podtemplates/alpha-chunk")
    reason, message = cluster.condition_turns("alpha", "ReadyForProvisioning", "False")
    assert reason == "error", (reason, message)
    assert "alpha-chunk" in message and "not found" in message, message
    cluster.wait(
        "alpha not provisioning",
        lambda: (
            (b.condition("alpha", "Provisioning") or ("", ""))[:2]
            == ("False", "NotReadyForProvisioning")
        ),
    )
    assert "replicas" not in b.get("alpha")["status"]
    assert b.provisioning("beta")
    cluster.wait(
        "the exporter: alpha's template missing, not ready, nothing reserved",
        lambda: (
            cluster.series(
                "problem", namespace=BUFFER_NS, name="alpha", reason="pod_template_missing"
            )
            == 1
            and cluster.shows_condition("alpha", "ReadyForProvisioning", "False", "error")
            and cluster.series("replicas", namespace=BUFFER_NS, name="alpha", source="status") == 0
        ),
    )
    assert cluster.series("cluster_reserved", resource="cpu", unit="core") == 31
    assert cluster.series("problems", reason="not_ready") == 1  # alpha alone

    # A ResourceQuota below two replicas' requests: the autoscaler cuts the buffer to one.
    cluster.admin.create(
        f"/api/v1/namespaces/{BUFFER_NS}/resourcequotas",
        {
            "metadata": {"name": "cpu"},
            "spec": {"hard": {"requests.cpu": str(int(FILL_CPU["cpu"]) * 3 // 2)}},
        },
    )
    cluster.admin.merge_patch(
        f"/apis/autoscaling.x-k8s.io/v1beta1/namespaces/{BUFFER_NS}/capacitybuffers/beta",
        {"spec": {"replicas": 2}},
    )
    reason, message = cluster.condition_turns("beta", "LimitedByQuotas", "True")
    assert reason == "ResourceQuotasAllocated", (reason, message)
    assert "limited from 2 to 1" in message, message
    assert b.get("beta")["status"]["replicas"] == 1
    cluster.wait(
        "the exporter: beta limited by quotas, 1 of 2 replicas",
        lambda: (
            cluster.shows_condition("beta", "LimitedByQuotas", "True", "ResourceQuotasAllocated")
            and cluster.series("problems", reason="limited_by_quotas") == 1
            and cluster.series("replicas", namespace=BUFFER_NS, name="beta", source="spec") == 2
            and cluster.series("replicas", namespace=BUFFER_NS, name="beta", source="status") == 1
        ),
    )
    # Both alerts see it at once (pending; their `for` is 15 m here, the mixin's default,
    # except NotProvisioned's).
    cluster.wait(
        "NotProvisioned for both, BelowRequested for beta",
        lambda: (
            {k for k, state in cluster.alerts().items() if state in ("pending", "firing")}
            >= {
                (NOT_PROVISIONED, "alpha"),
                (NOT_PROVISIONED, "beta"),
                ("KubeScaleCapacityBufferBelowRequested", "beta"),
            }
        ),
        every=0.5,
    )
    print(json.dumps(cluster.log))


def test_api_absent_collector_off_autoscaler_waits_for_the_crd(make_cluster):
    # A cluster without the CapacityBuffer API, where the autoscaler's buffer switches are
    # already on (the CRD not installed yet).
    cluster = make_cluster(crd=False)
    app = deployment("app", WORKLOAD_NS, 1, FILL_CPU, labels={"app": "app"}, gpu=False)
    pending = time.monotonic()
    apply_deployment(cluster.admin, app)

    # The collector is off, not failed: the scrape succeeds with no buffer but the API's.
    cluster.wait(
        "the exporter: API not served",
        lambda: cluster.series("api_served", version="v1beta1") == 0,
        every=0.5,
    )
    got = cluster.scrape()
    assert got[("kubescale_scrape_collector_success", ("collector", "capacitybuffer"))] == 1
    assert {k[0] for k in got} == {
        "kubescale_scrape_collector_success",
        "kubescale_capacitybuffer_api_served",
        "kubescale_capacitybuffer_api_watched",
    }, got
    assert not any(v for k, v in got.items() if k[0] != "kubescale_scrape_collector_success")

    # The autoscaler waits for the buffers' informer to sync before its first loop: it adds
    # no node for the Pending pod while the CRD is missing.
    time.sleep(20)
    assert cluster.ready_nodes("cpu") == 0
    assert not cluster.ca.logged("Autoscaler loop triggered")
    assert cluster.ca.logged("failed to list *v1beta1.CapacityBuffer")
    assert cluster.running(WORKLOAD_NS, "app=app") == 0

    # The CRD installed: the collector turns on at its next discovery, and the autoscaler
    # starts and adds the node (its informer retries with a growing backoff).
    installed = time.monotonic()
    install_capacity_buffer_crd(cluster.admin)
    on = cluster.wait(
        "the exporter watches v1beta1",
        lambda: cluster.series("api_watched", version="v1beta1") == 1,
        every=0.5,
    )
    assert cluster.series("buffers") == 0
    assert on - installed <= 3 * int(DISCOVERY.removesuffix("s")) + EVERY, cluster.log
    ran = cluster.wait(
        "the Pending pod Running on a node the autoscaler added",
        lambda: cluster.running(WORKLOAD_NS, "app=app") == 1,
    )
    cluster.note(
        f"pod Pending {ran - pending:.0f}s, {ran - installed:.0f}s of it after the CRD came"
    )
    print(json.dumps(cluster.log))


def test_autoscaler_rbac_for_buffers(make_cluster):
    # Its own rules and the buffers', but not `create pods`: the dry run that resolves the
    # template is forbidden, and the buffer says so.
    cluster = make_cluster(rules=[*AUTOSCALER_RULES, *BUFFER_RULES])
    b = cluster.buffers
    b.create_template("cpu-chunk", FILL_CPU)
    b.create("cpu", "cpu-chunk", 1)
    # Not ready: the dry run forbidden.
    reason, message = cluster.condition_turns("cpu", "ReadyForProvisioning", "False")
    assert reason == "error", (reason, message)
    assert "failed to create fake pod" in message and "forbidden" in message, message
    assert 'cannot create resource "pods"' in message, message
    cluster.wait(
        "the exporter: not ready",
        lambda: (
            cluster.shows_condition("cpu", "ReadyForProvisioning", "False", "error")
            and cluster.series("problems", reason="not_ready") == 1
        ),
    )
    assert cluster.ready_nodes("cpu") == 0

    # The same with `create pods`: provisioned.
    granted = [*AUTOSCALER_RULES, *BUFFER_RULES, DRY_RUN_RULE]
    account = service_account(cluster.fleet.api, "autoscaler", granted, cluster.fleet.workdir)
    cluster.ca.restart(kubeconfig=account.kubeconfig)
    cluster.wait(
        "provisioned once the dry run is allowed",
        lambda: b.provisioning("cpu") and cluster.ready_nodes("cpu") == 1,
    )
    # Nothing else it asked for was refused, before or after.
    log = pathlib.Path(cluster.ca.proc.log_path).read_text(errors="replace").splitlines()
    refused = [line for line in log if "is forbidden" in line]
    assert refused, "the dry run was not refused"
    assert all("cannot create resource" in r and "pods" in r for r in refused), refused[:3]
    print(json.dumps(cluster.log))
