"""What `kube-scale-exporter check` says about the CapacityBuffers: for each problem the
buffers it names (five at most) and, for each, the change that fixes it: the kubectl
command or the YAML, with the figures the buffer's own requests give."""

from __future__ import annotations

from kube_scale_exporter.collectors.capacitybuffer.state import BufferState
from kube_scale_exporter.collectors.capacitybuffer.summary import KNOWN_KINDS, PROBLEMS
from kube_scale_exporter.registry import Finding

# Buffers named per finding; the count says how many more.
NAMED = 5
# A scalableRef kind is the user's text: quoted this long at most.
KIND_CHARS = 63
_KINDS = ", ".join("/".join(k for k in kind if k) for kind in sorted(KNOWN_KINDS))
_EVENTS = "kubectl get events -n {ns} --field-selector involvedObject.kind=CapacityBuffer,involvedObject.name={name}"

# The problems whose advice is the same for every buffer: what to change, per PROBLEMS key.
_ADVICE = {
    "no_replicas_or_limits": "Give the buffer a size: spec.replicas (kubectl -n NAMESPACE patch "
    'capacitybuffer NAME --type merge -p \'{"spec":{"replicas":2}}\'), spec.percentage '
    "(of its scalableRef's replicas) or spec.limits.",
    "no_template": "Point spec.podTemplateRef at a PodTemplate, or spec.scalableRef at the "
    "workload whose pods the buffer should make room for.",
    "quantity_unparsable": "Fix the quantity (e.g. 500m, 2Gi) in the buffer's limits or its pod "
    "template's requests.",
    "no_requests": "Set resources.requests (cpu, memory, GPUs) in the buffer's pod template: the "
    "headroom is what one replica requests times its replicas.",
}
# Why the autoscaler set Provisioning False, per reason (cluster-autoscaler 1.36's).
_NOT_PROVISIONING = {
    "NotReadyForProvisioning": "it is not ReadyForProvisioning: fix that first (above).",
    "BufferIsEmpty": "it resolved 0 replicas: raise spec.replicas, spec.percentage or the "
    "limits, which size it below one replica.",
    "FailedToGetPodTemplate": "the autoscaler could not read its copy of the pod template "
    "(status.podTemplateRef): it makes a new one on its next reconcile; if this stays, give "
    "the autoscaler get on podtemplates in this namespace.",
    "FailedToMakeFakePods": "the pod template makes no valid pod: the condition's message says why.",
}
_CRITICAL = {
    "pod_template_missing",
    "requests_fit_no_node",
    "scale_up_not_triggered",
    "no_template",
}


def _quantity(resource: str, value) -> str:
    """A Kubernetes quantity for a request: 2, 500m, 8Gi, 1536Mi."""
    # Deferred: every collector module is imported in node mode too, where the node pod's
    # memory is budgeted (tests/test_imports.py); only `check` on buffers needs decimal.
    from decimal import Decimal  # noqa: PLC0415

    value = Decimal(value)
    if resource == "memory":
        for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= size and value % size == 0:
                return f"{value // size}{unit}"
    if value == value.to_integral_value():
        return f"{int(value)}"
    return f"{int(value * 1000)}m"


def _resources(requests: dict, times: int = 1) -> dict:
    """The non-zero resources of `times` replicas, as quantities."""
    return {r: _quantity(r, v * times) for r, v in (requests or {}).items() if v > 0}


def _said(resources: dict) -> str:
    return ", ".join(f"{v} {r}" for r, v in resources.items()) or "nothing"


def _condition(b, kind: str):
    """(status, reason) of one of the buffer's conditions, or None."""
    for type_, status, reason in b.conditions:
        if type_ == kind:
            return status, reason
    return None


def _ref(b) -> str:
    return f"{b.namespace}/{b.name}"


def _unreconciled(buffers) -> str:
    return (
        f"{', '.join(_ref(b) for b in buffers)}: no ReadyForProvisioning condition: "
        "cluster-autoscaler is not reconciling buffers. Add "
        "--capacity-buffer-controller-enabled=true and "
        "--capacity-buffer-pod-injection-enabled=true to its container's args (kubectl -n "
        "kube-system edit deployment cluster-autoscaler)."
    )


def _not_ready(buffers) -> str:
    lines = [_not_ready_one(b, *c) for b in buffers if (c := _condition(b, "ReadyForProvisioning"))]
    bare = [b for b in buffers if _condition(b, "ReadyForProvisioning") is None]
    return "\n".join(lines + ([_unreconciled(bare)] if bare else []))


