#!/usr/bin/env bash
# What tests/deploy and bench/web_security.py need: a kubectl of the same version as the
# test kube-apiserver; Debian's Python with venv (the image test runs the final stage as an
# unprivileged user, which cannot read the pyenv Python under /root); setpriv (util-linux)
# and ip for the capability test; node_exporter as the benchmark's peer.
#
#   KUBECTL_BIN  where kubectl lives (default below); tests read the same variable.
#
# kubectl comes from Debian bookworm's kubernetes-client package (1.20.x, built from the
# same source package as the test kube-apiserver). It is unpacked, not installed, so it
# never replaces a kubectl the machine already has.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need python3-venv util-linux iproute2 prometheus-node-exporter

BIN="${KUBECTL_BIN:-/var/cache/kube-scale-exporter/kubectl}"

if [[ -x "$BIN" ]] && "$BIN" version --client >/dev/null 2>&1; then
    echo "kubectl: cached at $BIN"
    exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -q -o APT::Sandbox::User=root kubernetes-client >/dev/null)
dpkg-deb -x "$work"/kubernetes-client_*.deb "$work/root"
mkdir -p "$(dirname "$BIN")"
install -m 0755 "$work/root/usr/bin/kubectl" "$BIN"
"$BIN" version --client
