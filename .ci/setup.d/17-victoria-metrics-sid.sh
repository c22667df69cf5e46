#!/usr/bin/env bash
# VictoriaMetrics for tests/mixin's multi-cluster test: the mixin's rules evaluated by vmalert
# against VictoriaMetrics single-node, fed by two sharded Prometheus 3 instances remote-writing
# to it, the engine users run past one Prometheus. Debian sid ships it as victoria-metrics
# (victoria-metrics, vmagent, vmalert, ...); its Go binaries run on bookworm. The .deb is
# fetched with a private apt configuration (sid only, its own lists dir: the system's sources
# and lists stay untouched), unpacked with dpkg-deb -x into a cache, never installed.
#
#   VICTORIA_METRICS_BIN  the victoria-metrics binary (default: the cache's); tests read it too.
#   VMALERT_BIN           the vmalert binary (default: the cache's).
#   VMALERT_TOOL_BIN      vmalert-tool, whose `unittest` runs promtool-style rule tests on
#                         vmalert's rule engine over an embedded VictoriaMetrics.
#
# Debian builds these binaries without a version string (`-version` prints nothing): the
# package's version is written to CACHE/version, which the tests report.
#
# When both binaries run, this does nothing (~10 s and ~40 MB of download otherwise).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

CACHE=/var/cache/kube-scale-exporter/victoria-metrics-sid
VICTORIA_METRICS_BIN="${VICTORIA_METRICS_BIN:-$CACHE/root/usr/bin/victoria-metrics}"
VMALERT_BIN="${VMALERT_BIN:-$CACHE/root/usr/bin/vmalert}"
VMALERT_TOOL_BIN="${VMALERT_TOOL_BIN:-$CACHE/root/usr/bin/vmalert-tool}"

if [[ -x "$VICTORIA_METRICS_BIN" && -x "$VMALERT_BIN" && -x "$VMALERT_TOOL_BIN" && -s "$CACHE/version" ]] \
    && "$VICTORIA_METRICS_BIN" -version >/dev/null 2>&1 && "$VMALERT_BIN" -version >/dev/null 2>&1; then
    echo "victoria-metrics (sid): cached, $(cat "$CACHE/version")"
    exit 0
fi

start=$SECONDS
sid_unpack "$CACHE" victoria-metrics
dpkg-deb -f "$CACHE"/victoria-metrics_*.deb Version >"$CACHE/version"
"$CACHE/root/usr/bin/victoria-metrics" -version
"$CACHE/root/usr/bin/vmalert" -version
echo "victoria-metrics (sid): $(cat "$CACHE/version") unpacked into $CACHE in $((SECONDS - start)) s"
