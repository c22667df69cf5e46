"""What `check` says for each buffer problem the alerts cover, on buffers as
cluster-autoscaler 1.36 leaves them (conditions, events) and the collector summarizes them."""

from io import StringIO

import pytest

from kube_scale_exporter.check import LABELS
from kube_scale_exporter.collectors.capacitybuffer.advice import KIND_CHARS, advise
from kube_scale_exporter.collectors.capacitybuffer.state import BufferState
from kube_scale_exporter.collectors.capacitybuffer.summary import PROBLEMS, summarize
from tests.capacitybuffer.objects import buffer, condition, event, provisioned, ready, template
from tests.capacitybuffer.test_golden import NOW, SHAPES
from tests.capacitybuffer.test_golden import state as golden_state

pytestmark = pytest.mark.unit

GPU_REQUESTS = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"}
NOT_READY = "Buffer not ready for provisioning: "


def findings(buffers, templates=(), events=(), shapes=SHAPES):
    s = summarize(buffers, list(templates), list(events), list(shapes), NOW)
    return advise(BufferState(frozenset({"v1beta1"}), "v1beta1", s, NOW, 20, True))


def unresolved(why, *more):
    """A status as cluster-autoscaler 1.36 writes it for a buffer it cannot resolve: `why`."""
    return {
        "conditions": [
            condition("ReadyForProvisioning", "False", "error", NOT_READY + why),
            *more,
        ]
    }


def about(found, problem):
    """The one finding whose summary says `problem`."""
    (f,) = [f for f in found if problem in f.summary]
    return f


def printed(found):
    """The findings as `check` prints them."""
    out = StringIO()
    for f in found:
        out.write(f"  {LABELS.get(f.severity, ''):<8} {f.summary}\n")
        for line in f.advice.splitlines():
            out.write(f"  {'':<8}   {line}\n")
    return out.getvalue()


def test_a_deleted_pod_template_names_it_and_the_two_ways_out():
    # As the autoscaler leaves a buffer whose PodTemplate was deleted: not ready, reason
    # error, and Provisioning False because of it.
    found = findings(
        [
            buffer(
                "web",
                spec={"podTemplateRef": {"name": "web-pods"}, "replicas": 2},
                status=unresolved(
                    'podtemplates "web-pods" not found',
                    condition(
                        "Provisioning",
                        "False",
                        "NotReadyForProvisioning",
                        "CapacityBuffer is not ready for provisioning",
                    ),
                ),
            )
        ]
    )
    missing = about(found, PROBLEMS["pod_template_missing"])
    assert missing.severity == "critical"
    assert "no PodTemplate 'web-pods' in shop" in missing.advice
    assert "kubectl -n shop get podtemplates" in missing.advice
    assert (
        'kubectl -n shop patch capacitybuffer web --type merge -p \'{"spec":{"podTemplateRef":'
        '{"name":"NAME"}}}\''
    ) in missing.advice
    not_ready = about(found, PROBLEMS["not_ready"])
    assert not_ready.advice.startswith("shop/web: ReadyForProvisioning False, reason error.")
    assert "kubectl describe capacitybuffer -n shop web" in not_ready.advice
    assert "the PodTemplate 'web-pods' is missing" in not_ready.advice
    provisioning = about(found, PROBLEMS["not_provisioning"])
    assert "not ReadyForProvisioning: fix that first" in provisioning.advice
    # Not ready explains the missing replicas: no separate "fewer replicas" finding.
    assert not [f for f in found if "cut by spec.limits" in f.summary]


def test_limited_by_quotas_says_how_much_more_quota_the_missing_replicas_need():
    found = findings(
        *provisioned(
            "train",
            GPU_REQUESTS,
            3,
            resolved=1,
            conditions=[
                condition(
                    "LimitedByQuotas",
                    "True",
                    "ResourceQuotasAllocated",
                    "Buffer replicas limited from 3 to 1 due to quotas: gpu-quota",
                )
            ],
            namespace="ml",
        )
    )
    f = about(found, PROBLEMS["limited_by_quotas"])
    assert f.severity == "warning" and f.summary.endswith("(ml/train)")
    assert "the quota allows 1 replica(s) of 3" in f.advice
    assert "the 2 replica(s) it lacks need 16 cpu, 128Gi memory, 8 nvidia.com/gpu" in f.advice
    assert "kubectl -n ml edit resourcequota QUOTA" in f.advice
    assert not [f for f in found if "cut by spec.limits" in f.summary]


def test_not_trigger_scale_up_gives_the_events_command_the_node_size_and_raising_the_max():
    found = findings(
        *provisioned("gpu", GPU_REQUESTS, namespace="ml"),
        [
            event(
                "gpu",
                "NotTriggerScaleUp",
                "2026-01-01T11:58:30Z",
                namespace="ml",
                message="capacity buffer 1 fake pods didn't trigger scale-up: "
                "1 max node group size reached",
            )
        ],
    )
    f = about(found, PROBLEMS["scale_up_not_triggered"])
    assert f.severity == "critical"
    assert (
        "kubectl get events -n ml --field-selector "
        "involvedObject.kind=CapacityBuffer,involvedObject.name=gpu"
    ) in f.advice
    assert "Each replica needs a node with 8 cpu, 64Gi memory, 4 nvidia.com/gpu" in f.advice
    assert "--nodes=MIN:MAX:GROUP" in f.advice and "--max-size N" in f.advice


