"""Resource quantities and a pod's effective requests (kube/quantity.py)."""

import pytest

from kube_scale_exporter import kube

pytestmark = pytest.mark.unit


def test_quantities():
    q = kube.parse_quantity
    assert q("100m") == q("0.1") and q("1Ki") == 1024 and q("1k") == 1000
    assert q("1.5Gi") == 1.5 * 2**30 and q("2e3") == 2000 and q("500n") * 2 == q("1u")
    for bad in ("", "1.2.3", "5Q", "Gi"):
        try:
            q(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} parsed")


def test_pod_requests_takes_the_largest_init_container_and_overhead():
    pod = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "1"}}},
                {"resources": {"requests": {"cpu": "500m"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
            "overhead": {"cpu": "100m"},
        }
    }
    assert kube.pod_requests(pod) == {
        "cpu": kube.parse_quantity("2.1"),
        "memory": kube.parse_quantity("1Gi"),
    }
