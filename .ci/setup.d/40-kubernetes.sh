#!/usr/bin/env bash
# Kubernetes for every test that starts an API server (tests/kube, the cluster-mode
# collectors, tests/e2e): kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy and kubectl of 1.37, and the pause image's binary (build/pause/linux/pause.c from
# the same module, `gcc -static`: no registry.k8s.io here); and 1.35's kube-apiserver alone,
# which the API-level tests run too (1.35 is the oldest release upstream supports). Each is
# built from the Go module proxy with .ci/go/kubernetes*/go.mod (k8s.io/kubernetes plus its
# staging modules replaced by their published v0.N releases).
#
#   KUBE_DIR, KUBE_1_35_DIR  where the binaries live (default below, one directory per
#                            version); the testbed reads the same variables.
#
# Built once per version; when every cached binary names its version, a release is skipped.
# Measured: see docs/development.md (setup steps).
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh
apt_need gcc libc6-dev

# Each binary's own version question (kubectl has no --version flag).
says_version() {
    local bin=$1 version=$2
    if [[ "$(basename "$bin")" == kubectl ]]; then
        "$bin" version --client 2>/dev/null | grep -F "$version" >/dev/null
    else
        "$bin" --version 2>/dev/null | grep -xF "Kubernetes $version" >/dev/null
    fi
}

# build MODDIR DIR BINARY...: the release MODDIR pins, its BINARYs (and pause) into DIR.
build() {
    local mod=$1 dir=$2 version major minor ldflags b cached=1
    shift 2
    version="$(go_pin "$mod" k8s.io/kubernetes)"
    for b in "$@"; do says_version "$dir/$b" "$version" || cached=0; done
    [[ -x "$dir/pause" ]] || cached=0
    if ((cached)); then
        echo "kubernetes: cached, $version ($*) in $dir"
        return
    fi
    IFS=. read -r major minor _ <<<"${version#v}"
    # What hack/lib/version.sh stamps, so that `--version` prints the release (not
    # v0.0.0-master). The module proxy gives no commit: the tree state says "archive".
    ldflags=""
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
        ldflags+=" -X $pkg.gitTreeState=archive -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
    echo "kubernetes: building $version ($*) from the module proxy (takes minutes)"
    go_build "$mod" "$dir" selinux,notest "$ldflags" $(printf 'k8s.io/kubernetes/cmd/%s ' "$@")
    local src
    src="$(cd ".ci/go/$mod" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
    gcc -static -O2 -o "$dir/pause.new" "$src/build/pause/linux/pause.c"
    mv "$dir/pause.new" "$dir/pause"
    "$dir/kube-apiserver" --version
}

build kubernetes "${KUBE_DIR:-/var/cache/kube-scale-exporter/kubernetes-$(go_pin kubernetes k8s.io/kubernetes)}" \
    kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl
build kubernetes-1.35 "${KUBE_1_35_DIR:-/var/cache/kube-scale-exporter/kubernetes-$(go_pin kubernetes-1.35 k8s.io/kubernetes)}" \
    kube-apiserver
