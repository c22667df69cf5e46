#!/usr/bin/env bash
# etcd 3.7 (what kubeadm 1.37 runs: the control plane's etcd in every test that starts an API
# server) and 3.6, the etcd collector's matrix beside the 3.5 line (25-etcd-sid.sh). No
# registry here ships either, so each is built from the Go module proxy with
# .ci/go/etcd-3.N/go.mod (the server module, its sibling modules replaced by their releases of
# the same version).
#
#   ETCD37_BIN, ETCD36_BIN  the binaries (default: one directory per version); the testbed
#                           reads the same variables.
#
# Built once per version; when a cached binary runs and names its version, it is skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh

for line in 3.7 3.6; do
    version="$(go_pin "etcd-$line" go.etcd.io/etcd/server/v3)"
    var="ETCD${line/./}_BIN"
    bin="${!var:-/var/cache/kube-scale-exporter/etcd-$version/etcd}"
    if "$bin" --version 2>/dev/null | grep -F "etcd Version: ${version#v}" >/dev/null; then
        echo "etcd $line: cached, ${version} at $bin"
        continue
    fi
    go_build "etcd-$line" "$(dirname "$bin")" "" "" go.etcd.io/etcd/server/v3
    mv "$(dirname "$bin")/server" "$bin"  # go names a /v3 module's command after its parent
    "$bin" --version | sed -n 1p
done
