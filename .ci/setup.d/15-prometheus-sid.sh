#!/usr/bin/env bash
# Prometheus 3 for tests/mixin: the rule unit tests and the live test run on Debian's 2.42
# (10-base.sh) and on the current upstream release, which is what users run. Debian sid
# ships it as two packages, `prometheus` and `promtool`; their Go binaries run on bookworm. The
# .debs are fetched with a private apt configuration (sid only, its own lists dir: the system's
# sources and lists stay untouched), unpacked with dpkg-deb -x into a cache, never installed.
#
#   PROMETHEUS3_BIN  the prometheus binary (default: the cache's); tests read the same variables.
#   PROMTOOL3_BIN    the promtool binary (default: the cache's).
#
# When both binaries run, this does nothing (~7 s and ~60 MB of download otherwise).
set -euo pipefail

CACHE=/var/cache/kube-scale-exporter/prometheus-sid
PROMETHEUS3_BIN="${PROMETHEUS3_BIN:-$CACHE/root/usr/bin/prometheus}"
PROMTOOL3_BIN="${PROMTOOL3_BIN:-$CACHE/root/usr/bin/promtool}"

if [[ -x "$PROMTOOL3_BIN" && -x "$PROMETHEUS3_BIN" ]] \
    && "$PROMTOOL3_BIN" --version >/dev/null 2>&1 && "$PROMETHEUS3_BIN" --version >/dev/null 2>&1; then
    echo "prometheus (sid): cached, $("$PROMTOOL3_BIN" --version 2>&1 | head -n1)"
    exit 0
fi

work="$(mktemp -d /var/tmp/prometheus-sid.XXXXXX)"
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
(cd "$work" && apt-get "${apt_opts[@]}" download -q prometheus promtool >/dev/null)
debs=("$work"/prometheus_*.deb "$work"/promtool_*.deb)
for deb in "${debs[@]}"; do
    [[ -f "$deb" ]] || { echo "prometheus (sid): apt-get download gave no $deb" >&2; exit 1; }
done

# Unpack beside the cache, then swap it in: a half-written tree is never left behind.
mkdir -p "$(dirname "$CACHE")"
rm -rf "$CACHE.new"
mkdir -p "$CACHE.new"
for deb in "${debs[@]}"; do
    dpkg-deb -x "$deb" "$CACHE.new/root"
    cp "$deb" "$CACHE.new/"
done
rm -rf "$CACHE"
mv "$CACHE.new" "$CACHE"
"$CACHE/root/usr/bin/promtool" --version
"$CACHE/root/usr/bin/prometheus" --version
echo "prometheus (sid): unpacked ${debs[*]##*/} into $CACHE"
