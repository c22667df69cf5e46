#!/usr/bin/env bash
# The neighbor tests need iproute2 (ip netns, veth) and promtool; the benchmark compares
# with Debian's prometheus-node-exporter (arp collector).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need iproute2 prometheus prometheus-node-exporter
