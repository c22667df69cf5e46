# syntax=docker/dockerfile:1
# kube-scale-exporter image: `docker build -t kube-scale-exporter .`
# Stage one makes the image's files as three trees with tools/image_tree.py: bookworm's
# python3.11-minimal and libpython3.11-stdlib, unpacked, less what the exporter never
# imports; the dependencies' wheels; the package. Stage two is those trees on an empty base,
# one layer each: no shell, package manager, pip or compiler. testbed/image.py builds the
# e2e's image from this file: the build stage's last RUN on the host, then stage two.
ARG BUILD_IMAGE=python:3.11-slim-bookworm

FROM ${BUILD_IMAGE} AS build
RUN apt-get update \
    && apt-get install --yes --no-install-recommends mmdebstrap \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kube_scale_exporter ./kube_scale_exporter
COPY tools/__init__.py tools/image_tree.py ./tools/
RUN python -m tools.image_tree /trees

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
