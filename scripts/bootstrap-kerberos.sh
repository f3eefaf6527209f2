#!/usr/bin/env bash
# Idempotent: what Kerberos (SASL/GSSAPI) needs beyond apt (MIT's KDC, libkrb5-dev, libsasl2-dev,
# which bootstrap.sh installs first):
#  - python-gssapi in .venv (kafka-python's GSSAPI; built from its sdist against libkrb5, no
#    Linux wheel exists: pip's cache keeps the build);
#  - a librdkafka built with Cyrus SASL, once into ~/.cache/txnwatch/librdkafka/<version>-sasl: PyPI's
#    confluent-kafka wheels have no GSSAPI. Its source is the newest any reachable registry ships,
#    npm's @confluentinc/kafka-javascript (deps/librdkafka);
#  - .venv-kerberos: the exporter (txnwatch[kerberos]) over confluent-kafka's sdist of the same
#    version built against that librdkafka. The Kerberos tests run the exporter from it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
NPM_PACKAGE=@confluentinc/kafka-javascript@1.10.1     # ships librdkafka 2.15.1
VERSION=2.15.1                                         # librdkafka, and the confluent-kafka built on it
PREFIX=${XDG_CACHE_HOME:-$HOME/.cache}/txnwatch/librdkafka/$VERSION-sasl
V=.venv-kerberos

.venv/bin/python -c 'import gssapi' 2>/dev/null || .venv/bin/pip install -q "gssapi>=1.8"

if [ ! -f "$PREFIX/.complete" ]; then
  echo "bootstrap-kerberos: building librdkafka $VERSION with Cyrus SASL (GSSAPI) from $NPM_PACKAGE (once)"
  command -v npm >/dev/null 2>&1 || { echo "bootstrap-kerberos: npm not found (it fetches librdkafka's source)" >&2; exit 1; }
  src=$(mktemp -d)
  trap 'rm -rf "$src"' EXIT
  (cd "$src" && npm pack --silent "$NPM_PACKAGE" >/dev/null && tar xzf ./*.tgz package/deps/librdkafka)
  rdk=$src/package/deps/librdkafka
  (cd "$rdk" && ./configure --prefix="$PREFIX" > "$src/configure.log" 2>&1) \
    || { tail -40 "$src/configure.log" >&2; exit 1; }
  grep -Eq '^WITH_SASL_CYRUS=\s*y' "$rdk/Makefile.config" \
    || { echo "bootstrap-kerberos: librdkafka configured without Cyrus SASL (apt-get install libsasl2-dev)" >&2; exit 1; }
  (make -C "$rdk/src" -j"$(nproc)" && make -C "$rdk/src" install) > "$src/make.log" 2>&1 \
    || { tail -40 "$src/make.log" >&2; exit 1; }
  touch "$PREFIX/.complete"
fi

stamp=$V/.txnwatch-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$PREFIX/.complete" -nt "$stamp" ]; then
  [ -x $V/bin/python ] || "$PY" -m venv $V
  $V/bin/pip install -q --upgrade pip
  CFLAGS="-I$PREFIX/include" LDFLAGS="-L$PREFIX/lib -Wl,-rpath,$PREFIX/lib" \
    $V/bin/pip install -q --no-binary confluent-kafka "confluent-kafka==$VERSION"
  $V/bin/pip install -q -e ".[kerberos]"
  $V/bin/python -c 'from confluent_kafka import Producer; Producer({"builtin.features": "sasl_gssapi"})' \
    || { echo "bootstrap-kerberos: $V's confluent-kafka has no GSSAPI" >&2; exit 1; }
  touch "$stamp"
fi
