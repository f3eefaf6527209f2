#!/usr/bin/env bash
# Idempotent set-up of PyFlink for the Flink tests and spikes (txnwatch_dev/flink):
# .venv-flink, a venv of its own because apache-flink's pins clash with PySpark's, with the
# pinned apache-flink; then Flink's Kafka connector (flink-connector-kafka for this Flink
# line, with its kafka-clients) resolved from Maven Central by mvn (checksums checked) into
# ~/.m2, its jar list kept in ~/.cache/txnwatch/flink/<flink version>/.
# Needs Java and Maven (scripts/bootstrap.sh installs them) and Python 3.11.
#   bash scripts/bootstrap-flink.sh [venv|jars]    (default both: bootstrap.sh makes the venv
#                                                   beside the other venvs, the jars after apt)
set -euo pipefail
step=${1:-all}
cd "$(dirname "$0")/.."
FLINK_VERSION=$(sed -n 's/^FLINK_VERSION = "\(.*\)"$/\1/p' txnwatch_dev/flink/runtime.py)
PY=${PYTHON_FLINK:-python3.11}
VENV=${TXNWATCH_FLINK_VENV:-.venv-flink}

if ! command -v "$PY" >/dev/null 2>&1; then
  echo "bootstrap-flink: $PY not found: apache-flink $FLINK_VERSION is installed for Python 3.11 (PYTHON_FLINK names another interpreter)" >&2
  exit 1
fi
stamp="$VENV/.txnwatch-installed-apache-flink-$FLINK_VERSION"
if [ "$step" != jars ] && [ ! -f "$stamp" ]; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "apache-flink==$FLINK_VERSION"
  rm -f "$VENV"/.txnwatch-installed-apache-flink-*
  touch "$stamp"
fi

[ "$step" != venv ] || exit 0
for tool in java mvn; do
  command -v "$tool" >/dev/null 2>&1 || { echo "bootstrap-flink: $tool not found: run scripts/bootstrap.sh first" >&2; exit 1; }
done

# The connector's jars (Maven once; the list is cached). Runs in .venv-flink: the resolver
# needs only the standard library and txnwatch's source tree.
TXNWATCH_FLINK_VENV="$VENV" PYTHONPATH="$PWD" "$VENV/bin/python" -m txnwatch_dev.flink.runtime
