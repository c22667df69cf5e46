#!/usr/bin/env bash
# containerd 1.7 for the imagepull suite's comparison of its two sources (tests/imagepull/
# test_ingest.py runs 1.6, 1.7 and 2.x): Debian trixie's `containerd` package (bookworm has
# only 1.6), fetched with a private apt configuration (trixie only, its own lists dir) and
# unpacked with dpkg-deb -x into a cache, never installed. Its Go binaries run on bookworm.
#
#   CONTAINERD17_DIR  where the unpacked tree lives (default below); tests read the same variable.
#
# When the cached containerd runs, this does nothing.
set -euo pipefail

CACHE="${CONTAINERD17_DIR:-/var/cache/kube-scale-exporter/containerd-trixie}"
BIN="$CACHE/root/usr/bin/containerd"

if [[ -x "$BIN" ]] && "$BIN" --version >/dev/null 2>&1; then
    echo "containerd (trixie): cached, $("$BIN" --version)"
    exit 0
fi

source "$(dirname "$0")/../lib.sh"
suite_unpack trixie "$CACHE" containerd
# The 1.7 line is what this step is for: a trixie that moved on must fail here, not later.
"$BIN" --version | grep " 1\.7\." >/dev/null || { echo "trixie containerd is not 1.7" >&2; exit 1; }
"$BIN" --version
echo "containerd (trixie): unpacked into $CACHE"
