#!/usr/bin/env bash
# node_exporter 1.11 for the benches that run a peer beside ours (bench/web_flood.py):
# Debian's 1.5 (10-base.sh) and the current upstream release, which is what users run. Debian
# sid's prometheus-node-exporter is a Go binary that runs on bookworm; its .deb is fetched
# with a private apt configuration and unpacked into a cache, never installed (lib.sh).
#
#   NODE_EXPORTER_SID_BIN  the binary (default: the cache's); the benches read the same variable.
#
# When the binary runs, this does nothing.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

CACHE=/var/cache/kube-scale-exporter/node-exporter-sid
NODE_EXPORTER_SID_BIN="${NODE_EXPORTER_SID_BIN:-$CACHE/root/usr/bin/prometheus-node-exporter}"

if [[ -x "$NODE_EXPORTER_SID_BIN" ]] && "$NODE_EXPORTER_SID_BIN" --version >/dev/null 2>&1; then
    echo "node_exporter (sid): cached, $("$NODE_EXPORTER_SID_BIN" --version 2>&1 | head -n1)"
    exit 0
fi

sid_unpack "$CACHE" prometheus-node-exporter
"$CACHE/root/usr/bin/prometheus-node-exporter" --version 2>&1 | head -n1
echo "node_exporter (sid): unpacked into $CACHE"
