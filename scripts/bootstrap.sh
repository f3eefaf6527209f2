#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: a .venv with the project and its
# extras, the apt packages the tests and demo use (Debian's promtool, Alertmanager, a JDK, Maven),
# the Apache Kafka releases they run, from Maven Central, and the tools built from the Go module
# proxy (Prometheus 3 with its web UI, Helm); podman and the local base image of the image tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# Three venvs, installed side by side (pip is mostly unpacking and compiling, one core each;
# one after another they took 160 s of a fresh `make test`). Each job's output goes to a log,
# printed when it fails.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

main_venv() {
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  local stamp=.venv/.txnwatch-installed
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints-dev.txt -nt "$stamp" ]; then
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e ".[dev,spark,connect,dashboards]" -c constraints-dev.txt
    .venv/bin/pip install -q --upgrade pyspark -c constraints-dev.txt   # PySpark as pip installs it: the newest
    touch "$stamp"
  fi
}

# The oldest PySpark pyproject.toml claims, in a venv of its own: `make test` runs the Spark
# tests of the listener's parsing and of the sink there too.
oldest=.venv-spark-oldest
oldest_venv() {
  local floor ostamp
  floor=$(sed -n 's/.*"pyspark>=\([0-9][0-9.]*\)".*/\1/p' pyproject.toml | head -n 1)
  ostamp="$oldest/.txnwatch-installed-pyspark-$floor"
  if [ ! -f "$ostamp" ] || [ pyproject.toml -nt "$ostamp" ]; then
    [ -x "$oldest/bin/python" ] || "$PY" -m venv "$oldest"
    "$oldest/bin/pip" install -q --upgrade pip
    "$oldest/bin/pip" install -q -e ".[dev]" "pyspark~=${floor}.0" "pyarrow>=15" "pandas>=2,<3"
    rm -f "$oldest"/.txnwatch-installed-pyspark-*
    touch "$ostamp"
  fi
}

# PyFlink's venv (apache-flink's pins clash with PySpark's); its connector's jars come after apt.
flink_venv() { bash scripts/bootstrap-flink.sh venv; }

pids=()
for job in main_venv oldest_venv flink_venv; do
  "$job" > "$logs/$job.log" 2>&1 & pids+=("$!:$job")
done

