"""kube-scale-exporter: node- and cluster-level signals for very large Kubernetes clusters."""

import sys

__version__ = "0.1.0"

# The interpreter's version as `platform.python_version()` gives it (sys.version's first
# word), read here so that the node pod need not import `platform` for it.
PYTHON_VERSION = sys.version.split()[0]
