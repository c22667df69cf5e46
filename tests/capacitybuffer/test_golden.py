"""The capacitybuffer exposition for fixed objects, byte for byte
(tests/golden/capacitybuffer.prom), and each bad input's reason."""

import time
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from kube_scale_exporter.budgets import COLLECTOR_SERIES
from kube_scale_exporter.collectors.capacitybuffer.advice import advise
from kube_scale_exporter.collectors.capacitybuffer.collector import MAX_BUFFERS
from kube_scale_exporter.collectors.capacitybuffer.state import BufferState, families
from kube_scale_exporter.collectors.capacitybuffer.summary import (
    EVENT_CURRENT_SECONDS,
    PROBLEMS,
    summarize,
)
from testbed.golden import assert_golden, render, series_count
from tests.capacitybuffer.objects import buffer, condition, event, ready, template, with_copy

pytestmark = pytest.mark.unit

PREFIX = "kubescale_capacitybuffer_"
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
GPU_NODE = {"cpu": Decimal(32), "memory": Decimal(256 * 2**30), "nvidia.com/gpu": Decimal(8)}
CPU_NODE = {"cpu": Decimal(16), "memory": Decimal(64 * 2**30)}
SHAPES = [CPU_NODE, GPU_NODE]

TEMPLATES = [
    *with_copy("web", requests={"cpu": "2", "memory": "8Gi"}),
    *with_copy(
        "train", namespace="ml", requests={"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"}
    ),
    template("huge", requests={"cpu": "64"}),
    template("empty", requests={}),
    template("bad", requests={"cpu": "two"}),
    template(
        "capacity-buffer-api-pod-template",
        requests={"cpu": "1", "memory": "2Gi"},
        init_requests={"cpu": "3"},
    ),
]
BUFFERS = [
    # Ready and provisioned: 4 replicas of 2 CPUs / 8 GiB.
    buffer(
        "web",
        spec={
            "podTemplateRef": {"name": "web"},
            "replicas": 4,
            "provisioningStrategy": "buffer.x-k8s.io/active-capacity",
        },
        status=ready(4, "capacity-buffer-web-pod-template"),
    ),
    # GPU buffer cut by a quota from 3 to 1.
    buffer(
        "train",
        namespace="ml",
        spec={"podTemplateRef": {"name": "train"}, "replicas": 3},
        status=ready(
            1,
            "capacity-buffer-train-pod-template",
            condition("LimitedByQuotas", "True", "ResourceQuotasAllocated"),
        ),
    ),
    # scalableRef to a Deployment, sized by limits: the autoscaler's resolved copy.
    buffer(
        "api",
        spec={
            "scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "api"},
            "limits": {"cpu": "10"},
        },
        status=ready(3, "capacity-buffer-api-pod-template"),
    ),
    # The PodTemplate it names is gone; the autoscaler says so.
    buffer(
        "gone",
        spec={"podTemplateRef": {"name": "gone"}, "replicas": 2},
        status={
            "conditions": [
                condition("ReadyForProvisioning", "False", "error"),
                condition("Provisioning", "False", "NotReadyForProvisioning"),
            ]
        },
    ),
    # A kind the autoscaler reads no template from, not yet resolved.
    buffer(
        "crd",
        spec={
            "scalableRef": {"apiGroup": "example.com", "kind": "Widget", "name": "w"},
            "percentage": 10,
        },
    ),
    # Neither replicas, percentage nor limits (the CRD lets this through with a scalableRef).
    buffer("bare", spec={"scalableRef": {"apiGroup": "apps", "kind": "StatefulSet", "name": "db"}}),
    # Neither reference.
    buffer("nothing", spec={"replicas": 1}),
    # A quantity that does not parse, in its limits.
    buffer("badlimit", spec={"podTemplateRef": {"name": "web"}, "limits": {"cpu": "lots"}}),
    # A quantity that does not parse, in its template (a hand-written object in the cache).
    buffer("badreq", spec={"podTemplateRef": {"name": "bad"}, "replicas": 1}),
    # Requests nothing; and one replica larger than every node.
    buffer("idle", spec={"podTemplateRef": {"name": "empty"}, "replicas": 1}),
    buffer(
        "huge",
        spec={
            "podTemplateRef": {"name": "huge"},
            "replicas": 1,
            "provisioningStrategy": "example.com/standby",
        },
        status={
            "replicas": 1,
            "conditions": [
                condition("ReadyForProvisioning", "True", "AttributesSetSuccessfully"),
                condition("Provisioning", "True", "SomeFutureReason"),
            ],
        },
    ),
]
EVENTS = [
    event("web", "NotTriggerScaleUp", "2026-01-01T11:20:00Z"),
    event("web", "TriggeredScaleUp", "2026-01-01T11:58:00Z"),  # the later: the last word
    event("train", "NotTriggerScaleUp", "2026-01-01T11:59:30Z", namespace="ml"),
    event("huge", "NotTriggerScaleUp", "2026-01-01T11:30:00Z"),  # too old to be current
    event("api", "NotTriggerScaleUp", "2026-01-01T11:59:00Z", uid="an-older-buffer"),
    {
        "metadata": {"name": "x", "namespace": "shop"},
        "reason": "NotTriggerScaleUp",
        "involvedObject": {"name": "web", "namespace": "shop"},
        "lastTimestamp": "not a time",
    },
]


