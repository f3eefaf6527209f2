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
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[dev,spark,dashboards]"
  touch "$stamp"
fi

# apt packages: only what is missing; never start packaged services.
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
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
