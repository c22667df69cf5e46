#!/usr/bin/env bash
# Helm 3, which renders, lints and installs charts/kube-scale-exporter (tests/helm, the
# e2e's test_8_helm.py). Built from the Go module proxy with .ci/go/helm/go.mod, where its
# version is pinned.
#
#   HELM_BIN  the binary (default below, one directory per version); testbed reads the same.
#
# Built once per version; when the cached binary runs, this does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."

MOD=.ci/go/helm
VERSION="$(sed -nE 's/^[[:space:]]*helm.sh\/helm\/v3 (v[0-9.]+).*/\1/p' "$MOD/go.mod")"
[[ -n "$VERSION" ]] || { echo "48-helm: no helm version in $MOD/go.mod" >&2; exit 1; }
# The Kubernetes minor its client libraries are from: Helm's own Makefile stamps it as the
# default capabilities (what `helm template` and `helm lint` assume without a cluster).
KUBE_MINOR="$(sed -nE 's/^[[:space:]]*k8s.io\/client-go v0\.([0-9]+)\..*/\1/p' "$MOD/go.mod")"
[[ -n "$KUBE_MINOR" ]] || { echo "48-helm: no k8s.io/client-go in $MOD/go.mod" >&2; exit 1; }
BIN="${HELM_BIN:-/var/cache/kube-scale-exporter/helm-$VERSION/helm}"

if "$BIN" version --template '{{.Version}}' 2>/dev/null | grep -qxF "$VERSION"; then
    echo "helm: cached, $("$BIN" version --short) at $BIN"
    exit 0
fi
command -v go >/dev/null || { echo "48-helm: no go on PATH" >&2; exit 1; }

work="$(mktemp -d /var/tmp/helm-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
(
    cd "$MOD"
    export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
    pkg=helm.sh/helm/v3
    go build -trimpath -ldflags "-s -w -X $pkg/internal/version.version=$VERSION \
        -X $pkg/pkg/lint/rules.k8sVersionMajor=1 -X $pkg/pkg/lint/rules.k8sVersionMinor=$KUBE_MINOR \
        -X $pkg/pkg/chartutil.k8sVersionMajor=1 -X $pkg/pkg/chartutil.k8sVersionMinor=$KUBE_MINOR" \
        -o "$work/helm" "$pkg/cmd/helm"
)
"$work/helm" version --short
mkdir -p "$(dirname "$BIN")"
install -m 0755 "$work/helm" "$BIN.new"
mv -f "$BIN.new" "$BIN"
echo "helm: built $VERSION in $((SECONDS - start))s at $BIN"
