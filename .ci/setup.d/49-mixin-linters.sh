#!/usr/bin/env bash
# The linters mixin users run: mixtool (`mixtool lint` on the mixin: alerts, rules and
# dashboards) and Grafana's dashboard-linter (on each generated dashboard, with
# dashboards/.lint). `make lint` runs both; tests/mixin/test_mixin_linters.py fails on a new
# finding. The module proxy serves neither at the commits we pin, so each is built from its
# tarball in ../shared/third_party, checked against .ci/third-party.sha256 first (where the
# commit is pinned), with the dependencies its own go.mod and go.sum pin, from the proxy.
#
#   MIXTOOL_BIN           mixtool (default below, one directory per commit); testbed/builds.py
#   DASHBOARD_LINTER_BIN  dashboard-linter                                 reads the same.
#
# Built once per commit; a cached binary whose stamp names its commit is kept.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh
CACHE=/var/cache/kube-scale-exporter

# build NAME BIN PACKAGE LDFLAGS: NAME's PACKAGE from its tarball into BIN's directory (replaced
# whole, as go_build does), with BIN.version naming the commit (dashboard-linter has no
# version flag; mixtool's prints what -X main.version sets, the same commit).
build() {
    local name=$1 bin=$2 pkg=$3 ldflags=$4 version work src dest start=$SECONDS
    version="$(third_party_version "$name")"
    if [[ -x "$bin" && "$(cat "$bin.version" 2>/dev/null)" == "$version" ]]; then
        echo "$name: cached, $version at $bin"
        return 0
    fi
    command -v go >/dev/null || { echo "49-mixin-linters: no go on PATH" >&2; return 1; }
    work="$(mktemp -d /var/tmp/mixin-linters-build.XXXXXX)"
    src="$(third_party_src "$name" "$work")" || { rm -rf "$work"; return 1; }
    echo "$name: building $version from $(basename "$src").tar.gz (takes minutes)"
    mkdir "$work/out"
    (
        cd "$src"
        export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
        go build -trimpath -ldflags "-s -w $ldflags" -o "$work/out/$(basename "$bin")" "$pkg"
    ) || { rm -rf "$work"; return 1; }
    echo "$version" >"$work/out/$(basename "$bin").version"
    dest="$(dirname "$bin")"
    mkdir -p "$(dirname "$dest")"
    rm -rf "$dest.new"
    mv "$work/out" "$dest.new"
    chmod 0755 "$dest.new"
    rm -rf "$dest" "$work" && mv "$dest.new" "$dest"
    echo "$name: built $version in $((SECONDS - start)) s at $bin"
}

MIXTOOL_VERSION="$(third_party_version mixtool)"
MIXTOOL_BIN="${MIXTOOL_BIN:-$CACHE/mixtool-$MIXTOOL_VERSION/mixtool}"
build mixtool "$MIXTOOL_BIN" ./cmd/mixtool "-X main.version=$MIXTOOL_VERSION"
"$MIXTOOL_BIN" --version

DASHBOARD_LINTER_VERSION="$(third_party_version dashboard-linter)"
DASHBOARD_LINTER_BIN="${DASHBOARD_LINTER_BIN:-$CACHE/dashboard-linter-$DASHBOARD_LINTER_VERSION/dashboard-linter}"
build dashboard-linter "$DASHBOARD_LINTER_BIN" . ""
echo "dashboard-linter $(cat "$DASHBOARD_LINTER_BIN.version") at $DASHBOARD_LINTER_BIN"
