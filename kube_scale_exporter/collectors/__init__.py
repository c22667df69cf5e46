"""Importing a collector module registers it; one line per collector."""
from kube_scale_exporter.collectors import balloon  # noqa: F401
from kube_scale_exporter.collectors import etcd  # noqa: F401
from kube_scale_exporter.collectors import imagepull  # noqa: F401
from kube_scale_exporter.collectors import imagepull_events  # noqa: F401
from kube_scale_exporter.collectors import neighbor  # noqa: F401
from kube_scale_exporter.collectors import neighbor_gc  # noqa: F401
