"""What `kube-scale-exporter check` says about the CapacityBuffers."""

from kube_scale_exporter.collectors.capacitybuffer.state import BufferState
from kube_scale_exporter.collectors.capacitybuffer.summary import PROBLEMS
from kube_scale_exporter.registry import Finding

# What to change, per PROBLEMS key.
_ADVICE = {
    "no_replicas_or_limits": "Set spec.replicas, spec.percentage (with a scalableRef) or spec.limits.",
    "no_template": "Point spec.podTemplateRef at a PodTemplate, or spec.scalableRef at the "
    "workload whose pods the buffer should make room for.",
    "pod_template_missing": "Create the PodTemplate the buffer names in its namespace (kubectl get "
    "podtemplates -n NAMESPACE), or point the buffer at one that exists.",
    "scalable_kind_unknown": "Point scalableRef at a Deployment, ReplicaSet, StatefulSet, "
    "ReplicationController or Job, or use a PodTemplate: cluster-autoscaler reads no pod "
    "template from other kinds.",
    "quantity_unparsable": "Fix the quantity (e.g. 500m, 2Gi) in the buffer's limits or its pod "
    "template's requests.",
    "no_requests": "Set resources.requests (cpu, memory, GPUs) in the buffer's pod template: the "
    "headroom is what one replica requests times its replicas.",
    "requests_fit_no_node": "Lower the pod template's requests below a node's allocatable "
    "(kubectl describe node), or add a node group large enough. A node group scaled to zero "
    "has no node to compare with: this check then errs on the side of warning.",
    "not_ready": "kubectl describe capacitybuffer: the ReadyForProvisioning condition's message "
    "says why. No condition at all: the autoscaler is not reconciling buffers (run it with "
    "--capacity-buffer-controller-enabled).",
    "limited_by_quotas": "A ResourceQuota caps the buffer's replicas: raise the quota or lower the "
    "buffer (the condition's message names the quota).",
    "not_provisioning": "The autoscaler injects no placeholder pods for it (kubectl describe "
    "capacitybuffer; run it with --capacity-buffer-pod-injection-enabled).",
    "scale_up_not_triggered": "The autoscaler cannot add a node for the buffer (kubectl get events "
    "--field-selector involvedObject.kind=CapacityBuffer): a node group at its max size, "
    "cloud quota, or no group whose nodes fit one replica.",
}
_CRITICAL = {
    "pod_template_missing",
    "requests_fit_no_node",
    "scale_up_not_triggered",
    "no_template",
}


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
    if s.unreadable:
        out.append(
            Finding(
                "warning",
                f"{s.unreadable} CapacityBuffer(s) could not be read and are left out of the metrics",
                "Run with --log.level debug to see which and why.",
            )
        )
    for reason, count in s.problems.items():
        if count:
            names = [f"{b.namespace}/{b.name}" for b in s.buffers if reason in b.problems][:5]
            more = f" and {count - len(names)} more" if count > len(names) else ""
            out.append(
                Finding(
                    "critical" if reason in _CRITICAL else "warning",
                    f"{count} CapacityBuffer(s): {PROBLEMS[reason]} ({', '.join(names)}{more})",
                    _ADVICE[reason],
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
            f"{len(s.buffers)} CapacityBuffer(s) ({state.watched}) holding {float(cpu):g} CPU",
        )
    )
    return out
