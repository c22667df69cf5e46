#!/usr/bin/env bash
# node_exporter 1.11 for the neighbor, node-memory, scrape-cost and web-flood benches: the peer they run
# beside ours is the current upstream release, whose arp collector reads the table over
# netlink (bookworm's 1.5 reads /proc/net/arp). Debian sid ships it as
# prometheus-node-exporter; its Go binary runs on bookworm. The .deb is fetched with a
# private apt configuration (sid only, its own lists dir: the system's sources and lists stay
# untouched), unpacked with dpkg-deb -x into a cache, never installed.
#
#   NODE_EXPORTER_BIN  the node_exporter binary (default: the cache's); the benches read it too.
#
# When the binary runs, this does nothing (~5 s and ~10 MB of download otherwise).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

CACHE=/var/cache/kube-scale-exporter/node-exporter-sid
NODE_EXPORTER_BIN="${NODE_EXPORTER_BIN:-$CACHE/root/usr/bin/prometheus-node-exporter}"

if [[ -x "$NODE_EXPORTER_BIN" ]] && "$NODE_EXPORTER_BIN" --version >/dev/null 2>&1; then
    echo "node_exporter (sid): cached, $("$NODE_EXPORTER_BIN" --version 2>&1 | head -n1)"
    exit 0
fi

sid_unpack "$CACHE" prometheus-node-exporter
"$CACHE/root/usr/bin/prometheus-node-exporter" --version
echo "node_exporter (sid): unpacked into $CACHE"
