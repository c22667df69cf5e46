#!/usr/bin/env bash
# containerd 2.x for the imagepull suite's second run (make test-containerd2): Debian sid's
# `containerd` package (containerd, ctr, containerd-shim-runc-v2), fetched with a private apt
# configuration (sid only, its own lists dir: the system's sources and lists stay untouched)
# and unpacked with dpkg-deb -x into a cache, never installed. Its Go binaries run on
# bookworm. The cluster of tests/e2e stays on bookworm's containerd 1.6: kubelet 1.20 speaks
# CRI v1alpha2, which containerd 2 removed.
#
#   CONTAINERD2_DIR  where the unpacked tree lives (default below); tests read the same variable.
#
# When the cached containerd runs, this does nothing.
set -euo pipefail

CACHE="${CONTAINERD2_DIR:-/var/cache/kube-scale-exporter/containerd-sid}"
BIN="$CACHE/root/usr/bin/containerd"

if [[ -x "$BIN" ]] && "$BIN" --version >/dev/null 2>&1; then
    echo "containerd (sid): cached, $("$BIN" --version)"
    exit 0
fi

source "$(dirname "$0")/../lib.sh"
sid_unpack "$CACHE" containerd
"$BIN" --version
echo "containerd (sid): unpacked into $CACHE"
