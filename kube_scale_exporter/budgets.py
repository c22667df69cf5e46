"""Series budgets: the most series one scrape of each kind of target may hold.

The one place these numbers are written (docs/sizing.md explains them). Tests and benches
import them; `python -m tools.budget_files` (part of `make generate`) writes them where
jsonnet and YAML cannot import Python: mixin/budgets.libsonnet, and the sample limits of
deploy/'s ServiceMonitors and plain Prometheus config. tests/test_budgets.py fails when
those drift, and when the collectors' entries below no longer fit the target budgets.
Nothing in the exporter reads them: they are what a version of it promises Prometheus.
"""

# A node pod with the default node collectors: their entries below, the health of its pod
# watch (3) and the exporter's own series (build_info, success and duration per collector).
NODE_SERIES = 60
# A node pod on an etcd node (--etcd.local) also reports its member: the node's series,
# etcd's node entry and etcd's own success and duration, with room to spare.
ETCD_NODE_SERIES = 200
# The cluster Deployment with every cluster collector on, at the size of
# COLLECTOR_SERIES' cluster entries, with room for a larger etcd.
CLUSTER_SERIES = 900
# Prometheus fails a scrape that holds more samples than its limit (the target goes down)
# instead of storing them: twice the budget, so only a target gone wrong reaches it.
SAMPLE_LIMIT_FACTOR = 2

# Series each collector adds to one target, per mode it runs in, not counting the exporter's
# own two per collector or informer health: for one node, and for the cluster that
# bench/scale/template.py builds (etcd main of 5 members and events of 3, 60 resources).
# Every collector has an entry for each of its modes (tests/test_collector_checklist.py).
COLLECTOR_SERIES = {
    "neighbor": {"node": 20},  # 10 families, ipv4 and ipv6
    "neighbor_gc": {"node": 2},
    # 12 under the kubelet's default re-verification policy, 13 with the allowlist's size
    # under NeverVerifyAllowlistedImages; and 1 more with --image-pull.preload (opt-in).
    # Registry mirrors add 5 (containerd's version, pull path, config_path, directories
    # unlisted and unreadable) and one a registry host directory, at most 10
    # (containerd/hostsdir.py MAX_DIRS).
    "imagepull": {"node": 28},
    # node: the local member with --etcd.local-access=full, 28, and beside the leader one
    # key count per resource (--etcd.keys-max-resources, default 100), other and the
    # timestamp (25 without the key); cluster: 27 per member, and the key counts.
    "etcd": {"node": 130, "cluster": 281},
    "balloon": {"cluster": 17},
    # 29 cluster-wide (api 4, counts 2, untracked 3, not cached 3, reserved and placeable
    # 6, problems 11) and at most
    # 15 per buffer for --capacitybuffer.max-buffers (default 20) buffers: both replicas,
    # one replica's requests and the buffer's total in 3 resources, info, 3 conditions,
    # the last word, and 2 problems (the input problems that can come together).
    "capacitybuffer": {"cluster": 329},
    # The two histograms (28), and failed pulls by registry and cause: registries capped
    # by --image-pull.max-registries (default 10) plus other, each with 6 causes, its
    # successes and its failing nodes: 88 at most.
    "imagepull_events": {"cluster": 116},
}


def sample_limit(budget: int) -> int:
    """The scrape sample limit for targets of this series budget."""
    return budget * SAMPLE_LIMIT_FACTOR
