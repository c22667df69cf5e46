#!/usr/bin/env bash
# A real kube-apiserver for the tests in tests/kube/.
#
# No registry we can reach ships a kube-apiserver binary, so it is built from Debian
# bookworm's `kubernetes` source package (1.20.x, full vendor/ tree, builds offline) with
# Debian's Go, and cached. When the cached binary exists and runs, this does nothing.
#
#   KUBE_APISERVER_BIN  where the binary lives (default below); tests read the same variable.
#
# ~5 min of CPU (measured 5m12s on 2 otherwise idle cores, 15 min while other jobs
# shared them), ~1.3 GB RAM; the ~2 GB build tree is removed afterwards.
set -euo pipefail

BIN="${KUBE_APISERVER_BIN:-/var/cache/kube-scale-exporter/kube-apiserver}"

if [[ -x "$BIN" ]] && "$BIN" --version >/dev/null 2>&1; then
    echo "kube-apiserver: cached at $BIN ($("$BIN" --version))"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
source "$(dirname "$0")/../lib.sh"
apt_need golang-go golang-github-modern-go-reflect2-dev dpkg-dev jq rsync make

work="$(mktemp -d /var/tmp/kube-apiserver-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT

# Debian's source tree with the reflect2 swap (.ci/lib.sh; 41-kube-node.sh uses it too):
# the vendored reflect2 1.0.1 faults under Go >= 1.18 ("fatal error: fault" ~45 s after
# start); Debian's 1.0.2 has the same API and works.
src="$(kube_source_tree "$work")"

# Kubernetes' own build (as debian/rules does): it generates the OpenAPI code first, builds
# in GOPATH mode through vendor/, and takes the version from the release tarball.
echo "kube-apiserver: building from Debian's source package (takes minutes)"
(
    cd "$src"
    export GOPROXY=off CGO_ENABLED=0 GOFLAGS= GO111MODULE= HOME="$work"
    make WHAT=cmd/kube-apiserver >"$work/make.log" 2>&1 || { tail -n 40 "$work/make.log" >&2; exit 1; }
)
mkdir -p "$(dirname "$BIN")"
cp "$src/_output/bin/kube-apiserver" "$BIN.tmp"
"$BIN.tmp" --version
mv -f "$BIN.tmp" "$BIN"
echo "kube-apiserver: built $BIN"
