#!/usr/bin/env bash
# What `make e2e` (tests/e2e) needs besides the Kubernetes binaries (40-), the operator's (44-)
# and Prometheus 3.16 (15-: the host's Prometheus, with Kubernetes service discovery, and the
# operator's): Debian's CNI plugins, iptables and conntrack for kube-proxy, buildah and
# mmdebstrap for the images, and the images themselves, built from this tree now, so that the
# build never runs beside the tests (testbed/image.py builds the exporter's from ./Dockerfile,
# cached by a hash of its inputs, under /var/cache/kube-scale-exporter).
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh
apt_need runc containernetworking-plugins iptables conntrack buildah mmdebstrap \
    docker-registry iproute2
# Prometheus 3.16 is 15-prometheus.sh's to build; missing, this names that step and fails.
python3 -m testbed.builds prometheus_binary 3.16 prometheus >/dev/null
start=$SECONDS
python3 -m testbed.image build
# The images prometheus-operator runs in the cluster, each a static binary from scratch: its
# reloader (44-prometheus-operator.sh built it) and Prometheus 3.16 (15-prometheus.sh).
python3 -m testbed.operator images
echo "e2e images ready in $((SECONDS - start))s"
