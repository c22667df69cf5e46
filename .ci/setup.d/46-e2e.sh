#!/usr/bin/env bash
# What `make e2e` (tests/e2e) needs besides the Kubernetes binaries (40-), the operator's (44-),
# Prometheus 3.16 (15-: the host's Prometheus, with Kubernetes service discovery, and the
# operator's) and the exporter's image (45-image.sh): Debian's CNI plugins, iptables and
# conntrack for kube-proxy, buildah for the operator's images, and those images, built now,
# so that no build runs beside the tests.
# needs: 15-prometheus 44-prometheus-operator 45-image
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh
apt_need runc containernetworking-plugins iptables conntrack buildah docker-registry iproute2
# Prometheus 3.16 is 15-prometheus.sh's to build; missing, this names that step and fails.
python3 -m testbed.builds prometheus_binary 3.16 prometheus >/dev/null
# The exporter's image is 45-image.sh's to build; missing, this names that step and fails.
python3 -m testbed.image cached >/dev/null || { echo "46-e2e: run .ci/setup.d/45-image.sh" >&2; exit 1; }
start=$SECONDS
# The images prometheus-operator runs in the cluster, each a static binary from scratch: its
# reloader (44-prometheus-operator.sh built it) and Prometheus 3.16 (15-prometheus.sh).
python3 -m testbed.operator images
echo "e2e images ready in $((SECONDS - start))s"
