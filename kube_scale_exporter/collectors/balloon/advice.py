"""What `kube-scale-exporter check` says about the balloons."""

from kube_scale_exporter.collectors.balloon.state import BalloonState
from kube_scale_exporter.collectors.balloon.summary import REASONS
from kube_scale_exporter.registry import Finding

# The cluster-autoscaler gives up on a node that has not registered after
# --max-node-provision-time, 15 minutes by default.
PENDING_WARN_SECONDS = 15 * 60
# What to change, per REASONS key.
_ADVICE = {
    "priority_below_autoscaler_cutoff": "Give the balloon PriorityClass a value between {cutoff} and -1 (the FAQ uses -10 "
    "with the default cutoff), or lower --expendable-pods-priority-cutoff.",
    "priority_not_negative": "Give balloons a PriorityClass with a negative value (e.g. -1), so that pods of "
    "priority 0 preempt them.",
    "priority_class_missing": "Create the PriorityClass the balloons name, then recreate the balloons.",
    "requests_fit_no_node": "Lower the balloons' requests below a node's allocatable (kubectl describe node), or "
    "add a node group large enough. A node group scaled to zero has no node to compare "
    "with: this check then errs on the side of warning.",
    "no_requests": "Set resources.requests (cpu, memory, GPUs) on the balloon Deployment's container: "
    "the headroom is what they request.",
}


def advise(state: BalloonState) -> list[Finding]:
    """What `check` says about the balloons."""
    s = state.summary
    out = []
    if s.total == 0:
        out.append(
            Finding(
                "warning",
                f"--balloon.selector {state.selector!r} matches no pods",
                "Check the selector against the balloon Deployment's pod labels "
                "(kubectl get pods -A -l SELECTOR).",
            )
        )
        return out
    if s.unreadable:
        out.append(
            Finding(
                "warning",
                f"{s.unreadable} balloon pod(s) could not be read and are left out of the metrics",
                "Run with --log.level debug to see which and why.",
            )
        )
    for reason, count in s.misconfigured.items():
        if count:
            out.append(
                Finding(
                    "critical" if reason != "priority_class_missing" else "warning",
                    f"{count} balloon pod(s): {REASONS[reason]}",
                    _ADVICE[reason].format(cutoff=state.cutoff),
                )
            )
    if s.pending_oldest > PENDING_WARN_SECONDS:
        out.append(
            Finding(
                "warning",
                f"a balloon has waited {s.pending_oldest / 60:.0f} min for a node",
                "The autoscaler is not adding nodes for it: check its logs, node group limits "
                "and cloud quotas.",
            )
        )
    if s.phases["Running"] == 0:
        out.append(
            Finding(
                "warning",
                "no balloon is Running: there is no headroom",
                "Real pods will wait for new nodes until balloons run again.",
            )
        )
    cpu = s.reserved.get("cpu", 0)
    out.append(
        Finding(
            "info",
            f"{s.phases['Running']} balloon(s) Running on {s.nodes} "
            f"node(s), holding {float(cpu):g} CPU",
        )
    )
    return out
