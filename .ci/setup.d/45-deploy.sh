#!/usr/bin/env bash
# What tests/deploy and bench/web_security.py need: a kubectl that renders Components (below;
# the kubectl that applies is the one built with the API server, 40-kubernetes.sh); Debian's Python
# with venv (the image test runs the final stage as an unprivileged user, which cannot read
# the pyenv Python under /root); setpriv (util-linux) and ip for the capability test;
# node_exporter as the benchmark's peer.
#
#   KUSTOMIZE_KUBECTL  a kubectl whose kustomize knows Components (kustomize >= 3.7,
#                      kubectl >= 1.21), which renders deploy/. Found, or fetched, below.
#   KUSTOMIZE_KUBECTL_FETCH=1  fetch Debian sid's even when one is found.
# Tests and the Makefile look for it in the same order: $KUSTOMIZE_KUBECTL,
# the unpacked sid package ($SID below), kubectl on PATH.
#
# It comes from Debian, unpacked, never installed, so it never replaces a kubectl the
# machine already has: sid's kubectl (current upstream, with its kustomize), when no
# kubectl at hand renders a Component.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need python3-venv util-linux iproute2 prometheus-node-exporter

CACHE=/var/cache/kube-scale-exporter
SID="$CACHE/kubectl-sid"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# --- a kubectl that renders kustomize Components ---------------------------------------
# The probe: a kustomization using a Component, as deploy/kustomization.yaml does.
mkdir -p "$work/probe/c"
printf 'apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: [cm.yaml]\n' \
    >"$work/probe/c/kustomization.yaml"
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe}\n' >"$work/probe/c/cm.yaml"
printf 'components: [c]\n' >"$work/probe/kustomization.yaml"
renders_components() { [[ -x "$1" ]] && "$1" kustomize "$work/probe" >/dev/null 2>&1; }

if [[ "${KUSTOMIZE_KUBECTL_FETCH:-}" != 1 ]]; then
    for candidate in "${KUSTOMIZE_KUBECTL:-}" "$SID/usr/bin/kubectl" "$(command -v kubectl || true)"; do
        if [[ -n "$candidate" ]] && renders_components "$candidate"; then
            echo "kustomize: $candidate renders Components (KUSTOMIZE_KUBECTL)"
            exit 0
        fi
    done
fi

# None: Debian sid's kubectl, through a private apt configuration (its own
# sources and lists), so the machine's apt sources and package lists stay untouched.
uri="$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null \
       | grep -v security | head -n1)"
apt_dir="$work/apt"
mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial"
cat >"$apt_dir/sources.list.d/sid.sources" <<SOURCES
Types: deb
URIs: ${uri:-http://deb.debian.org/debian}
Suites: sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
apt_opts=(
    -o "Dir::Etc::SourceList=/dev/null"
    -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "APT::Sandbox::User=root"
)
apt-get "${apt_opts[@]}" update -q >/dev/null
# In sid, kubernetes-client is a transitional package; the binary is in `kubectl`
# (Debian's own build, not the cloud SDK's package of the same name: /sid picks it).
mkdir -p "$work/sid"
(cd "$work/sid" && apt-get "${apt_opts[@]}" download -q kubectl/sid >/dev/null)
rm -rf "$SID.new"
dpkg-deb -x "$work"/sid/kubectl_*.deb "$SID.new"
renders_components "$SID.new/usr/bin/kubectl" || {
    echo "kustomize: sid's kubectl does not render Components either" >&2; exit 1; }
# Replace the directory, never write into a previously unpacked binary.
rm -rf "$SID" && mv "$SID.new" "$SID"
echo "kustomize: unpacked $("$SID/usr/bin/kubectl" version --client 2>/dev/null | head -n1) to $SID (KUSTOMIZE_KUBECTL=$SID/usr/bin/kubectl)"
