#!/usr/bin/env bash
# The neighbor tests need iproute2 (ip netns, veth) and promtool (15-prometheus.sh builds it);
# the benches run beside node_exporter (.ci/bench.d/16-node-exporter.sh).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need iproute2
