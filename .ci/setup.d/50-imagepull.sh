#!/usr/bin/env bash
# imagepull tests: Debian's containerd (with ctr) and docker-registry; h2, the
# collector's optional extra. Tests start their own containerd and registry on temp
# sockets and loopback ports, so the packages' services (systemd) are never used.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh
apt_need containerd docker-registry
python3 -c "import h2" 2>/dev/null || python3 -m pip install -q -e '.[imagepull]'
