#!/usr/bin/env bash
# imagepull tests: Debian's containerd (with ctr) and docker-registry. Tests start their own containerd and registry on temp
# sockets and loopback ports, so the packages' services (systemd) are never used.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh
apt_need containerd docker-registry
