#!/usr/bin/env bash
# containerd 2.x for tests/imagepull/test_containerd_config.py and test_pull_errors.py:
# Debian sid's `containerd` package (containerd, ctr, containerd-shim-runc-v2), fetched with
# a private apt configuration (sid only, its own lists dir: the system's sources and lists
# stay untouched) and unpacked with dpkg-deb -x into a cache, never installed. Its Go
# binaries run on bookworm. Same cache and variable as the e2e branch's 51-containerd-sid.sh,
# so whichever runs first serves both.
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
debs=("$work"/containerd_*.deb)
[[ -f "${debs[0]}" ]] || { echo "containerd (sid): apt-get download gave no .deb" >&2; exit 1; }

# Unpack beside the cache, then swap it in: a half-written tree is never left behind.
mkdir -p "$(dirname "$CACHE")"
rm -rf "$CACHE.new"
mkdir -p "$CACHE.new"
dpkg-deb -x "${debs[0]}" "$CACHE.new/root"
cp "${debs[0]}" "$CACHE.new/"
rm -rf "$CACHE"
mv "$CACHE.new" "$CACHE"
"$BIN" --version
echo "containerd (sid): unpacked ${debs[0]##*/} into $CACHE"
