#!/usr/bin/env bash
# prometheus-operator for tests/deploy/test_operator.py and the e2e cluster: the operator
# and prometheus-config-reloader of one release, built from the Go module proxy with
# .ci/go/prometheus-operator/go.mod (the release plus its two nested modules, replaced by
# their published modules of the same version), and that release's CRDs
# (example/prometheus-operator-crd/ in the module, what its bundle.yaml is made of).
#
#   PROMETHEUS_OPERATOR_DIR  where they live (default below, one directory per version);
#                            testbed/operator.py reads the same variable.
#
# Built once per version (991 s here on 2 cores shared with a Kubernetes build); when both
# cached binaries print the pinned version and the CRDs are there, this does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."

MOD=.ci/go/prometheus-operator
PKG=github.com/prometheus-operator/prometheus-operator
VERSION="$(sed -nE 's/^(require)?[[:space:]]*github.com\/prometheus-operator\/prometheus-operator (v[0-9.]+)( .*)?$/\2/p' "$MOD/go.mod")"
[[ -n "$VERSION" ]] || { echo "47-prometheus-operator: no $PKG version in $MOD/go.mod" >&2; exit 1; }
DIR="${PROMETHEUS_OPERATOR_DIR:-/var/cache/kube-scale-exporter/prometheus-operator-$VERSION}"
BINS=(operator prometheus-config-reloader)

cached=1
for b in "${BINS[@]}"; do
    [[ "$("$DIR/$b" --short-version 2>/dev/null)" == "${VERSION#v}" ]] || cached=0
done
compgen -G "$DIR/crds/*.yaml" >/dev/null || cached=0
if ((cached)); then
    echo "prometheus-operator: cached in $DIR ($VERSION)"
    exit 0
fi
command -v go >/dev/null || { echo "47-prometheus-operator: no go on PATH" >&2; exit 1; }

export GOFLAGS=-mod=readonly GOTOOLCHAIN=local
meta="$(cd "$MOD" && go mod download -json "$PKG@$VERSION")"
src="$(sed -nE 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p' <<<"$meta")"
[[ -f "$src/VERSION" ]] || { echo "47-prometheus-operator: no module source for $PKG@$VERSION" >&2; exit 1; }
# What the release's Makefile stamps (GO_BUILD_LDFLAGS), so that `--version` prints the
# release. The revision is the tag's commit, as the module proxy recorded it.
revision="$(sed -nE 's/^[[:space:]]*"Hash": "([0-9a-f]+)".*/\1/p' <<<"$meta")"
v=github.com/prometheus/common/version
ldflags="-s -w -X $v.Version=$(tr -d ' \t\r\n' <"$src/VERSION") -X $v.Revision=${revision:-unknown}"
ldflags+=" -X $v.Branch=$VERSION -X $v.BuildUser=kube-scale-exporter-ci -X $v.BuildDate=19700101-00:00:00"

work="$(mktemp -d /var/tmp/prometheus-operator-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
echo "prometheus-operator: building $VERSION (${BINS[*]}) from the module proxy (takes minutes)"
(
    cd "$MOD"
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$work/" \
        "$PKG/cmd/operator" "$PKG/cmd/prometheus-config-reloader"
)
mkdir -p "$DIR.new/crds"
for b in "${BINS[@]}"; do install -m 0755 "$work/$b" "$DIR.new/$b"; done
install -m 0644 "$src"/example/prometheus-operator-crd/*.yaml "$DIR.new/crds/"
"$DIR.new/operator" --version && echo
# Replace the directory whole: never write through a binary a test may be running.
rm -rf "$DIR" && mv "$DIR.new" "$DIR"
echo "prometheus-operator: built $VERSION in $((SECONDS - start))s into $DIR"
