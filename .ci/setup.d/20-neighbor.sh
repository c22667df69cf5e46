#!/usr/bin/env bash
# The neighbor tests need iproute2 (ip netns, veth) and promtool; the benchmark compares
# with Debian's prometheus-node-exporter (arp collector). Idempotent and fast when done.
set -euo pipefail
need=()
for pkg in iproute2 prometheus prometheus-node-exporter; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