# apt packages: only what is missing; never start packaged services. A pinned tool is looked
# for as its package installed it (dpkg's own record and the file at its own path), never as
# whatever comes first on PATH: a Prometheus user's own promtool 3 there is not Debian's 2.42.
need=()
have_deb() {   # PACKAGE FILE: the package is installed and FILE is there
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ] && [ -x "$2" ]
}
have_deb_file() {   # PACKAGE FILE: as have_deb, for a file that is not a program (a header, a plugin)
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ] && [ -e "$2" ]
}
# Debian's Prometheus 2.42: only its promtool, which runs the alert unit tests beside Prometheus 3's.
have_deb prometheus /usr/bin/promtool || need+=(prometheus)
# Alertmanager (and amtool): the alert chain's test routes and inhibits through a real one.
have_deb prometheus-alertmanager /usr/bin/prometheus-alertmanager || need+=(prometheus-alertmanager)
# Java runs the Apache Kafka brokers of the tests and the demo (and small Java clients and
# Kafka Streams apps); Maven resolves those releases from Maven Central. Any JDK 17+ and Maven do.
{ command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1; } || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# MIT Kerberos: the tests' own KDC (krb5kdc, kdb5_util; kadmin.local for principals and keytabs)
# and kinit/klist, which librdkafka runs to refresh its tickets (txnwatch_dev/identity/kdc.py).
have_deb krb5-kdc /usr/sbin/krb5kdc || need+=(krb5-kdc)
have_deb krb5-admin-server /usr/sbin/kadmin.local || need+=(krb5-admin-server)
have_deb krb5-user /usr/bin/kinit || need+=(krb5-user)
# Kafka clients' SASL/GSSAPI: python-gssapi (kafka-python's) builds against libkrb5-dev; librdkafka
# built with Cyrus SASL (PyPI's confluent-kafka has no GSSAPI) needs libsasl2-dev and, at run time,
# Cyrus SASL's GSSAPI plugin; the rest gives that build the features of PyPI's (TLS, zstd, lz4, OIDC).
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v make >/dev/null 2>&1 || need+=(make)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
have_deb libkrb5-dev /usr/bin/krb5-config || need+=(libkrb5-dev)
have_deb_file libsasl2-dev /usr/include/sasl/sasl.h || need+=(libsasl2-dev)
have_deb_file libsasl2-modules-gssapi-mit "/usr/lib/$multiarch/sasl2/libgssapiv2.so.2" || need+=(libsasl2-modules-gssapi-mit)
have_deb_file libssl-dev /usr/include/openssl/ssl.h || need+=(libssl-dev)
have_deb_file zlib1g-dev /usr/include/zlib.h || need+=(zlib1g-dev)
have_deb_file libzstd-dev /usr/include/zstd.h || need+=(libzstd-dev)
have_deb_file liblz4-dev /usr/include/lz4.h || need+=(liblz4-dev)
have_deb_file libcurl4-openssl-dev /usr/include/"$multiarch"/curl/curl.h || need+=(libcurl4-openssl-dev)
if [ "${TXNWATCH_BOOTSTRAP_CHROMIUM:-1}" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  need+=(chromium)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    # policy-rc.d keeps the packaged prometheus, alertmanager and Kerberos (krb5-kdc, kadmind)
    # services from starting: the tests run their own KDC.
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    rm -f /usr/sbin/policy-rc.d
    # Debian's package may have started it anyway on some systems; stop it.
    (systemctl stop prometheus prometheus-node-exporter prometheus-alertmanager krb5-kdc krb5-admin-server \
      >/dev/null 2>&1 || true)
  else
    echo "bootstrap: cannot install ${need[*]} (need root and apt-get): install them, then run make again" >&2
    exit 1
  fi
fi

failed=0
for entry in "${pids[@]}"; do
  if ! wait "${entry%%:*}"; then
    echo "bootstrap: ${entry#*:} failed:" >&2; cat "$logs/${entry#*:}.log" >&2; failed=1
  fi
done
[ "$failed" = 0 ] || exit 1

# The test and demo harness (txnwatch_dev/) is not part of the package: a .pth file puts the
# checkout on both dev venvs' path, so the tests, benchmarks and demo import it from anywhere.
for v in .venv "$oldest"; do
  site=$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  printf '%s\n' "$PWD" > "$site/txnwatch-dev-harness.pth"
done

# Official Apache Kafka releases from Maven Central for the tests, the demo and the benchmarks:
# the newest 4.x (the default) and the newest 3.9 (the transaction scenarios' 3.x line), resolved
# by mvn (checksums checked) into ~/.m2; their classpaths are kept in ~/.cache/txnwatch/kafka.
# Without Java or Maven this fails, saying what to install: nothing falls back to another broker.
.venv/bin/python -m txnwatch_dev.kafka "${KAFKA_VERSION:-4}" 3.9

# The exactly-once sink's JVM writer, built by Maven into the package (scripts/build-sink-jar.sh).
bash scripts/build-sink-jar.sh

# Flink's Kafka connector from Maven Central, for the Flink job's tests and the demo.
bash scripts/bootstrap-flink.sh jars

# Kerberos for both Kafka clients: python-gssapi in .venv, and .venv-kerberos, the exporter over
# a confluent-kafka built against a librdkafka with Cyrus SASL (PyPI's has no GSSAPI), built once.
bash scripts/bootstrap-kerberos.sh

# The container engine of the image tests (podman with runc, from apt) and their base image,
# made once with mmdebstrap from Debian's packages (no image registry is reachable here).
bash scripts/bootstrap-podman.sh

# Helm (built once from the Go module proxy) and the Prometheus Operator's CRDs, for the
# Helm chart's tests.
bash scripts/bootstrap-go.sh

# Prometheus 3 and promtool (built once from the Go module proxy) with the web UI (built once
# through the npm registry): the Prometheus of the tests, the demo and the benchmarks.
bash scripts/bootstrap-prometheus.sh
