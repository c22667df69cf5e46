"""The API resources the collectors list and watch."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    """A listable API resource: `api` is "/api/v1" or "/apis/GROUP/VERSION"."""

    api: str
    plural: str
    namespaced: bool = True

    def path(self, namespace=None) -> str:
        if namespace and self.namespaced:
            return f"{self.api}/namespaces/{namespace}/{self.plural}"
        return f"{self.api}/{self.plural}"


PODS = Resource("/api/v1", "pods")
NODES = Resource("/api/v1", "nodes", namespaced=False)
PRIORITY_CLASSES = Resource("/apis/scheduling.k8s.io/v1", "priorityclasses", namespaced=False)
