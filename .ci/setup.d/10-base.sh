#!/usr/bin/env bash
# Debian packages every area's tests use, and the package itself with its test extra.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need jsonnet iproute2 openssl curl make
python3 -m pip install -q -e '.[test]'
