#!/usr/bin/env bash
# What `make e2e` (tests/e2e) needs besides the Kubernetes binaries (40-) and the operator's
# (44-): Debian's CNI plugins, iptables and conntrack for kube-proxy, buildah and mmdebstrap
# for the images, and the images themselves, built from this tree now, so that the build never
# runs beside the tests (testbed/image.py builds the exporter's from ./Dockerfile, cached by
# a hash of its inputs, and the python:3.11-slim-bookworm stand-in the operator's Prometheus
# image runs on once, under /var/cache/kube-scale-exporter).
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh
apt_need containerd runc containernetworking-plugins iptables conntrack buildah mmdebstrap \
    docker-registry prometheus etcd-server iproute2
# Prometheus with Kubernetes service discovery: bookworm's 2.42 is built without it, sid's
# 3.x has it (same cache as the mixin's Prometheus 3).
prom3=/var/cache/kube-scale-exporter/prometheus-sid
if ! "$prom3/root/usr/bin/prometheus" --version >/dev/null 2>&1; then
    sid_unpack "$prom3" prometheus promtool
fi
start=$SECONDS
python3 -m testbed.image build
# The images prometheus-operator runs in the cluster (its reloader; sid's Prometheus 3.5 on
# the bookworm base), from the binaries 44-prometheus-operator.sh built.
python3 -m testbed.operator images
echo "e2e images ready in $((SECONDS - start))s"
