"""kube-scale-exporter: node- and cluster-level signals for very large Kubernetes clusters."""

__version__ = "0.1.0"
