"""Balloons preempted since the exporter started, counted from the pods informer's events."""

from __future__ import annotations

import logging
import threading

from kube_scale_exporter import kube

log = logging.getLogger(__name__)


def _preempted(pod) -> bool:
    """The scheduler's DisruptionTarget condition (Kubernetes 1.26+) says preemption."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return str(cond.get("reason", "")).startswith("PreemptionBy")
    return False


def _has_disruption_target(pod) -> bool:
    return any(
        c.get("type") == "DisruptionTarget"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _started(pod) -> bool:
    """It ran on a node. Kubelets since 1.22 move a deleted pod to Failed or Succeeded
    before it disappears, so a preempted balloon is not always Running at the end."""
    return (pod.get("status") or {}).get("phase") not in (None, "Pending") and bool(
        (pod.get("spec") or {}).get("nodeName")
    )


class PreemptionCounter:
    """The pods informer's on_update and on_delete handlers; `count` is read by scrapes."""

    def __init__(self, client: kube.KubeClient):
        self.client = client
        self._lock = threading.Lock()
        self._preemptions = 0
        self._counted = set()  # uids already counted from their DisruptionTarget condition
        self._conditions_api = None  # does the server set DisruptionTarget (1.26+)?

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
                return
        if _preempted(pod):
            counted = True
        elif (
            _started(pod) and not _has_disruption_target(pod) and not self._server_sets_conditions()
        ):
            counted = True  # before 1.26 a deleted running balloon is the best sign there is
        else:
            counted = False
        if counted:
            with self._lock:
                self._preemptions += 1

    def _server_sets_conditions(self) -> bool:
        if self._conditions_api is None:
            try:
                self._conditions_api = self.client.server_version() >= (1, 26)
            except Exception as e:  # noqa: BLE001  (asked again at the next deletion)
                log.warning("balloon: cannot read the server version: %s", e)
                return False
        return self._conditions_api
