#!/usr/bin/env bash
# What the registry-mirror matrix (tests/imagepull/test_mirrors.py) runs besides containerd:
# crictl (cri-tools, pinned in .ci/go/cri-tools/go.mod), to pull through containerd's CRI as
# the kubelet does, and Spegel, whose `spegel configuration` writes the hosts.toml files the
# tests read. Spegel is not served by the Go module proxy: it is built from the tarball in
# ../shared/third_party (README there), its sha256 (.ci/third-party.sha256) checked first;
# its dependencies come from the proxy.
#
#   CRICTL_BIN, SPEGEL_BIN  the binaries (default below, one directory per version);
#                           testbed/builds.py reads the same variables.
#
# Built once per version; when a cached binary names its version, it is not built again.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh

CACHE=/var/cache/kube-scale-exporter
crictl_version="$(go_pin cri-tools sigs.k8s.io/cri-tools)"
CRICTL="${CRICTL_BIN:-$CACHE/cri-tools-$crictl_version/crictl}"
if "$CRICTL" --version 2>/dev/null | grep -F "${crictl_version#v}" >/dev/null; then
    echo "crictl: cached, $("$CRICTL" --version) at $CRICTL"
else
    go_build cri-tools "$(dirname "$CRICTL")" "" \
        "-X sigs.k8s.io/cri-tools/pkg/version.Version=$crictl_version" \
        sigs.k8s.io/cri-tools/cmd/crictl
    "$CRICTL" --version
fi

SPEGEL_VERSION="$(third_party_version spegel)"
SPEGEL="${SPEGEL_BIN:-$CACHE/spegel-$SPEGEL_VERSION/spegel}"
# Spegel prints no version of its own: a stamp beside it names the tarball it came from.
if [[ -x "$SPEGEL" && "$(cat "$SPEGEL.version" 2>/dev/null)" == "$SPEGEL_VERSION" ]]; then
    echo "spegel: cached, $SPEGEL_VERSION at $SPEGEL"
    exit 0
fi
work="$(mktemp -d /var/tmp/spegel-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
src="$(third_party_src spegel "$work")"  # checks the sha256 .ci/third-party.sha256 pins
(
    cd "$src"
    export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
    nice -n 19 go build -trimpath -ldflags "-s -w" -o "$work/spegel" .
)
mkdir -p "$(dirname "$SPEGEL")"
install -m 0755 "$work/spegel" "$SPEGEL.new"
mv -f "$SPEGEL.new" "$SPEGEL"
echo "$SPEGEL_VERSION" >"$SPEGEL.version"
echo "spegel: built $SPEGEL_VERSION in $((SECONDS - start))s at $SPEGEL"
