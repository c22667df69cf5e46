"""Image pulls on this node: collector.py (flags, observe), kubelet.py and pods.py (its
sources besides containerd), state.py (the state and its exposition), advice.py (`check`)."""

from kube_scale_exporter.collectors.imagepull.collector import ImagePullCollector

__all__ = ["ImagePullCollector"]
