#!/usr/bin/env bash
# containerd 2.3 (the LTS) and 2.4 (the newest), with Debian's runc and docker-registry: the
# imagepull suite runs on 1.7 (52-containerd-trixie.sh), 2.3 and 2.4; the reliability and
# integration tests and the e2e node run 2.3; 2.1, the last line whose built-in
# config_path is empty, the registry-mirror matrix (tests/imagepull/test_mirrors.py) alone.
# Each is built from the Go module proxy with .ci/go/containerd-2.N/go.mod (containerd, ctr, containerd-shim-runc-v2). Tests start their
# own containerd and registry on temporary sockets and loopback ports: no service is used.
#
#   CONTAINERD_2_1_DIR, CONTAINERD_2_3_DIR, CONTAINERD_2_4_DIR
#                                           where each line's binaries live (default: one
#                                           directory per version); testbed reads them.
#
# Built once per version; when the cached containerd names its version, a line is skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh
apt_need runc docker-registry

for line in 2.1 2.3 2.4; do
    version="$(go_pin "containerd-$line" github.com/containerd/containerd/v2)"
    var="CONTAINERD_${line/./_}_DIR"
    dir="${!var:-/var/cache/kube-scale-exporter/containerd-$version}"
    if "$dir/containerd" --version 2>/dev/null | grep -F " $version " >/dev/null; then
        echo "containerd $line: cached, $version in $dir"
        continue
    fi
    pkg=github.com/containerd/containerd/v2
    go_build "containerd-$line" "$dir" no_btrfs,no_devmapper,no_zfs \
        "-X $pkg/version.Version=$version -X $pkg/version.Package=$pkg" \
        "$pkg/cmd/containerd" "$pkg/cmd/containerd-shim-runc-v2" "$pkg/cmd/ctr"
    "$dir/containerd" --version
done
