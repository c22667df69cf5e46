#!/usr/bin/env bash
# What `make e2e` (tests/e2e) needs besides the Kubernetes binaries (40-, 41-): Debian's CNI
# plugins, iptables and conntrack for kube-proxy, buildah and mmdebstrap for the image, and
# the image itself, built from this tree now, so that the build never runs beside the tests
# (testbed/image.py caches the python:3.11-slim-bookworm stand-in once and the exporter image
# by a hash of its inputs, under /var/cache/kube-scale-exporter).
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh
apt_need containerd runc containernetworking-plugins iptables conntrack buildah mmdebstrap \
    docker-registry prometheus etcd-server iproute2 nodejs
# Prometheus with Kubernetes service discovery: bookworm's 2.42 is built without it, sid's
# 3.x has it (same cache as the mixin's Prometheus 3).
prom3=/var/cache/kube-scale-exporter/prometheus-sid
if ! "$prom3/root/usr/bin/prometheus" --version >/dev/null 2>&1; then
    sid_unpack "$prom3" prometheus promtool
fi
# prometheus-operator's CRD schemas, compiled into validators (tests/e2e/test_0_operator_schema.py).
schema=/var/cache/kube-scale-exporter/npm-prometheus-operator
if [[ ! -d "$schema/node_modules/@kubernetes-models/prometheus-operator" ]]; then
    mkdir -p "$schema"
    npm install --silent --no-audit --no-fund --prefix "$schema" @kubernetes-models/prometheus-operator@6.0.0
fi
start=$SECONDS
python3 -m testbed.image build
echo "e2e image ready in $((SECONDS - start))s"
