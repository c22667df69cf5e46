#!/usr/bin/env bash
# etcd 3.6, what kubeadm 1.34 runs: the control plane's etcd in every test that starts an
# API server, and a member of the etcd collector's matrix beside 3.4 and 3.5. No registry
# here ships it, so it is built from the Go module proxy with .ci/go/etcd/go.mod (the
# server module, its sibling modules replaced by their releases of the same version).
#
#   ETCD36_BIN  the etcd binary (default below, one directory per version); the testbed
#               reads the same variable.
#
# Built once per version; when the cached binary runs, this does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."

MOD=.ci/go/etcd
VERSION="$(sed -nE 's/^(require)?[[:space:]]*go.etcd.io\/etcd\/server\/v3 (v[0-9.]+).*/\2/p' "$MOD/go.mod")"
[[ -n "$VERSION" ]] || { echo "26-etcd36: no etcd server version in $MOD/go.mod" >&2; exit 1; }
BIN="${ETCD36_BIN:-/var/cache/kube-scale-exporter/etcd-$VERSION/etcd}"

if "$BIN" --version >/dev/null 2>&1; then
    echo "etcd: cached, $("$BIN" --version | head -n1) at $BIN"
    exit 0
fi
command -v go >/dev/null || { echo "26-etcd36: no go on PATH" >&2; exit 1; }

work="$(mktemp -d /var/tmp/etcd-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
(
    cd "$MOD"
    export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
    go build -trimpath -ldflags "-s -w" -o "$work/etcd" go.etcd.io/etcd/server/v3
)
"$work/etcd" --version
mkdir -p "$(dirname "$BIN")"
install -m 0755 "$work/etcd" "$BIN.new"
mv -f "$BIN.new" "$BIN"
echo "etcd: built $VERSION in $((SECONDS - start))s at $BIN"
