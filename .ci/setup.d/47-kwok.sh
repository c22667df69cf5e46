#!/usr/bin/env bash
# kwok, which plays Nodes and their pods against the real 1.34 control plane: the fleet tests
# and benches (thousands of nodes' worth of API objects) run it. Built from the Go module
# proxy with .ci/go/kwok/go.mod, where its version is pinned.
#
#   KWOK_BIN  the binary (default below, one directory per version); testbed reads the same.
#
# Built once per version; when the cached binary runs, this does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."

MOD=.ci/go/kwok
VERSION="$(sed -nE 's/^[[:space:]]*sigs.k8s.io\/kwok (v[0-9.]+).*/\1/p' "$MOD/go.mod")"
[[ -n "$VERSION" ]] || { echo "47-kwok: no kwok version in $MOD/go.mod" >&2; exit 1; }
BIN="${KWOK_BIN:-/var/cache/kube-scale-exporter/kwok-$VERSION/kwok}"

if "$BIN" --version 2>&1 | grep -F "${VERSION#v}" >/dev/null; then
    echo "kwok: cached, $("$BIN" --version 2>&1 | sed -n 1p) at $BIN"
    exit 0
fi
command -v go >/dev/null || { echo "47-kwok: no go on PATH" >&2; exit 1; }

work="$(mktemp -d /var/tmp/kwok-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
(
    cd "$MOD"
    export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
    go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${VERSION#v}" \
        -o "$work/kwok" sigs.k8s.io/kwok/cmd/kwok
)
"$work/kwok" --version
mkdir -p "$(dirname "$BIN")"
install -m 0755 "$work/kwok" "$BIN.new"
mv -f "$BIN.new" "$BIN"
echo "kwok: built $VERSION in $((SECONDS - start))s at $BIN"
