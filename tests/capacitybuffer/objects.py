"""CapacityBuffer, PodTemplate and event objects as the API server serves them (the fields
the collector keeps), shared by the unit and integration tests."""


def buffer(name, namespace="shop", uid=None, spec=None, status=None):
    obj = {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"},
        "spec": spec if spec is not None else {},
    }
    if status is not None:
        obj["status"] = status
    return obj


def template(name, namespace="shop", requests=None, init_requests=None, overhead=None):
    spec = {
        "containers": [
            {
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": requests or {}},
            }
        ]
    }
    if init_requests:
        spec["initContainers"] = [
            {"name": "init", "image": "busybox", "resources": {"requests": init_requests}}
        ]
    if overhead:
        spec["overhead"] = overhead
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
    }


def copy_of(name):
    """The PodTemplate cluster-autoscaler resolves buffer `name`'s template into."""
    return f"capacity-buffer-{name}-pod-template"


def with_copy(name, namespace="shop", requests=None):
    """PodTemplate `name` and the copy of it a buffer of that name is resolved into (the
    same requests)."""
    return [template(name, namespace, requests), template(copy_of(name), namespace, requests)]


def provisioned(name, requests, replicas=1, resolved=None, conditions=(), namespace="shop"):
    """A buffer of `replicas` on PodTemplate `name` as the autoscaler leaves it provisioned
    (`resolved` replicas when fewer, `conditions` besides), and its two templates:
    ([buffer], [templates])."""
    status = ready(replicas if resolved is None else resolved, copy_of(name), *conditions)
    spec = {"podTemplateRef": {"name": name}, "replicas": replicas}
    return [buffer(name, namespace, spec=spec, status=status)], with_copy(name, namespace, requests)


def condition(type_, status, reason, message=""):
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message or reason,
        "lastTransitionTime": "2026-01-01T11:50:00Z",
    }


def ready(replicas, template_name, *more):
    """A status as cluster-autoscaler 1.36 writes it for a buffer it provisions."""
    return {
        "podTemplateRef": {"name": template_name},
        "replicas": replicas,
        "podTemplateGeneration": 1,
        "provisioningStrategy": "buffer.x-k8s.io/active-capacity",
        "conditions": [
            condition("ReadyForProvisioning", "True", "AttributesSetSuccessfully", "ready"),
            condition("Provisioning", "True", "FakePodsInjected"),
            *more,
        ],
    }


def event(buffer_name, reason, last, namespace="shop", uid=None, message=""):
    """An event the autoscaler's recorder posts on a buffer (core/v1 shape)."""
    return {
        "metadata": {
            "name": f"{buffer_name}.{reason}.{last}",
            "namespace": namespace,
            "creationTimestamp": "2026-01-01T11:00:00Z",
        },
        "involvedObject": {
            "kind": "CapacityBuffer",
            "apiVersion": "autoscaling.x-k8s.io/v1beta1",
            "namespace": namespace,
            "name": buffer_name,
            "uid": uid or f"uid-{buffer_name}",
        },
        "reason": reason,
        "message": message or f"capacity buffer 2 fake pods {reason}",
        "firstTimestamp": "2026-01-01T11:00:00Z",
        "lastTimestamp": last,
        "count": 3,
        "type": "Normal",
    }
