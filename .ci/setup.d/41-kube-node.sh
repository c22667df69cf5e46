#!/usr/bin/env bash
# The rest of a single-node cluster for the end-to-end suite (tests/e2e/): kubelet,
# kube-scheduler, kube-controller-manager, kube-proxy, and the pause image's binary.
#
# Built like kube-apiserver (40-kube-apiserver.sh) from Debian bookworm's `kubernetes`
# source package, same reflect2 swap, one `make WHAT=...` for the four binaries; pause is
# build/pause/linux/pause.c compiled with `gcc -static` (no registry.k8s.io here).
# When every cached binary exists and runs, this does nothing.
#
#   KUBE_NODE_DIR  where the binaries live (default /var/cache/kube-scale-exporter);
#                  tests/e2e reads the same variable.
#
# Measured: see docs/deploy.md "Tested end to end" (~8 min of CPU on 2 idle cores,
# ~1.4 GB peak RSS; the ~2 GB build tree is removed afterwards).
set -euo pipefail

DIR="${KUBE_NODE_DIR:-/var/cache/kube-scale-exporter}"
BINS=(kubelet kube-scheduler kube-controller-manager kube-proxy)

cached=1
for b in "${BINS[@]}"; do
    [[ -x "$DIR/$b" ]] && "$DIR/$b" --version >/dev/null 2>&1 || cached=0
done
[[ -x "$DIR/pause" ]] || cached=0
if ((cached)); then
    echo "kube node binaries: cached in $DIR ($("$DIR/kubelet" --version))"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
source "$(dirname "$0")/../lib.sh"
apt_need golang-go golang-github-modern-go-reflect2-dev dpkg-dev jq rsync make gcc libc6-dev

work="$(mktemp -d /var/tmp/kube-node-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
src="$(kube_source_tree "$work")"

start=$SECONDS
echo "kube node binaries: building ${BINS[*]} from Debian's source package (takes minutes)"
(
    cd "$src"
    export GOPROXY=off CGO_ENABLED=0 GOFLAGS= GO111MODULE= HOME="$work"
    what="$(printf 'cmd/%s ' "${BINS[@]}")"
    make WHAT="${what% }" >"$work/make.log" 2>&1 || { tail -n 40 "$work/make.log" >&2; exit 1; }
)
gcc -static -O2 -o "$work/pause" "$src/build/pause/linux/pause.c"
mkdir -p "$DIR"
for b in "${BINS[@]}"; do
    cp "$src/_output/bin/$b" "$DIR/$b.tmp"
    "$DIR/$b.tmp" --version
    mv -f "$DIR/$b.tmp" "$DIR/$b"
done
install -m 0755 "$work/pause" "$DIR/pause"
echo "kube node binaries: built in $((SECONDS - start))s into $DIR"
