#!/usr/bin/env bash
# The neighbor tests need iproute2 (ip netns, veth) and promtool (15-prometheus.sh builds it);
# the web benches compare with Debian's prometheus-node-exporter.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need iproute2 prometheus-node-exporter
