#!/usr/bin/env bash
# Kubernetes for every test that starts an API server (tests/kube, the cluster-mode
# collectors, tests/e2e): kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy and kubectl of one version, built from the Go module proxy with
# .ci/go/kubernetes/go.mod (k8s.io/kubernetes plus its staging modules replaced by their
# published v0.34 releases), and the pause image's binary (build/pause/linux/pause.c from
# the same module, `gcc -static`: no registry.k8s.io here).
#
#   KUBE_DIR  where the binaries live (default below, one directory per version); the
#             testbed reads the same variable.
#
# Built once per version; when every cached binary runs, this does nothing. Measured on 2
# idle cores: see docs/development.md (setup steps).
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh

MOD=.ci/go/kubernetes
VERSION="$(sed -nE 's/^(require)?[[:space:]]*k8s.io\/kubernetes (v[0-9.]+).*/\2/p' "$MOD/go.mod")"
[[ -n "$VERSION" ]] || { echo "40-kubernetes: no k8s.io/kubernetes version in $MOD/go.mod" >&2; exit 1; }
DIR="${KUBE_DIR:-/var/cache/kube-scale-exporter/kubernetes-$VERSION}"
BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

# Each binary's own version question (kubectl has no --version flag).
runs() { if [[ "$1" == kubectl ]]; then "$DIR/$1" version --client; else "$DIR/$1" --version; fi; }
cached=1
for b in "${BINS[@]}"; do
    runs "$b" >/dev/null 2>&1 || cached=0
done
[[ -x "$DIR/pause" ]] || cached=0
if ((cached)); then
    echo "kubernetes: cached in $DIR ($("$DIR/kube-apiserver" --version))"
    exit 0
fi

apt_need gcc libc6-dev
command -v go >/dev/null || { echo "40-kubernetes: no go on PATH" >&2; exit 1; }

IFS=. read -r major minor _ <<<"${VERSION#v}"
# What hack/lib/version.sh stamps, so that `--version` prints the release (not v0.0.0-master).
# The module proxy gives no commit: gitCommit stays empty and the tree state says "archive".
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=archive -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

work="$(mktemp -d /var/tmp/kubernetes-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
echo "kubernetes: building $VERSION (${BINS[*]}) from the module proxy (takes minutes)"
(
    cd "$MOD"
    export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
    go build -trimpath -tags selinux,notest -ldflags "$ldflags" -o "$work/" \
        $(printf 'k8s.io/kubernetes/cmd/%s ' "${BINS[@]}")
)
src="$(cd "$MOD" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
gcc -static -O2 -o "$work/pause" "$src/build/pause/linux/pause.c"
mkdir -p "$DIR.new"
for b in "${BINS[@]}" pause; do install -m 0755 "$work/$b" "$DIR.new/$b"; done
"$DIR.new/kube-apiserver" --version
"$DIR.new/kubectl" version --client
# Replace the directory whole: never write through a binary a test may be running.
rm -rf "$DIR" && mv "$DIR.new" "$DIR"
echo "kubernetes: built $VERSION in $((SECONDS - start))s into $DIR"
