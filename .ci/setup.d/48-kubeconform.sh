#!/usr/bin/env bash
# kubeconform, which validates what charts/kube-scale-exporter renders against the
# Kubernetes API schemas (tests/helm/test_kubeconform.py). Built from the Go module proxy
# with .ci/go/kubeconform/go.mod, where its version is pinned. It never downloads schemas
# here: the test writes them from the real kube-apiserver's OpenAPI (1.35 and 1.37).
#
#   KUBECONFORM_BIN  the binary (default below, one directory per version); testbed reads
#                    the same.
#
# Built once per version; when the cached binary names its version, this does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh

VERSION="$(go_pin kubeconform github.com/yannh/kubeconform)"
BIN="${KUBECONFORM_BIN:-/var/cache/kube-scale-exporter/kubeconform-$VERSION/kubeconform}"

if [[ "$("$BIN" -v 2>/dev/null)" == "$VERSION" ]]; then
    echo "kubeconform: cached, $VERSION at $BIN"
    exit 0
fi
# -v prints main.version, which its release builds stamp.
go_build kubeconform "$(dirname "$BIN")" "" "-X main.version=$VERSION" \
    github.com/yannh/kubeconform/cmd/kubeconform
"$BIN" -v
