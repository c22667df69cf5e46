#!/usr/bin/env bash
# Helm 4, which renders, lints and installs charts/kube-scale-exporter (tests/helm, the e2e's
# test_8_helm.py). Built from the Go module proxy with .ci/go/helm/go.mod, where its version
# is pinned.
#
#   HELM_BIN  the binary (default below, one directory per version); testbed reads the same.
#
# Built once per version; when the cached binary names its version, this does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh

VERSION="$(go_pin helm helm.sh/helm/v4)"
BIN="${HELM_BIN:-/var/cache/kube-scale-exporter/helm-$VERSION/helm}"

if "$BIN" version --template '{{.Version}}' 2>/dev/null | grep -xF "$VERSION" >/dev/null; then
    echo "helm: cached, $("$BIN" version --short) at $BIN"
    exit 0
fi
# What its Makefile stamps for a release build (no "unreleased" metadata).
v=helm.sh/helm/v4/internal/version
go_build helm "$(dirname "$BIN")" "" "-X $v.version=$VERSION -X $v.metadata= -X $v.gitTreeState=clean" \
    helm.sh/helm/v4/cmd/helm
"$BIN" version --short
