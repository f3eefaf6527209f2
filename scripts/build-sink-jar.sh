#!/usr/bin/env bash
# The exactly-once sink's JVM writer (jvm/sink, a Maven project whose dependencies are all
# `provided` by Spark and its Kafka connector), built by Maven from Maven Central into the
# Python package (txnwatch/spark_listener/sink/jars/), which the wheel ships as package data.
# Idempotent: nothing is done while the jar is newer than the project's sources and POM.
set -euo pipefail
cd "$(dirname "$0")/.."
jar=txnwatch/spark_listener/sink/jars/txnwatch-spark-sink.jar
if [ -f "$jar" ] && [ -z "$(find jvm/sink/pom.xml jvm/sink/src -newer "$jar" -print -quit)" ]; then
  exit 0
fi
command -v mvn >/dev/null 2>&1 || { echo "build-sink-jar: Maven (mvn) not found: apt-get install maven" >&2; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
mvn -B -q --strict-checksums -f jvm/sink/pom.xml package > "$log" 2>&1 || { cat "$log" >&2; exit 1; }
mkdir -p "$(dirname "$jar")"
cp jvm/sink/target/txnwatch-spark-sink.jar "$jar.tmp" && mv "$jar.tmp" "$jar"
