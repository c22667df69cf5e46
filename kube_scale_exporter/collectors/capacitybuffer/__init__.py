"""CapacityBuffer headroom: collector.py (flags, discovery thread, informers), discovery.py
(the versions served), summary.py (the cached objects summed up), state.py (the state and
its exposition), advice.py (`check`)."""

from kube_scale_exporter.collectors.capacitybuffer.collector import CapacityBufferCollector

__all__ = ["CapacityBufferCollector"]
