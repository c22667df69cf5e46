"""Every collector, one line each: the CLI hands this list to the registry."""

from kube_scale_exporter.collectors.balloon import BalloonCollector
from kube_scale_exporter.collectors.capacitybuffer import CapacityBufferCollector
from kube_scale_exporter.collectors.etcd import EtcdCollector
from kube_scale_exporter.collectors.imagepull import ImagePullCollector
from kube_scale_exporter.collectors.imagepull_events import ImagePullEventsCollector
from kube_scale_exporter.collectors.neighbor import NeighborCollector
from kube_scale_exporter.collectors.neighbor_gc import NeighborGCCollector

COLLECTORS = (
    BalloonCollector,
    CapacityBufferCollector,
    EtcdCollector,
    ImagePullCollector,
    ImagePullEventsCollector,
    NeighborCollector,
    NeighborGCCollector,
)
