"""Which versions of the CapacityBuffer API the API server serves, from discovery.

GET /apis/autoscaling.x-k8s.io/VERSION lists that version's resources (the group also
holds ProvisioningRequests, so the group alone says nothing); 404 means not served.
Discovery is open to every authenticated user (system:discovery): no grant needed.
"""

from __future__ import annotations

from kube_scale_exporter import kube

GROUP = "autoscaling.x-k8s.io"
PLURAL = "capacitybuffers"
# Preferred first: v1beta1 since cluster-autoscaler 1.35, v1alpha1 before.
VERSIONS = ("v1beta1", "v1alpha1")


def resource(version: str):
    return kube.Resource(f"/apis/{GROUP}/{version}", PLURAL)


def served_versions(client) -> frozenset:
    """The versions serving capacitybuffers; ApiError (other than 404) or a transport
    error when the API server cannot say."""
    served = set()
    for version in VERSIONS:
        try:
            doc = client.get(f"/apis/{GROUP}/{version}")
        except kube.ApiError as exc:
            if exc.status == 404:
                continue
            raise
        names = {r.get("name") for r in doc.get("resources") or [] if isinstance(r, dict)}
        if PLURAL in names:
            served.add(version)
    return frozenset(served)


def choose(served: frozenset, wanted: str) -> str | None:
    """The version to watch: `wanted` if served, or under "auto" the first served one."""
    if wanted != "auto":
        return wanted if wanted in served else None
    return next((v for v in VERSIONS if v in served), None)
