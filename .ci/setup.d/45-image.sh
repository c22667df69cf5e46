#!/usr/bin/env bash
# The image, as `make image` builds it (tests/image, tests/deploy/test_image.py, the e2e and
# the benches run it), and what that takes: Debian's buildah; qemu-user-static with
# binfmt-support for the arm64 tree's import check at the end of its build and to start the
# arm64 image on this amd64 host (the kernel's binfmt_misc runs aarch64 binaries through
# qemu-aarch64-static, its F flag making that work inside chroots); Debian's
# docker-registry for the push test. Then actionlint, which checks
# .github/workflows (make lint), built from the Go module proxy with .ci/go/actionlint, with
# Debian's shellcheck for the workflows' run: scripts.
#
#   ACTIONLINT_BIN  actionlint (default below, one directory per version; testbed/builds.py
#                   reads the same variable)
#
# The build (both architectures, each build stage on this host's: only the arm64 check runs
# under qemu) runs here, never beside the tests: testbed/image.py caches it by a hash of the
# Dockerfile's inputs and the Makefile's image rule, and the build stage's base (bookworm
# minbase by mmdebstrap for this host's architecture: no container registry is reachable)
# once per machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh

binfmt=/proc/sys/fs/binfmt_misc
[[ -e $binfmt/register ]] || mount -t binfmt_misc binfmt_misc "$binfmt"
apt_need buildah mmdebstrap qemu-user-static binfmt-support docker-registry shellcheck
# binfmt-support registers qemu's formats when it is installed; a machine that booted since
# needs them registered again.
[[ -e $binfmt/qemu-aarch64 ]] || update-binfmts --enable qemu-aarch64
if ! grep -qx enabled "$binfmt/qemu-aarch64" || ! grep -q '^flags: .*F' "$binfmt/qemu-aarch64"; then
    echo "45-image: qemu-aarch64 is not registered with binfmt_misc (F flag):" >&2
    cat "$binfmt/qemu-aarch64" >&2
    exit 1
fi
buildah --version
qemu-aarch64-static --version | sed -n 1p

version="$(go_pin actionlint github.com/rhysd/actionlint)"
bin="${ACTIONLINT_BIN:-/var/cache/kube-scale-exporter/actionlint-$version/actionlint}"
if "$bin" -version 2>/dev/null | sed -n 1p | grep -xF "$version" >/dev/null; then
    echo "actionlint: cached, $version at $bin"
else
    go_build actionlint "$(dirname "$bin")" "" "-X github.com/rhysd/actionlint.version=$version" \
        github.com/rhysd/actionlint/cmd/actionlint
    "$bin" -version | sed -n 1p
fi

start=$SECONDS
python3 -m testbed.image build
echo "image: ready in $((SECONDS - start))s"
