#!/usr/bin/env bash
# Prometheus for the mixin's tests (promtool rule tests, the live tests, pint's online checks),
# `make demo`, the operator's Prometheus in the e2e and bench.scale: 3.13, the LTS, and 3.16,
# the newest release. Each is built from the Go module proxy with .ci/go/prometheus-3.N/go.mod
# (prometheus and promtool; without the web UI's assets, which no test needs). Service
# discovery: Kubernetes (the e2e's Prometheus) besides file and static, which are always in;
# the other mechanisms' cloud SDKs are left out (`remove_all_sd`), about half the build.
#
#   PROMETHEUS_3_13_DIR, PROMETHEUS_3_16_DIR  where each line's two binaries live (default:
#                                             one directory per version); testbed reads them.
#
# Built once per version; when both cached binaries name their version, a line is skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh

for line in 3.16 3.13; do
    tag="$(go_pin "prometheus-$line" github.com/prometheus/prometheus)"
    # Tags are v0.3YY.Z for Prometheus 3.YY.Z.
    minor_patch="${tag#v0.3}"
    version="3.$((10#${minor_patch%%.*})).${minor_patch#*.}"
    var="PROMETHEUS_${line/./_}_DIR"
    dir="${!var:-/var/cache/kube-scale-exporter/prometheus-$version}"
    if "$dir/prometheus" --version 2>/dev/null | grep -F "version $version " >/dev/null &&
        "$dir/promtool" --version 2>/dev/null | grep -F "version $version " >/dev/null; then
        echo "prometheus $line: cached, $version in $dir"
        continue
    fi
    v=github.com/prometheus/common/version
    go_build "prometheus-$line" "$dir" remove_all_sd,enable_kubernetes_sd \
        "-X $v.Version=$version -X $v.Branch=release-$line -X $v.BuildUser=kube-scale-exporter-ci" \
        github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
    "$dir/prometheus" --version | sed -n 1p
done
