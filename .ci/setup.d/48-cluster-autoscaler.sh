#!/usr/bin/env bash
# cluster-autoscaler with its kwok cloud provider, for tests/autoscaler: it adds Nodes from
# node-group templates, kwok plays them, and it provisions CapacityBuffers. The module proxy
# serves no release of it (its tags are cluster-autoscaler-1.N.M, not Go-style): it is built
# from the released source tarball .ci/third-party.sha256 pins, its sha256 checked before it
# is unpacked (third_party_src, .ci/lib.sh). Its dependencies come from the module proxy as
# the tarball's own go.mod and go.sum pin them (it replaces its apis module with ./apis).
# Only the kwok provider is compiled in (build tag `kwok`).
#
#   CLUSTER_AUTOSCALER_DIR  the binary and the CapacityBuffer CRD of the same release
#                           (autoscaling.x-k8s.io_capacitybuffers.yaml, as the tarball has it);
#                           default below, one directory per release; testbed/builds.py reads
#                           the same variable.
#
# Built once per release: when the directory's stamp names the release, this does nothing.
# The binary has no --version flag (with --v=1 it logs "Cluster Autoscaler 1.36.1" first).
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh
CACHE=/var/cache/kube-scale-exporter
CRD=autoscaling.x-k8s.io_capacitybuffers.yaml

VERSION="$(third_party_version cluster-autoscaler)"
DIR="${CLUSTER_AUTOSCALER_DIR:-$CACHE/cluster-autoscaler-$VERSION}"
if [[ -x "$DIR/cluster-autoscaler" && -f "$DIR/$CRD" && "$(cat "$DIR/stamp" 2>/dev/null)" == "$VERSION" ]]; then
    echo "cluster-autoscaler: cached, $VERSION in $DIR"
    exit 0
fi
command -v go >/dev/null || { echo "48-cluster-autoscaler: no go on PATH" >&2; exit 1; }

# Unpacked beside the result, in the cache, and gone once built.
build="$DIR.build"
rm -rf "$build"
mkdir -p "$build/out"
trap 'rm -rf "$build"' EXIT
src="$(third_party_src cluster-autoscaler "$build")"
start=$SECONDS
echo "cluster-autoscaler: building $VERSION (kwok provider) from its tarball (takes minutes)"
(
    cd "$src/cluster-autoscaler"
    export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
    nice -n 19 go build -trimpath -tags kwok -ldflags "-s -w" -o "$build/out/cluster-autoscaler" .
)
install -m 0644 "$src/cluster-autoscaler/apis/config/crd/$CRD" "$build/out/$CRD"
echo "$VERSION" >"$build/out/stamp"
# Swapped in whole, so that no test runs a binary while it is written.
rm -rf "$DIR.new"
mv "$build/out" "$DIR.new"
rm -rf "$DIR" && mv "$DIR.new" "$DIR"
echo "cluster-autoscaler: built $VERSION in $((SECONDS - start)) s into $DIR"
{ "$DIR/cluster-autoscaler" --v=1 --kubeconfig=/nonexistent 2>&1 || true; } | sed -n 1p
