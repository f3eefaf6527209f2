#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: a .venv with the project and its
# extras, plus the apt packages the tests and demo use (promtool/prometheus).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.txnwatch-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints-dev.txt -nt "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[dev,spark,dashboards]" -c constraints-dev.txt
  touch "$stamp"
fi

# apt packages: only what is missing; never start packaged services.
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
# Java runs the real Apache Kafka broker of the tests and the demo (and small Kafka Streams apps).
{ command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1; } || need+=(default-jdk-headless)
if [ "${TXNWATCH_BOOTSTRAP_CHROMIUM:-1}" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  need+=(chromium)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    # policy-rc.d keeps the packaged prometheus service from starting.
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    rm -f /usr/sbin/policy-rc.d
    # Debian's package may have started it anyway on some systems; stop it.
    (systemctl stop prometheus prometheus-node-exporter >/dev/null 2>&1 || true)
  else
    echo "bootstrap: cannot install ${need[*]} (need root and apt-get); tests that need them will fail" >&2
  fi
fi

# A real Apache Kafka for the tests, the demo and the benchmarks. Nothing to do when one is
# found (KAFKA_HOME, ../shared/kafka/kafka_2.13-*, or this cache); otherwise the official
# release is downloaded from the Apache archive, where the machine can reach it, and its
# SHA-512 checked before it is unpacked. Without one the runs fall back to Tansu, and say so.
KAFKA_VERSION=3.1.0
KAFKA_SCALA=2.13
KAFKA_SHA512=5954c1cf38187134a6e0a21520cbef5cd5320a3e9290e630c3895990e892219917d911fabbc64da5db17bcaa940b8277c23344b50f2ff4256eaca78116e9fdc9
cache="${XDG_CACHE_HOME:-$HOME/.cache}/txnwatch"
if ! .venv/bin/python -c "import sys; from txnwatch.devtools.broker import find_kafka; sys.exit(0 if find_kafka() else 1)"; then
  name="kafka_${KAFKA_SCALA}-${KAFKA_VERSION}"
  url="https://archive.apache.org/dist/kafka/${KAFKA_VERSION}/${name}.tgz"
  mkdir -p "$cache"
  tgz="$cache/${name}.tgz.part"
  if command -v curl >/dev/null 2>&1 && curl -fsSL --connect-timeout 10 --max-time 600 -o "$tgz" "$url"; then
    got=$(sha512sum "$tgz" | cut -d' ' -f1)
    if [ "$got" = "$KAFKA_SHA512" ]; then
      tar -xzf "$tgz" -C "$cache" && rm -f "$tgz"
      echo "bootstrap: Apache Kafka ${KAFKA_VERSION} unpacked in $cache/${name}"
    else
      rm -f "$tgz"
      echo "bootstrap: ${url} has SHA-512 ${got}, expected ${KAFKA_SHA512}: not used" >&2
    fi
  else
    rm -f "$tgz"
    echo "bootstrap: no Apache Kafka distribution found and ${url} cannot be reached;" \
         "set KAFKA_HOME to an unpacked kafka_${KAFKA_SCALA}-3.x (tests and the demo fall back to Tansu)" >&2
  fi
fi
