#!/usr/bin/env bash
# Thanos for tests/mixin/test_thanos_live.py (`make test-thanos`, run by hand like the benches:
# its first build, about 15 min, would push a cold .ci/run past its 75 min): sidecars beside two sharded Prometheus 3.16,
# Query over them and Ruler evaluating the committed rules/ through Query, the store most
# kube-prometheus users put behind their shards. One binary (`thanos`, every component),
# built from the Go module proxy with .ci/go/thanos/go.mod: the release's replace directives
# do not apply to a module that requires it, so that go.mod repeats them.
#
#   THANOS_DIR  where the binary lives (default: one directory per version); testbed reads it.
#
# v0.42.5's go.mod asks for Go 1.26.10, newer than the machine's 1.26.8: the build takes
# go1.27.3 from the module proxy (GOTOOLCHAIN below; about 76 MB, once per machine).
# Tags as the release's .promu.yml: netgo, and slicelabels, the labels layout Thanos'
# store protocol converts without copying. Built once; when the cached binary names the
# pinned version, this does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh

MOD=thanos
PKG=github.com/thanos-io/thanos
tag="$(go_pin "$MOD" "$PKG")"
version="${tag#v}"
DIR="${THANOS_DIR:-/var/cache/kube-scale-exporter/thanos-$tag}"
if "$DIR/thanos" --version 2>&1 | grep -F "version $version " >/dev/null; then
    echo "thanos: cached, $version in $DIR"
    exit 0
fi
command -v go >/dev/null || { echo "bench.d/16-thanos: no go on PATH" >&2; exit 1; }

work="$(mktemp -d /var/tmp/thanos-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
echo "thanos: building $version from the module proxy (takes minutes)"
(
    cd ".ci/go/$MOD"
    export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=go1.27.3
    # What the release's .promu.yml stamps, so that `--version` prints the release (the
    # module proxy records no commit for this tag: the revision stays unknown).
    v=github.com/prometheus/common/version
    nice -n 19 go build -trimpath -tags netgo,slicelabels -o "$work/" -ldflags "-s -w \
        -X $v.Version=$version -X $v.Branch=$tag \
        -X $v.BuildUser=kube-scale-exporter-ci -X $v.BuildDate=19700101-00:00:00" \
        "$PKG/cmd/thanos"
)
"$work/thanos" --version 2>&1 | sed -n 1p
mkdir -p "$(dirname "$DIR")"
rm -rf "$DIR.new" && mkdir -p "$DIR.new"
install -m 0755 "$work/thanos" "$DIR.new/thanos"
# Replace the directory whole: never write through a binary a test may be running.
rm -rf "$DIR" && mv "$DIR.new" "$DIR"
echo "thanos: built $version in $((SECONDS - start)) s into $DIR"