def state(
    buffers=BUFFERS,
    templates=TEMPLATES,
    events=EVENTS,
    shapes=SHAPES,
    max_buffers=20,
    node_fit=True,
):
    s = summarize(buffers, templates, events, shapes, NOW, node_fit=node_fit)
    return BufferState(frozenset({"v1beta1", "v1alpha1"}), "v1beta1", s, NOW, max_buffers, node_fit)


def test_golden():
    assert_golden("capacitybuffer", families(state()))


def by_name(s):
    return {b.name: b for b in s.buffers}


def test_each_bad_input_has_its_own_reason_and_the_rest_is_reported():
    s = state().summary
    b = by_name(s)
    assert b["gone"].problems == ["pod_template_missing", "not_ready", "not_provisioning"]
    assert b["crd"].problems == ["scalable_kind_unknown", "not_ready"]
    assert b["crd"].template_from == "other"
    assert b["bare"].problems == ["no_replicas_or_limits", "not_ready"]
    assert b["nothing"].problems == ["no_template", "not_ready"]
    assert "quantity_unparsable" in b["badlimit"].problems
    assert "quantity_unparsable" in b["badreq"].problems and b["badreq"].requests is None
    assert "no_requests" in b["idle"].problems
    assert "requests_fit_no_node" in b["huge"].problems
    assert b["huge"].strategy == "other"
    assert b["huge"].conditions[1] == ("Provisioning", "True", "other")
    assert b["train"].problems == ["limited_by_quotas", "scale_up_not_triggered"]
    assert b["web"].problems == [] and b["web"].last_word.reason == "TriggeredScaleUp"
    # An event on an older buffer of the same name is not this buffer's word.
    assert b["api"].last_word is None
    # The template the autoscaler resolved (init container's 3 CPUs over the app's 1).
    assert b["api"].requests["cpu"] == 3 and b["api"].template_from == "Deployment"
    assert s.reserved["cpu"] == 4 * 2 + 1 * 8 + 3 * 3 + 1 * 64
    assert s.placeable["cpu"] == 4 * 2 + 1 * 8 + 3 * 3  # the 64-CPU replica fits no node
    assert s.reserved["nvidia.com/gpu"] == 4


def test_an_old_not_trigger_scale_up_is_kept_but_is_no_longer_a_problem():
    s = state().summary
    huge = by_name(s)["huge"]
    assert huge.last_word.reason == "NotTriggerScaleUp"
    assert "scale_up_not_triggered" not in huge.problems
    assert NOW - huge.last_word.at > EVENT_CURRENT_SECONDS


def test_without_node_shapes_there_is_no_fit_verdict_and_no_placeable_series():
    fams = {f.name: f for f in families(state(shapes=[], node_fit=True))}
    assert "kubescale_capacitybuffer_cluster_placeable" not in fams
    s = state(shapes=[]).summary
    assert s.problems["requests_fit_no_node"] == 0


def test_the_api_absent_is_off_not_an_error():
    off = BufferState(frozenset(), None, None, NOW, 20, True)
    fams = families(off)
    assert [f.name for f in fams] == [
        "kubescale_capacitybuffer_api_served",
        "kubescale_capacitybuffer_api_watched",
    ]
    assert all(s.value == 0 for f in fams for s in f.samples)
    assert [f.severity for f in advise(off)] == ["info"]


def test_check_advice_names_the_buffers_of_each_problem():
    findings = advise(state())
    text = "\n".join(f.summary for f in findings)
    for reason in PROBLEMS:
        if reason in ("not_provisioning",):
            continue
        assert PROBLEMS[reason] in text, reason
    assert "shop/gone" in text
    assert any(f.severity == "critical" and "shop/gone" in f.summary for f in findings)


