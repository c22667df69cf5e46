#!/usr/bin/env bash
# kube-state-metrics, the peer bench/cluster_scale.py runs beside the cluster-mode exporter on
# the same kwok fleet. Built from the Go module proxy with .ci/go/kube-state-metrics/go.mod,
# where its version is pinned.
#
#   KUBE_STATE_METRICS_BIN  the binary (default below, one directory per version); testbed
#                           reads the same variable.
#
# Built once per version; when the cached binary runs, this does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."

MOD=.ci/go/kube-state-metrics
VERSION="$(sed -nE 's/^(require)?[[:space:]]*k8s.io\/kube-state-metrics\/v2 (v[0-9.]+).*/\2/p' "$MOD/go.mod")"
[[ -n "$VERSION" ]] || { echo "48-kube-state-metrics: no version in $MOD/go.mod" >&2; exit 1; }
BIN="${KUBE_STATE_METRICS_BIN:-/var/cache/kube-scale-exporter/kube-state-metrics-$VERSION/kube-state-metrics}"

if "$BIN" version 2>&1 | grep -F "$VERSION" >/dev/null; then
    echo "kube-state-metrics: cached, $("$BIN" version 2>&1 | sed -n 1p) at $BIN"
    exit 0
fi
command -v go >/dev/null || { echo "48-kube-state-metrics: no go on PATH" >&2; exit 1; }

work="$(mktemp -d /var/tmp/kube-state-metrics-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
# What its Makefile stamps (prometheus/common's version package), so `kube-state-metrics version` names it.
ldflags="-s -w -X github.com/prometheus/common/version.Version=$VERSION"
ldflags+=" -X github.com/prometheus/common/version.Branch=release-${VERSION%.*}"
(
    cd "$MOD"
    export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
    go build -trimpath -ldflags "$ldflags" -o "$work/kube-state-metrics" \
        k8s.io/kube-state-metrics/v2
)
"$work/kube-state-metrics" version
mkdir -p "$(dirname "$BIN")"
install -m 0755 "$work/kube-state-metrics" "$BIN.new"
mv -f "$BIN.new" "$BIN"
echo "kube-state-metrics: built $VERSION in $((SECONDS - start))s at $BIN"
