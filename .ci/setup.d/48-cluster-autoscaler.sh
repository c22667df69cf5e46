#!/usr/bin/env bash
# cluster-autoscaler with its kwok cloud provider, for the balloon story (tests/autoscaler):
# it adds Nodes from node-group templates, kwok plays them. Built from the Go module proxy
# with .ci/go/cluster-autoscaler/go.mod (its go.mod has replace directives, so `go install`
# refuses it); only the kwok provider is compiled in (build tag `kwok`).
#
# The module has no Go-style release tags (its releases are tagged cluster-autoscaler-1.N.M):
# only pseudo-versions the proxy already holds can be fetched, and the checksum database does
# not know them, so their hashes come from the committed go.sum alone (GONOSUMDB below).
#
#   CLUSTER_AUTOSCALER_BIN  the binary (default below, one directory per pinned version);
#                           testbed reads the same variable.
#
# Built once per version; when the cached binary's stamp names the pin, this does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."

MOD=.ci/go/cluster-autoscaler
VERSION="$(sed -nE 's/^(require)?[[:space:]]*k8s.io\/autoscaler\/cluster-autoscaler (v[0-9][^[:space:]]*).*/\2/p' "$MOD/go.mod")"
[[ -n "$VERSION" ]] || { echo "48-cluster-autoscaler: no cluster-autoscaler version in $MOD/go.mod" >&2; exit 1; }
BIN="${CLUSTER_AUTOSCALER_BIN:-/var/cache/kube-scale-exporter/cluster-autoscaler-$VERSION/cluster-autoscaler}"
# The binary has no --version flag: a stamp beside it names the module version it was built from.
STAMP="$BIN.version"

if [[ -x "$BIN" && "$(cat "$STAMP" 2>/dev/null)" == "$VERSION" ]]; then
    echo "cluster-autoscaler: cached, $VERSION at $BIN"
    exit 0
fi
command -v go >/dev/null || { echo "48-cluster-autoscaler: no go on PATH" >&2; exit 1; }

work="$(mktemp -d /var/tmp/cluster-autoscaler-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
echo "cluster-autoscaler: building $VERSION (kwok provider) from the module proxy (takes minutes)"
(
    cd "$MOD"
    export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local GONOSUMDB=k8s.io/autoscaler
    go build -trimpath -tags kwok -ldflags "-s -w" -o "$work/cluster-autoscaler" \
        k8s.io/autoscaler/cluster-autoscaler
)
mkdir -p "$(dirname "$BIN")"
install -m 0755 "$work/cluster-autoscaler" "$BIN.new"
mv -f "$BIN.new" "$BIN"
echo "$VERSION" >"$STAMP"
echo "cluster-autoscaler: built $VERSION in $((SECONDS - start))s at $BIN"
