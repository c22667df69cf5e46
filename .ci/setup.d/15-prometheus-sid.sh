#!/usr/bin/env bash
# Prometheus 3 for tests/mixin: the rule unit tests and the live test run on Debian's 2.42
# (10-base.sh) and on the current upstream release, which is what users run. Debian sid
# ships it as two packages, `prometheus` and `promtool`; their Go binaries run on bookworm. The
# .debs are fetched with a private apt configuration (sid only, its own lists dir: the system's
# sources and lists stay untouched), unpacked with dpkg-deb -x into a cache, never installed.
#
#   PROMETHEUS3_BIN  the prometheus binary (default: the cache's); tests read the same variables.
#   PROMTOOL3_BIN    the promtool binary (default: the cache's).
#
# When both binaries run, this does nothing (~7 s and ~60 MB of download otherwise).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

CACHE=/var/cache/kube-scale-exporter/prometheus-sid
PROMETHEUS3_BIN="${PROMETHEUS3_BIN:-$CACHE/root/usr/bin/prometheus}"
PROMTOOL3_BIN="${PROMTOOL3_BIN:-$CACHE/root/usr/bin/promtool}"

if [[ -x "$PROMTOOL3_BIN" && -x "$PROMETHEUS3_BIN" ]] \
    && "$PROMTOOL3_BIN" --version >/dev/null 2>&1 && "$PROMETHEUS3_BIN" --version >/dev/null 2>&1; then
    echo "prometheus (sid): cached, $("$PROMTOOL3_BIN" --version 2>&1 | head -n1)"
    exit 0
fi

sid_unpack "$CACHE" prometheus promtool
"$CACHE/root/usr/bin/promtool" --version
"$CACHE/root/usr/bin/prometheus" --version
echo "prometheus (sid): unpacked into $CACHE"
