"""The pods on this node and the images their waiting containers want.

One watch filtered on spec.nodeName; its cache holds only what `pod_summary` keeps.
"""

from __future__ import annotations

import argparse
import logging
from datetime import datetime

from kube_scale_exporter import kube
from kube_scale_exporter.containerd.reference import Reference, parse

log = logging.getLogger(__name__)

# Waiting reasons that do not mean "needs its image now": the container waits for the
# pod's init containers, and the kubelet has not asked for its image yet.
NOT_PULLING_YET = frozenset({"PodInitializing"})
# Waiting reasons the kubelet gives a container whose pull failed, is in back-off, or will
# never happen: such an image does not wait for a pull slot, so it is not queued (the
# serialized-backlog alerts would otherwise fire on a node that only has a typo'd image).
PULL_FAILED = frozenset(
    {
        "ImagePullBackOff",
        "ErrImagePull",
        "ErrImageNeverPull",
        "InvalidImageName",
        "RegistryUnavailable",
        "SignatureValidationFailed",
    }
)


# Waiting reasons the kubelet gives only after the image was pulled: creating or starting
# the container failed, or it exited and waits to restart.
PULLED = frozenset(
    {
        "CreateContainerConfigError",
        "CreateContainerError",
        "PreCreateHookError",
        "PreStartHookError",
        "PostStartHookError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)


def _rfc3339(value) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value).timestamp()


def _waiting_containers(pod: dict):
    """(spec, waiting reason or None) of the pod's containers whose image is wanted now."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
        return
    spec = pod.get("spec") or {}
    for specs, statuses in (
        ("initContainers", "initContainerStatuses"),
        ("containers", "containerStatuses"),
    ):
        by_name = {s.get("name"): s for s in status.get(statuses) or ()}
        for container in spec.get(specs) or ():
            s = by_name.get(container.get("name"))
            if s is None:
                # Not reported by the kubelet yet: the pod was just bound to this node.
                if status.get("phase", "Pending") == "Pending":
                    yield container, None
                continue
            waiting = (s.get("state") or {}).get("waiting")
            if waiting is not None and waiting.get("reason") not in NOT_PULLING_YET:
                yield container, waiting.get("reason")


def images_wanted(pods) -> dict[str, tuple[Reference, float | None]]:
    """Image name -> (reference, since when a pod on this node waits for it), for images
    some container waits to pull; containers whose pull failed (PULL_FAILED) are left out."""
    wanted: dict[str, tuple[Reference, float | None]] = {}
    for pod in pods:
        status = pod.get("status") or {}
        since = _rfc3339(status.get("startTime") or pod["metadata"].get("creationTimestamp"))
        for container, reason in _waiting_containers(pod):
            if reason in PULL_FAILED:
                continue
            try:
                ref = parse(container.get("image") or "")
            except ValueError:
                continue  # the kubelet reports InvalidImageName; no pull will happen
            known = wanted.get(ref.name)
            if known is None or (since is not None and (known[1] is None or since < known[1])):
                wanted[ref.name] = (ref, since)
    return wanted


def images_failing(pods) -> set[str]:
    """Images of containers whose pull failed or backs off (by containerd name where the
    reference parses; an InvalidImageName one as written)."""
    failing = set()
    for pod in pods:
        for container, reason in _waiting_containers(pod):
            if reason in PULL_FAILED:
                image = container.get("image") or ""
                try:
                    failing.add(parse(image).name)
                except ValueError:
                    failing.add(image)
    return failing


def images_in_use(pods) -> set[str]:
    """Images the pods' statuses show present on this node (by containerd name): those
    of containers the runtime created (an imageID) or that wait after their pull."""
    present = set()
    for pod in pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        for specs, statuses in (
            ("initContainers", "initContainerStatuses"),
            ("containers", "containerStatuses"),
        ):
            images = {c.get("name"): c.get("image") for c in spec.get(specs) or ()}
            for s in status.get(statuses) or ():
                waiting = (s.get("state") or {}).get("waiting") or {}
                if s.get("imageID") or waiting.get("reason") in PULLED:
                    try:
                        present.add(parse(images.get(s.get("name")) or "").name)
                    except ValueError:
                        continue
    return present


def pod_summary(pod: dict) -> dict:
    """The fields this collector reads, so 300 cached pods stay small."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}

    def containers(key):
        return [{"name": c.get("name"), "image": c.get("image")} for c in spec.get(key) or ()]

    def statuses(key):
        out = []
        for s in status.get(key) or ():
            waiting = (s.get("state") or {}).get("waiting")
            # The reason only: an ErrImagePull message holds the whole registry error.
            out.append(
                {
                    "name": s.get("name"),
                    "imageID": s.get("imageID") or "",
                    "state": {}
                    if waiting is None
                    else {"waiting": {"reason": waiting.get("reason")}},
                }
            )
        return out

    return {
        "metadata": {
            k: meta[k]
            for k in (
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
            )
            if k in meta
        },
        "spec": {
            "initContainers": containers("initContainers"),
            "containers": containers("containers"),
        },
        "status": {
            "phase": status.get("phase"),
            "startTime": status.get("startTime"),
            "initContainerStatuses": statuses("initContainerStatuses"),
            "containerStatuses": statuses("containerStatuses"),
        },
    }


def start_pod_watch(args: argparse.Namespace):
    """This node's pods from the API (one watch on spec.nodeName); (informer, error)."""
    node = getattr(args, "kube_node_name", "")
    if not node:
        why = "no node name (--kube.node-name or NODE_NAME)"
        log.warning("imagepull: no pod watch, kubescale_image_pulls_queued is absent: %s", why)
        return None, why
    try:
        informer = kube.for_node(
            kube.client_from_args(args), kube.PODS, node, transform=pod_summary
        )
    except kube.ConfigError as exc:
        log.warning("imagepull: no pod watch, kubescale_image_pulls_queued is absent: %s", exc)
        return None, f"no Kubernetes API access: {exc}"
    return informer.start(), None
