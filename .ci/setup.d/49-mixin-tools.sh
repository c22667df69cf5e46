#!/usr/bin/env bash
# The tools users vendor, render and lint mixins with: jsonnet-bundler (jb), go-jsonnet's
# jsonnet and jsonnetfmt (what kube-prometheus renders with) and pint. tests/mixin vendors
# the mixin with jb and renders it with go-jsonnet; `make lint` runs pint on rules/. None is
# in a registry here as a binary, so each is built from the Go module proxy with its go.mod
# under .ci/go (jsonnet-bundler, go-jsonnet, pint), where its version is pinned.
#
#   JB_BIN          jb (default below, one directory per version); testbed/builds.py reads
#   GO_JSONNET_DIR  the directory of jsonnet and jsonnetfmt        the same variables.
#   PINT_BIN        pint
#
# Built once per version; a tool whose cached binary runs and names its version is skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE=/var/cache/kube-scale-exporter

pin() { # MODDIR MODULE: the version .ci/go/MODDIR/go.mod requires of MODULE
    local v
    v="$(sed -nE "s#^(require)?[[:space:]]*$2 (v[^[:space:]]+).*#\2#p" ".ci/go/$1/go.mod")"
    [[ -n "$v" ]] || { echo "49-mixin-tools: no $2 version in .ci/go/$1/go.mod" >&2; exit 1; }
    echo "$v"
}

# build MODDIR VERSION DEST LDFLAGS PACKAGE... : each package's command into DEST's directory.
build() {
    local mod=$1 version=$2 dest=$3 ldflags=$4
    shift 4
    command -v go >/dev/null || { echo "49-mixin-tools: no go on PATH" >&2; exit 1; }
    local work start=$SECONDS
    work="$(mktemp -d /var/tmp/mixin-tools-build.XXXXXX)"
    (
        cd ".ci/go/$mod"
        export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
        go build -trimpath -ldflags "-s -w $ldflags" -o "$work/" "$@"
    )
    mkdir -p "$dest"
    for bin in "$work"/*; do
        install -m 0755 "$bin" "$dest/$(basename "$bin").new"
        mv -f "$dest/$(basename "$bin").new" "$dest/$(basename "$bin")"
    done
    rm -rf "$work"
    echo "$mod: built $version in $((SECONDS - start))s into $dest"
}

JB_VERSION="$(pin jsonnet-bundler github.com/jsonnet-bundler/jsonnet-bundler)"
JB_BIN="${JB_BIN:-$CACHE/jsonnet-bundler-$JB_VERSION/jb}"
if "$JB_BIN" --version 2>&1 | grep -xF "$JB_VERSION" >/dev/null; then
    echo "jb: cached, $JB_VERSION at $JB_BIN"
else
    build jsonnet-bundler "$JB_VERSION" "$(dirname "$JB_BIN")" "-X main.Version=$JB_VERSION" \
        github.com/jsonnet-bundler/jsonnet-bundler/cmd/jb
    "$JB_BIN" --version
fi

GO_JSONNET_VERSION="$(pin go-jsonnet github.com/google/go-jsonnet)"
GO_JSONNET_DIR="${GO_JSONNET_DIR:-$CACHE/go-jsonnet-$GO_JSONNET_VERSION}"
if "$GO_JSONNET_DIR/jsonnet" --version 2>&1 | grep -F "(Go implementation) $GO_JSONNET_VERSION" >/dev/null &&
    "$GO_JSONNET_DIR/jsonnetfmt" --version 2>&1 | grep -F "$GO_JSONNET_VERSION" >/dev/null; then
    echo "go-jsonnet: cached, $GO_JSONNET_VERSION in $GO_JSONNET_DIR"
else
    build go-jsonnet "$GO_JSONNET_VERSION" "$GO_JSONNET_DIR" "" \
        github.com/google/go-jsonnet/cmd/jsonnet github.com/google/go-jsonnet/cmd/jsonnetfmt
    "$GO_JSONNET_DIR/jsonnet" --version
fi

PINT_VERSION="$(pin pint github.com/cloudflare/pint)"
PINT_BIN="${PINT_BIN:-$CACHE/pint-$PINT_VERSION/pint}"
if "$PINT_BIN" version 2>&1 | grep -F "${PINT_VERSION#v}" >/dev/null; then
    echo "pint: cached, $("$PINT_BIN" version 2>&1 | sed -n 1p) at $PINT_BIN"
else
    build pint "$PINT_VERSION" "$(dirname "$PINT_BIN")" "-X main.version=${PINT_VERSION#v}" \
        github.com/cloudflare/pint/cmd/pint
    "$PINT_BIN" version
fi
