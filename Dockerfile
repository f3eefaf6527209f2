# txnwatch exporter image: `docker build -t txnwatch .`
# Config by TXNWATCH_* environment variables or a mounted file:
#   docker run -p 10129:10129 -e TXNWATCH_BOOTSTRAP_SERVERS=kafka:9092 txnwatch
#   docker run -v $PWD/txnwatch.yaml:/etc/txnwatch/txnwatch.yaml:ro -e TXNWATCH_CONFIG=/etc/txnwatch/txnwatch.yaml txnwatch
# TLS and basic auth: mount a web config and set TXNWATCH_WEB_CONFIG_FILE to it.
# Runs as a non-root user and works with a read-only root filesystem.
FROM python:3.11.7-slim-bookworm

# docker build --build-arg REVISION=$(git rev-parse HEAD) \
#   --build-arg VERSION=$(python -c 'import txnwatch; print(txnwatch.__version__)') -t txnwatch .
ARG REVISION=unknown
ARG VERSION=""
LABEL org.opencontainers.image.title="txnwatch" \
      org.opencontainers.image.description="Prometheus exporter for exactly-once (transactional) Kafka pipelines" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.version="${VERSION}"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/txnwatch

# Dependencies first (pinned), so code changes reuse this layer.
COPY requirements/exporter.txt requirements/exporter.txt
RUN pip install --no-cache-dir -r requirements/exporter.txt

COPY pyproject.toml README.md LICENSE ./
COPY txnwatch ./txnwatch
RUN pip install --no-cache-dir --no-deps . \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin txnwatch

USER 10001

ENV TXNWATCH_HOST=0.0.0.0 \
    TXNWATCH_PORT=10129 \
    TXNWATCH_REVISION=${REVISION}

EXPOSE 10129

# /healthz on the configured port and scheme (TXNWATCH_PORT, the web config's TLS)
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["txnwatch", "healthcheck"]

ENTRYPOINT ["txnwatch"]
CMD ["serve"]
