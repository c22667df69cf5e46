#!/usr/bin/env bash
# containerd 2.x for the imagepull suite's second run (make test-containerd2): Debian sid's
# `containerd` package (containerd, ctr, containerd-shim-runc-v2), fetched with a private apt
# configuration (sid only, its own lists dir: the system's sources and lists stay untouched)
# and unpacked with dpkg-deb -x into a cache, never installed. Its Go binaries run on
# bookworm. The cluster of tests/e2e stays on bookworm's containerd 1.6: kubelet 1.20 speaks
# CRI v1alpha2, which containerd 2 removed.
#
#   CONTAINERD2_DIR  where the unpacked tree lives (default below); tests read the same variable.
#
# When the cached containerd runs, this does nothing.
set -euo pipefail

CACHE="${CONTAINERD2_DIR:-/var/cache/kube-scale-exporter/containerd-sid}"
BIN="$CACHE/root/usr/bin/containerd"

if [[ -x "$BIN" ]] && "$BIN" --version >/dev/null 2>&1; then
    echo "containerd (sid): cached, $("$BIN" --version)"
    exit 0
fi

work="$(mktemp -d /var/tmp/containerd-sid.XXXXXX)"
trap 'rm -rf "$work"' EXIT
apt_dir="$work/apt"
mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial" "$work/archives/partial"
cat >"$apt_dir/sources.list.d/sid.sources" <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
apt_opts=(
    -o "Dir::Etc::SourceList=/dev/null"
    -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache::Archives=$work/archives"
    -o "APT::Sandbox::User=root"
)
apt-get "${apt_opts[@]}" update -q >/dev/null
(cd "$work" && apt-get "${apt_opts[@]}" download -q containerd >/dev/null)
deb="$(ls "$work"/containerd_*.deb)"
mkdir -p "$(dirname "$CACHE")"
rm -rf "$CACHE.new"
mkdir -p "$CACHE.new"
dpkg-deb -x "$deb" "$CACHE.new/root"
cp "$deb" "$CACHE.new/"
rm -rf "$CACHE"
mv "$CACHE.new" "$CACHE"
"$BIN" --version
echo "containerd (sid): unpacked ${deb##*/} into $CACHE"
