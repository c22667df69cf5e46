#!/usr/bin/env bash
# Debian packages every area's tests use, and the package itself with its test extra.
set -euo pipefail
need=()
for pkg in etcd-server prometheus jsonnet iproute2 openssl curl make; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
python3 -m pip install -q -e '.[test]'
