#!/usr/bin/env bash
# kube-rbac-proxy, the sidecar that --web.kube-rbac does in process: bench/kube_rbac.py runs
# it beside the exporter against a real API server. No registry here ships a binary, and its
# go.mod has a replace directive (`go install` refuses it), so it is built from the Go module
# proxy with .ci/go/kube-rbac-proxy/go.mod.
#
#   KUBE_RBAC_PROXY_BIN  the binary (default below, one directory per version); the bench
#                        reads the same variable.
#
# Built once per version; when the cached binary runs, this does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."

MOD=.ci/go/kube-rbac-proxy
VERSION="$(sed -nE 's/^(require)?[[:space:]]*github.com\/brancz\/kube-rbac-proxy (v[0-9.]+).*/\2/p' "$MOD/go.mod")"
[[ -n "$VERSION" ]] || { echo "42-kube-rbac-proxy: no kube-rbac-proxy version in $MOD/go.mod" >&2; exit 1; }
BIN="${KUBE_RBAC_PROXY_BIN:-/var/cache/kube-scale-exporter/kube-rbac-proxy-$VERSION/kube-rbac-proxy}"

if "$BIN" --version 2>&1 | grep -F "$VERSION" >/dev/null; then
    echo "kube-rbac-proxy: cached, $("$BIN" --version 2>&1) at $BIN"
    exit 0
fi
command -v go >/dev/null || { echo "42-kube-rbac-proxy: no go on PATH" >&2; exit 1; }

work="$(mktemp -d /var/tmp/kube-rbac-proxy-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
# What its Makefile stamps, so that --version names the release.
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$VERSION"
ldflags+=" -X k8s.io/component-base/version/verflag.programName=kube-rbac-proxy"
(
    cd "$MOD"
    export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
    go build -trimpath -ldflags "$ldflags" -o "$work/kube-rbac-proxy" \
        github.com/brancz/kube-rbac-proxy/cmd/kube-rbac-proxy
)
"$work/kube-rbac-proxy" --version
mkdir -p "$(dirname "$BIN")"
install -m 0755 "$work/kube-rbac-proxy" "$BIN.new"
mv -f "$BIN.new" "$BIN"
echo "kube-rbac-proxy: built $VERSION in $((SECONDS - start))s at $BIN"