def test_an_old_not_trigger_scale_up_is_not_advised_on():
    found = findings(
        *provisioned("web", {"cpu": "1"}),
        [event("web", "NotTriggerScaleUp", "2026-01-01T11:30:00Z")],
    )
    assert [f.severity for f in found] == ["info"]


def test_replicas_cut_by_limits_get_the_limits_patch_for_the_replicas_asked():
    # 4 replicas of 2 CPUs / 4Gi asked, limits of 4 CPUs: the autoscaler resolves 2.
    found = findings(
        [
            buffer(
                "api",
                spec={"podTemplateRef": {"name": "api"}, "replicas": 4, "limits": {"cpu": "4"}},
                status=ready(2, "capacity-buffer-api-pod-template"),
            )
        ],
        [
            template("api", requests={"cpu": "2", "memory": "4Gi"}),
            template(
                "capacity-buffer-api-pod-template", requests={"cpu": "1500m", "memory": "1536Mi"}
            ),
        ],
    )
    (f,) = [f for f in found if f.severity != "info"]
    assert f.summary == (
        "1 CapacityBuffer(s): fewer replicas resolved than spec.replicas asks for, cut by "
        "spec.limits (shop/api)"
    )
    # One replica is the autoscaler's resolved template: 1.5 CPUs and 1.5 GiB.
    assert "shop/api: 2 of 4 replicas resolved" in f.advice
    assert (
        'kubectl -n shop patch capacitybuffer api --type merge -p \'{"spec":{"limits":'
        '{"cpu":"6","memory":"6Gi"}}}\''
    ) in f.advice


def test_a_pod_larger_than_every_node_quotes_its_requests_and_its_template():
    found = findings(*provisioned("huge", {"cpu": "64", "memory": "8Gi"}))
    f = about(found, PROBLEMS["requests_fit_no_node"])
    assert f.severity == "critical"
    assert "shop/huge: one replica requests 64 cpu, 8Gi memory" in f.advice
    assert "kubectl -n shop edit podtemplate huge" in f.advice
    assert ".status.allocatable.nvidia\\.com/gpu" in f.advice


def test_an_unsupported_scalable_kind_is_named_with_the_kinds_the_autoscaler_reads():
    long_kind = "W" * 10_000
    found = findings(
        [
            buffer(
                "crd",
                spec={
                    "scalableRef": {"apiGroup": "example.com", "kind": "Widget", "name": "w"},
                    "percentage": 10,
                },
                status=unresolved("unsupported scalable object kind"),
            ),
            buffer(
                "odd",
                spec={
                    "scalableRef": {"apiGroup": "example.com", "kind": long_kind, "name": "w"},
                    "replicas": 1,
                },
            ),
        ]
    )
    f = about(found, PROBLEMS["scalable_kind_unknown"])
    lines = f.advice.splitlines()
    assert lines[0].startswith("shop/crd: scalableRef names example.com/Widget;")
    for kind in ("apps/Deployment", "apps/StatefulSet", "batch/Job", "ReplicationController"):
        assert kind in lines[0]
    assert "spec.podTemplateRef instead" in lines[0]
    # The user's text is quoted bounded.
    assert (
        f"scalableRef names example.com/{'W' * (KIND_CHARS - len('example.com/'))};" in (lines[1])
    )
    assert len(lines[1]) < 600


def test_buffers_the_autoscaler_does_not_reconcile_share_one_line_with_its_flags():
    found = findings(
        [
            buffer("a", spec={"podTemplateRef": {"name": "t"}, "replicas": 1}),
            buffer("b", spec={"podTemplateRef": {"name": "t"}, "replicas": 2}),
        ],
        [template("t", requests={"cpu": "1"})],
    )
    f = about(found, PROBLEMS["not_ready"])
    assert f.advice.splitlines() == [
        "shop/a, shop/b: no ReadyForProvisioning condition: cluster-autoscaler is not "
        "reconciling buffers. Add --capacity-buffer-controller-enabled=true and "
        "--capacity-buffer-pod-injection-enabled=true to its container's args (kubectl -n "
        "kube-system edit deployment cluster-autoscaler)."
    ]


def test_a_healthy_buffer_is_one_info_line_and_every_problem_has_advice():
    healthy = findings(
        *provisioned("web", {"cpu": "2"}, 4),
        [event("web", "TriggeredScaleUp", "2026-01-01T11:58:00Z")],
    )
    assert printed(healthy) == "           1 CapacityBuffer(s) (v1beta1) holding 8 CPU\n"
    for f in advise(golden_state()):
        if f.severity != "info":
            assert f.advice.strip(), f.summary
