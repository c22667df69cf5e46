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

# A private apt configuration with deb-src lines for the same archive the machine already
# uses, so the system's sources and package lists stay untouched.
apt_dir="$work/apt"
mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial"
if [[ -f /etc/apt/sources.list ]]; then
    sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' /etc/apt/sources.list \
        >"$apt_dir/sources.list.d/src.list"
fi
for f in /etc/apt/sources.list.d/*.sources; do
    [[ -e "$f" ]] || continue
    sed 's/^Types:.*/Types: deb-src/' "$f" >"$apt_dir/sources.list.d/$(basename "$f")"
done
apt_opts=(
    -o "Dir::Etc::SourceList=/dev/null"
    -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "APT::Sandbox::User=root"
)
apt-get "${apt_opts[@]}" update -q >/dev/null
(cd "$work" && apt-get "${apt_opts[@]}" source -q --only-source kubernetes/bookworm >/dev/null)
src="$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)"
[[ -n "$src" ]] || { echo "kube-apiserver: apt-get source kubernetes gave no source tree" >&2; exit 1; }
# The vendored reflect2 1.0.1 faults under Go >= 1.18 ("fatal error: fault" ~45 s after
# start); Debian's 1.0.2 has the same API and works.
rm -rf "$src/vendor/github.com/modern-go/reflect2"
cp -a /usr/share/gocode/src/github.com/modern-go/reflect2 "$src/vendor/github.com/modern-go/reflect2"

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