def _not_ready_one(b, status, reason) -> str:
    more = ""
    if "pod_template_missing" in b.problems:
        more = f" Here: the PodTemplate {b.template_name!r} is missing (below)."
    elif "no_replicas_or_limits" in b.problems:
        more = " Here: it has no replicas, percentage or limits (below)."
    return (
        f"{_ref(b)}: ReadyForProvisioning {status}, reason {reason}. Its message says what the "
        f"autoscaler could not resolve: kubectl describe capacitybuffer -n {b.namespace} "
        f"{b.name}.{more}"
    )


def _not_provisioning(b) -> str:
    status, reason = _condition(b, "Provisioning") or ("False", "other")
    why = _NOT_PROVISIONING.get(
        reason, f"reason {reason}: kubectl describe capacitybuffer -n {b.namespace} {b.name}."
    )
    return f"{_ref(b)}: Provisioning {status}: {why}"


def _limited(b) -> str:
    short = (b.spec_replicas or 0) - b.status_replicas
    need = _resources(b.requests, short) if short > 0 and b.requests else {}
    room = (
        f"; the {short} replica(s) it lacks need {_said(need)} more of the namespace's quota"
        if need
        else ""
    )
    return (
        f"{_ref(b)}: the quota allows {b.status_replicas} replica(s)"
        + (f" of {b.spec_replicas}" if b.spec_replicas is not None else "")
        + f"{room}. The condition's message names the quota (kubectl describe capacitybuffer "
        f"-n {b.namespace} {b.name}): raise its spec.hard (kubectl -n {b.namespace} edit "
        f"resourcequota QUOTA, e.g. requests.cpu), or ask for fewer replicas."
    )


def _not_triggered(b) -> str:
    one = _resources(b.requests) if b.requests else {}
    size = f" Each replica needs a node with {_said(one)} allocatable." if one else ""
    return (
        f"{_ref(b)}: {_EVENTS.format(ns=b.namespace, name=b.name)} says why "
        f'("max node group size reached", or no group whose nodes fit).{size} Raise that node '
        "group's maximum size (cluster-autoscaler's --nodes=MIN:MAX:GROUP, or the cloud's: "
        "e.g. aws autoscaling update-auto-scaling-group --auto-scaling-group-name GROUP "
        "--max-size N, gcloud container clusters update CLUSTER --node-pool POOL "
        "--enable-autoscaling --max-nodes N), or the cloud quota, or add a group large enough."
    )


def _below(b) -> str:
    want = _resources(b.requests, b.spec_replicas) if b.requests else {}
    limits = ",".join(f'"{r}":"{v}"' for r, v in want.items())
    fix = (
        f"kubectl -n {b.namespace} patch capacitybuffer {b.name} --type merge -p "
        f'\'{{"spec":{{"limits":{{{limits}}}}}}}\''
        if limits
        else f"kubectl -n {b.namespace} edit capacitybuffer {b.name}"
    )
    return (
        f"{_ref(b)}: {b.status_replicas} of {b.spec_replicas} replicas resolved. spec.limits "
        f"caps it: {b.spec_replicas} replicas need limits of {_said(want)}: {fix}, or set "
        "spec.replicas to what the limits allow."
    )


def _fits_no_node(b) -> str:
    one = _resources(b.requests) if b.requests else {}
    return (
        f"{_ref(b)}: one replica requests {_said(one)}, more than any node's allocatable "
        "(kubectl get nodes -o custom-columns=NAME:.metadata.name,CPU:.status.allocatable.cpu,"
        "MEMORY:.status.allocatable.memory,GPU:.status.allocatable.nvidia\\.com/gpu). Lower the "
        f"pod template's requests (kubectl -n {b.namespace} edit podtemplate "
        f"{b.template_name or 'TEMPLATE'}), or add a node group whose nodes are larger. A "
        "group scaled to zero has no node to compare with: this check then errs on the side "
        "of warning."
    )


def _template_missing(b) -> str:
    name = b.template_name or "the one its status.podTemplateRef names"
    return (
        f"{_ref(b)}: no PodTemplate {name!r} in {b.namespace}. Create it (kubectl -n "
        f"{b.namespace} apply -f, a PodTemplate whose template.spec is the pod to make room "
        f"for, requests included), or point the buffer at one that exists (kubectl -n "
        f"{b.namespace} get podtemplates; kubectl -n {b.namespace} patch capacitybuffer "
        f'{b.name} --type merge -p \'{{"spec":{{"podTemplateRef":{{"name":"NAME"}}}}}}\').'
    )


