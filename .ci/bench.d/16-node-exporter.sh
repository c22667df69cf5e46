#!/usr/bin/env bash
# node_exporter, the peer the node benches run beside ours (bench/neighbor.py, node_memory.py,
# scrape_cost.py, web_*.py; its arp collector reads the table over netlink). Built from the Go
# module proxy with .ci/go/node-exporter/go.mod, where its version is pinned. No test runs it,
# so `.ci/run` leaves it out (`make bench-setup`).
#
#   NODE_EXPORTER_BIN  the binary (default below, one directory per version); testbed reads it.
#
# Built once per version; when the cached binary names its version, this does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh

VERSION="$(go_pin node-exporter github.com/prometheus/node_exporter)"
BIN="${NODE_EXPORTER_BIN:-/var/cache/kube-scale-exporter/node-exporter-$VERSION/node_exporter}"

if "$BIN" --version 2>&1 | grep -F "version ${VERSION#v} " >/dev/null; then
    echo "node_exporter: cached, $("$BIN" --version 2>&1 | sed -n 1p)"
    exit 0
fi
v=github.com/prometheus/common/version
go_build node-exporter "$(dirname "$BIN")" "" \
    "-X $v.Version=${VERSION#v} -X $v.Branch=release-$(cut -d. -f1,2 <<<"${VERSION#v}")" \
    github.com/prometheus/node_exporter
"$BIN" --version 2>&1 | sed -n 1p
