# syntax=docker/dockerfile:1
# kube-scale-exporter image: `docker build -t kube-scale-exporter .`
# Stage one builds wheels for the package and its dependencies; stage two installs
# them offline and carries no compiler, build tool, pip or source tree.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kube_scale_exporter ./kube_scale_exporter
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="kube-scale-exporter" \
      org.opencontainers.image.description="Prometheus exporter for the failures of very large Kubernetes clusters" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
# Nothing writes below / at run time: bytecode is compiled at install, logs go to stderr.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m pip install --no-cache-dir --no-index --find-links=/wheels kube-scale-exporter \
    && python -m pip uninstall --yes pip setuptools wheel
# nobody:nogroup by number, so runAsNonRoot can verify it without /etc/passwd.
USER 65534:65534
EXPOSE 9867
ENTRYPOINT ["kube-scale-exporter"]
