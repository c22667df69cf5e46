#!/usr/bin/env bash
# What tests/deploy and bench/web_security.py need besides the kubectl 40-kubernetes.sh builds
# (which renders deploy/'s kustomize Components and applies them): Debian's Python with venv
# (the image test runs the final stage as an unprivileged user, which cannot read the pyenv
# Python under /root), setpriv (util-linux) and ip for the capability test.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need python3-venv util-linux iproute2