def _kind_unknown(b) -> str:
    kind = b.scalable_kind[:KIND_CHARS] or "its kind"
    return (
        f"{_ref(b)}: scalableRef names {kind}; cluster-autoscaler reads pod templates from "
        f"{_KINDS} only. Point spec.scalableRef at one of those, or copy the pod's template "
        "into a PodTemplate and use spec.podTemplateRef instead (spec.replicas or limits "
        "then size it)."
    )


# The problems whose advice depends on the buffer: one line per buffer named.
_PER_BUFFER = {
    "not_provisioning": _not_provisioning,
    "limited_by_quotas": _limited,
    "scale_up_not_triggered": _not_triggered,
    "requests_fit_no_node": _fits_no_node,
    "pod_template_missing": _template_missing,
    "scalable_kind_unknown": _kind_unknown,
}


def _finding(severity, what, buffers, count, advice) -> Finding:
    names = [_ref(b) for b in buffers]
    more = f" and {count - len(names)} more" if count > len(names) else ""
    listed = f" ({', '.join(names)}{more})" if names else ""
    return Finding(severity, f"{count} CapacityBuffer(s): {what}{listed}", advice)


def advise(state: BufferState) -> list[Finding]:
    """What `check` says about the buffers."""
    if state.summary is None:
        if state.served:
            return [
                Finding(
                    "warning",
                    f"the API server serves CapacityBuffers only as {', '.join(sorted(state.served))},"
                    " not the version asked for",
                    "Drop --capacitybuffer.api-version (auto watches the version served).",
                )
            ]
        return [Finding("info", "the API server serves no CapacityBuffer API: collector off")]
    s = state.summary
    out = []
    if s.untracked["unreadable"]:
        out.append(
            Finding(
                "warning",
                f"{s.untracked['unreadable']} CapacityBuffer(s) could not be read and are left "
                "out of the metrics",
                "Run with --log.level debug to see which and why.",
            )
        )
    if any(s.not_cached.values()):
        out.append(_past_cache_cap(s))
    for reason, count in s.problems.items():
        if not count:
            continue
        named = [b for b in s.buffers if reason in b.problems][:NAMED]
        if reason == "not_ready":
            advice = _not_ready(named)
        elif reason in _PER_BUFFER:
            advice = "\n".join(_PER_BUFFER[reason](b) for b in named)
        else:
            advice = _ADVICE[reason]
        severity = "critical" if reason in _CRITICAL else "warning"
        out.append(_finding(severity, PROBLEMS[reason], named, count, advice))
    # Resolved below spec (KubeScaleCapacityBufferBelowRequested) where neither a quota nor
    # the buffer not being ready says why, which their findings above cover: its limits.
    short = [
        b
        for b in s.buffers
        if b.spec_replicas is not None
        and b.status_replicas < b.spec_replicas
        and not {"not_ready", "limited_by_quotas"} & set(b.problems)
    ]
    if short:
        out.append(
            _finding(
                "warning",
                "fewer replicas resolved than spec.replicas asks for, cut by spec.limits",
                short[:NAMED],
                len(short),
                "\n".join(_below(b) for b in short[:NAMED]),
            )
        )
    if len(s.buffers) > state.max_buffers:
        out.append(
            Finding(
                "info",
                f"{len(s.buffers) - state.max_buffers} CapacityBuffer(s) past "
                f"--capacitybuffer.max-buffers {state.max_buffers} have no series of their own",
            )
        )
    cpu = s.reserved.get("cpu", 0)
    out.append(
        Finding(
            "info",
            f"{s.total} CapacityBuffer(s) ({state.watched}) holding {float(cpu):g} CPU"
            + (f" (the {len(s.buffers)} read)" if s.total != len(s.buffers) else ""),
        )
    )
    return out


def _past_cache_cap(s) -> Finding:
    """Objects past --capacitybuffer.max-cached-objects: counted, not read."""
    counts = ", ".join(f"{n} {what}" for what, n in s.not_cached.items() if n)
    left = s.untracked["cache_full"]
    unknown = s.untracked["template_not_cached"]
    return Finding(
        "warning",
        f"past --capacitybuffer.max-cached-objects, counted but not read: {counts}"
        + (f"; {left} buffer(s) are in no series but the count" if left else "")
        + (f"; {unknown} buffer(s) hold headroom of unknown size" if unknown else ""),
        "Find who makes them: kubectl get capacitybuffers,podtemplates -A --no-headers | "
        "awk '{print $1}' | sort | uniq -c | sort -rn | head. If they are meant to be there, "
        "raise --capacitybuffer.max-cached-objects, and the cluster Deployment's memory "
        "limit with it (docs/capacitybuffer.md).",
    )
