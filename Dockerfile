# txnwatch exporter image: `docker build -t txnwatch .`, or `make image` (scripts/build-image.sh:
# podman, with the version and revision labels set).
#
# The image sets no configuration. Set it by a mounted file, TXNWATCH_* variables or flags,
# each overriding the one before (docs/configuration.md); the defaults listen on port 10129:
#   docker run -p 10129:10129 -e TXNWATCH_BOOTSTRAP_SERVERS=kafka:9092 -e TXNWATCH_CLUSTER_NAME=prod txnwatch
#   docker run -p 10129:10129 --read-only --tmpfs /tmp \
#     -v $PWD/txnwatch.yaml:/etc/txnwatch/txnwatch.yaml:ro -e TXNWATCH_CONFIG=/etc/txnwatch/txnwatch.yaml txnwatch
# The HEALTHCHECK (`txnwatch healthcheck`) asks /healthz where the server says it listens,
# whichever of them set the port.
# TLS and basic auth: mount a web config and set TXNWATCH_WEB_CONFIG_FILE to it.
# Runs as UID 10001 and works with a read-only root filesystem given a writable /tmp (the
# worker processes' files): docker needs `--read-only --tmpfs /tmp`; podman's --read-only
# mounts a tmpfs on /tmp itself.

# The official Python image (named in full: podman needs no short-name alias), pinned by digest.
# The digest could not be verified where this line was written (no registry reachable there):
# it is a digest public Dockerfiles pin for this tag.
# Refresh it with `docker buildx imagetools inspect python:3.11-slim-bookworm` (the index digest).
# Any Debian bookworm base with python3 (3.11), its venv module and useradd builds this file:
# the tests build on one made locally (scripts/bootstrap-podman.sh).
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

# The project's wheel, built apart: no source tree or build leftovers in the image.
FROM ${BASE_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY txnwatch ./txnwatch
RUN python3 -m venv /tmp/build \
    && /tmp/build/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${BASE_IMAGE}

# A venv, not the system's pip: Debian's python3 refuses system-wide installs (PEP 668), and
# the venv's path is the same whichever python the base has.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/txnwatch/venv/bin:$PATH

WORKDIR /opt/txnwatch

# Dependencies first (pinned), so code changes reuse this layer.
COPY requirements/exporter.txt requirements/exporter.txt
RUN python3 -m venv /opt/txnwatch/venv \
    && /opt/txnwatch/venv/bin/pip install --no-cache-dir -r requirements/exporter.txt

# (COPY, not RUN --mount=from=wheel: podman 4's layer cache ignores what such a mount holds.)
COPY --from=wheel /wheels /tmp/wheels
RUN /opt/txnwatch/venv/bin/pip install --no-cache-dir --no-deps /tmp/wheels/txnwatch-*.whl \
    && rm -rf /tmp/wheels \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin txnwatch
COPY LICENSE ./

USER 10001
EXPOSE 10129

# /healthz where the server listens, over the scheme its web config sets
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["txnwatch", "healthcheck"]

# Build metadata last: a new revision rebuilds no layer above.
#   docker build --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg VERSION=$(python -c 'import txnwatch; print(txnwatch.__version__)') -t txnwatch .
ARG REVISION=unknown
ARG VERSION=""
LABEL org.opencontainers.image.title="txnwatch" \
      org.opencontainers.image.description="Prometheus exporter for exactly-once (transactional) Kafka pipelines" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.version="${VERSION}"
# txnwatch_build_info's revision; not a configuration key, so it overrides nothing.
ENV TXNWATCH_REVISION=${REVISION}

ENTRYPOINT ["txnwatch"]
CMD ["serve"]
