#!/usr/bin/env bash
# imagepull tests: Debian's containerd (with ctr) and docker-registry; h2, the
# collector's optional extra. Tests start their own containerd and registry on temp
# sockets and loopback ports, so the packages' services (systemd) are never used.
set -euo pipefail
cd "$(dirname "$0")/../.."
need=()
for pkg in containerd docker-registry; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
python3 -c "import h2" 2>/dev/null || python3 -m pip install -q -e '.[imagepull]'
