# The image the manifests in deploy/kubernetes/ run: greengpu/greengpu:0.1.0, the daemon and the node agent.
#
#   docker build -t greengpu/greengpu:0.1.0 .
#
# The base is pinned to an exact Python and Debian release; to pin its digest as well (recommended), pass
#   --build-arg PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:<digest of your registry's copy>
# tests/integration/test_dockerfile.py runs the install and entrypoint steps below in a fresh environment and lints
# this file (CI cannot pull a base image).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
# Only what the package is built from: no tests, docs, data or .git in the image.
COPY pyproject.toml README.md ./
COPY greengpu ./greengpu
# The slim core and the Kubernetes client: what the daemon and the agent run (no planning libraries).
RUN python -m pip install --no-cache-dir --prefix=/install ".[kube]"

FROM ${PYTHON_IMAGE}
# dbus-send: the agent's node-local suspend calls logind over the host's system bus (docs/SLEEP.md).
RUN apt-get update \
    && apt-get install -y --no-install-recommends dbus-bin \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /install /usr/local
# Non-root by default (the daemon's UID); the agent's DaemonSet runs it as root for NVML writes.
USER 65532:65532
# Kubernetes ignores HEALTHCHECK: the manifests probe GET /healthz (liveness) on each container's port.
HEALTHCHECK NONE
ENTRYPOINT ["greengpu"]
CMD ["--help"]