def test_the_per_buffer_cap_holds_at_100000_buffers_and_the_sums_count_them_all():
    many = [
        buffer(
            f"b{i:06d}",
            spec={"podTemplateRef": {"name": "web"}, "replicas": 1},
            status=ready(1, "web"),
        )
        for i in range(100_000)
    ]
    start = time.process_time()
    st = state(buffers=many, events=[], max_buffers=20)
    text = render(families(st))
    elapsed = time.process_time() - start
    assert st.summary.reserved["cpu"] == 200_000
    fams = {f.name: f for f in families(st)}
    assert fams["kubescale_capacitybuffer_buffers"].samples[0].value == 100_000
    assert fams["kubescale_capacitybuffer_buffers_over_cap"].samples[0].value == 99_980
    per_buffer = {s.labels.get("name") for f in fams.values() for s in f.samples} - {None}
    assert len(per_buffer) == 20
    # CPU time, not wall: a loaded machine slows the test, it adds no CPU.
    assert elapsed < 8, elapsed
    assert series_count(text) < 29 + 20 * 13


def test_series_per_buffer_fit_the_budget_entry():
    worst = buffer(
        "w",
        spec={"podTemplateRef": {"name": "train"}, "replicas": 3},
        status=ready(1, "train", condition("LimitedByQuotas", "True", "ResourceQuotasAllocated")),
    )
    many = [
        {**worst, "metadata": {**worst["metadata"], "name": f"w{i}"}} for i in range(MAX_BUFFERS)
    ]
    evs = [event(f"w{i}", "NotTriggerScaleUp", "2026-01-01T11:59:30Z") for i in range(MAX_BUFFERS)]
    for b in many:
        b["metadata"]["namespace"] = "ml"
    for e in evs:
        e["involvedObject"]["namespace"] = "ml"
        e["involvedObject"]["uid"] = None
    text = render(families(state(buffers=many, events=evs)))
    # The worst buffer: both replicas, 3 resources twice, info, 3 conditions, its last word.
    assert series_count(text) == 29 + MAX_BUFFERS * 13
    assert series_count(text) <= COLLECTOR_SERIES["capacitybuffer"]["cluster"]


def test_past_the_cache_cap_every_buffer_counts_and_what_is_left_out_says_why():
    """The watches past --capacitybuffer.max-cached-objects: 95,000 buffers counted by key,
    and two buffers whose PodTemplates are past the PodTemplates' cap: they exist (no
    pod_template_missing), but what the buffers hold is unknown, so the sums leave them
    out and say so."""
    named = buffer(
        "far",
        spec={"podTemplateRef": {"name": "far"}, "replicas": 2},
        status=ready(2, "far"),
    )
    scaled = buffer(
        "dep",
        spec={"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "dep"}},
        status=ready(3, "capacity-buffer-dep-pod-template"),
    )
    web, web_templates = BUFFERS[0], with_copy("web", requests={"cpu": "2", "memory": "8Gi"})
    s = summarize(
        [web, named, scaled],
        web_templates,
        [],
        SHAPES,
        NOW,
        not_cached={"capacitybuffers": 95_000, "podtemplates": 2, "events": 7},
        templates_past_cap=frozenset({"shop/far", "shop/capacity-buffer-dep-pod-template"}),
    )
    b = by_name(s)
    for name in ("far", "dep"):
        assert b[name].template_not_cached and b[name].requests is None
        assert not {"pod_template_missing", "scalable_kind_unknown"} & set(b[name].problems)
    assert not b["web"].template_not_cached
    assert s.untracked == {"cache_full": 95_000, "template_not_cached": 2, "unreadable": 0}
    assert s.total == 95_003
    assert s.reserved["cpu"] == 4 * 2  # web's alone: the others' requests are unknown
    st = BufferState(frozenset({"v1beta1"}), "v1beta1", s, NOW, 20, True)
    fams = {f.name: f for f in families(st)}
    assert fams["kubescale_capacitybuffer_buffers"].samples[0].value == 95_003
    untracked = {x.labels["reason"]: x.value for x in fams[f"{PREFIX}buffers_untracked"].samples}
    assert untracked == {"cache_full": 95_000, "template_not_cached": 2, "unreadable": 0}
    not_cached = {
        x.labels["resource"]: x.value for x in fams[f"{PREFIX}objects_not_cached"].samples
    }
    assert not_cached == {"capacitybuffers": 95_000, "podtemplates": 2, "events": 7}
    [finding] = [f for f in advise(st) if "max-cached-objects" in f.summary]
    assert finding.severity == "warning"
    assert "95000 capacitybuffers, 2 podtemplates, 7 events" in finding.summary
    assert "95000 buffer(s) are in no series but the count" in finding.summary
    assert "2 buffer(s) hold headroom of unknown size" in finding.summary
    [total] = [f for f in advise(st) if f.severity == "info" and "holding" in f.summary]
    assert total.summary.startswith("95003 CapacityBuffer(s) (v1beta1) holding 8 CPU (the 3 read)")
