"""Balloons preempted since the exporter started, counted from the pods informer's events."""

import threading


def _preempted(pod) -> bool:
    """The scheduler's DisruptionTarget condition says preemption."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return str(cond.get("reason", "")).startswith("PreemptionBy")
    return False


class PreemptionCounter:
    """The pods informer's on_update and on_delete handlers; `count` is read by scrapes.

    A balloon counts once, when the scheduler marks it (DisruptionTarget, reason
    PreemptionBy...); a deletion without that mark is not a preemption (a rollout, a person).
    A pod deleted with the mark unseen before (the update fell in a relist) counts then."""

    def __init__(self):
        self._lock = threading.Lock()
        self._preemptions = 0
        self._counted = set()  # uids already counted from their DisruptionTarget condition

    @property
    def count(self) -> int:
        with self._lock:
            return self._preemptions

    def on_update(self, old, new):
        if _preempted(new) and not _preempted(old):
            with self._lock:
                uid = new["metadata"].get("uid")
                if uid not in self._counted:
                    self._counted.add(uid)
                    self._preemptions += 1

    def on_delete(self, pod):
        uid = pod["metadata"].get("uid")
        with self._lock:
            if uid in self._counted:
                self._counted.discard(uid)
            elif _preempted(pod):
                self._preemptions += 1
