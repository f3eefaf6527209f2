#!/usr/bin/env bash
# Idempotent: tools written in Go, built once from the Go module proxy into
# ~/.cache/txnwatch/go-bin (TXNWATCH_GO_BIN), and the Prometheus Operator's CRDs (its module's
# zip in the Go module cache), for the Helm chart's tests. Versions: txnwatch_dev/gotools.py.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null 2>&1 || { echo "bootstrap-go: go not found (apt-get install golang, or a Go 1.22+ toolchain)" >&2; exit 1; }
ver() { sed -n "s/^$1 = \"\\(.*\\)\".*/\\1/p" txnwatch_dev/gotools.py; }
BIN=${TXNWATCH_GO_BIN:-$HOME/.cache/txnwatch/go-bin}
mkdir -p "$BIN"
helm_version=$(ver HELM_VERSION)
stamp="$BIN/.helm-$helm_version"
if [ ! -x "$BIN/helm" ] || [ ! -f "$stamp" ]; then
  echo "bootstrap-go: building helm $helm_version from the Go module proxy (once)"
  (cd /tmp && GOBIN="$BIN" GOFLAGS=-mod=mod go install "helm.sh/helm/v3/cmd/helm@$helm_version")
  rm -f "$BIN"/.helm-*; touch "$stamp"
fi
op=$(ver PROMETHEUS_OPERATOR_VERSION)
(cd /tmp && go mod download "github.com/prometheus-operator/prometheus-operator@$op")
