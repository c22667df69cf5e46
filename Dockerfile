# syntax=docker/dockerfile:1
# kube-scale-exporter image: `make image` (buildah, amd64 and arm64), or
# `docker build -t kube-scale-exporter .` / `podman build -t kube-scale-exporter .`.
# Stage one makes the image's files as three trees with tools/image_tree.py: bookworm's
# python3.11-minimal and libpython3.11-stdlib for the architecture being built (TARGETARCH),
# unpacked, less what the exporter never imports; the dependencies' wheels; the package.
# Stage two is those trees on an empty base, one layer each: no shell, package manager, pip
# or compiler. The build stage runs on the build machine's platform (BUILDPLATFORM) whatever
# the target: it unpacks and byte-compiles the target's files without running them, and only
# its last check runs the target's interpreter (on a foreign architecture through the
# kernel's binfmt_misc and qemu-user). docker buildx (BuildKit) sets BUILDPLATFORM and
# TARGETARCH itself; buildah 1.28 sets TARGETARCH, and `make image` gives it BUILDPLATFORM.
# Without BUILDPLATFORM the stage runs as the target platform and makes the same trees.
# The build stage is plain Debian bookworm: any mirror of debian:bookworm-slim (or one made
# with mmdebstrap, as testbed/image.py does where no container registry is reachable) works.
ARG BUILD_IMAGE=docker.io/library/debian:bookworm-slim

FROM --platform=${BUILDPLATFORM} ${BUILD_IMAGE} AS build
RUN apt-get update \
    && apt-get install --yes --no-install-recommends python3 python3-pip mmdebstrap \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kube_scale_exporter ./kube_scale_exporter
COPY tools/__init__.py tools/image_tree.py ./tools/
# Declared here, so that every architecture's build shares the layers above.
ARG TARGETARCH
RUN python3 -m tools.image_tree /trees ${TARGETARCH}

FROM scratch
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="kube-scale-exporter" \
      org.opencontainers.image.description="Prometheus exporter for the failures of very large Kubernetes clusters" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /trees/interpreter/ /
COPY --from=build /trees/dependencies/ /
COPY --from=build /trees/package/ /
# Nothing writes below / at run time: bytecode is compiled at build, logs go to stderr.
ENV PYTHONPATH=/usr/lib/kube-scale-exporter \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# nobody:nogroup by number, so runAsNonRoot can verify it without /etc/passwd.
USER 65534:65534
EXPOSE 9867
ENTRYPOINT ["/usr/bin/python3.11", "-m", "kube_scale_exporter"]
