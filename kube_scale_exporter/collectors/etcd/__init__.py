"""etcd size, alarms, leadership and keys: collector.py (flags, refreshes), config.py (flag
values), state.py (the state and its exposition), advice.py (`check`)."""

from kube_scale_exporter.collectors.etcd.collector import EtcdCollector

__all__ = ["EtcdCollector"]
