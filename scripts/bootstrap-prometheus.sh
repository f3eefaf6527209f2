#!/usr/bin/env bash
# Idempotent: Prometheus 3 and promtool, built once from the Go module proxy, with the web UI
# built once from the same module's sources through the npm registry, into
# ~/.cache/txnwatch/prometheus/<version> (TXNWATCH_PROMETHEUS_HOME). The tests, the demo and the
# benchmarks run this Prometheus; Debian's 2.42 promtool stays only for the alert unit tests,
# which run on both. Versions: txnwatch_dev/gotools.py.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null 2>&1 || { echo "bootstrap-prometheus: go not found (apt-get install golang, or a Go 1.26+ toolchain)" >&2; exit 1; }
command -v npm >/dev/null 2>&1 || { echo "bootstrap-prometheus: npm not found (apt-get install npm; Node 20.19+)" >&2; exit 1; }
ver() { sed -n "s/^$1 = \"\\(.*\\)\".*/\\1/p" txnwatch_dev/gotools.py; }
version=$(ver PROMETHEUS_VERSION)
release=$(ver PROMETHEUS_RELEASE)
pnpm_version=$(ver PNPM_VERSION)
home=${TXNWATCH_PROMETHEUS_HOME:-$HOME/.cache/txnwatch/prometheus}/$version
[ -f "$home/.complete" ] && exit 0
mkdir -p "$home"

# The binaries. remove_all_sd leaves out the cloud service discoveries and their SDKs (static,
# file and HTTP discovery stay): the tests and the demo use static targets only.
if [ ! -x "$home/prometheus" ] || [ ! -x "$home/promtool" ]; then
  echo "bootstrap-prometheus: building prometheus and promtool $version from the Go module proxy (once, minutes)"
  # promu's version stamps, which `go install` leaves empty (--version, /api/v1/status/buildinfo)
  v=github.com/prometheus/common/version
  ldflags="-X $v.Version=$release -X $v.Revision=module-$version -X $v.Branch=HEAD -X $v.BuildUser=txnwatch-bootstrap"
  (cd /tmp && GOBIN="$home" GOFLAGS=-mod=mod go install -tags remove_all_sd -ldflags "$ldflags" \
     "github.com/prometheus/prometheus/cmd/prometheus@$version" "github.com/prometheus/prometheus/cmd/promtool@$version")
fi

# The web UI. Without the builtinassets tag, Prometheus serves it from ./static of its working
# directory (web/ui/ui.go), so PrometheusProcess starts it in $home.
if [ ! -f "$home/static/mantine-ui/index.html" ]; then
  echo "bootstrap-prometheus: building Prometheus's web UI $version with pnpm $pnpm_version (once)"
  (cd /tmp && go mod download "github.com/prometheus/prometheus@$version")
  src=$(cd /tmp && go list -m -f '{{.Dir}}' "github.com/prometheus/prometheus@$version")
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cp -r "$src/web/ui" "$work/ui" && chmod -R u+w "$work/ui"
  npm install --silent --prefix "$work/pnpm" "pnpm@$pnpm_version" >/dev/null
  export PATH="$work/pnpm/node_modules/.bin:$PATH"
  cd "$work/ui"
  if ! pnpm install --frozen-lockfile --reporter=silent >"$work/install.log" 2>&1; then
    # The upstream lockfile pins @mantine/code-highlight 9.7.2, which this machine's npm
    # registry does not serve; 9.6.2 is the newest it has (the component is only the
    # UI's code blocks). Every other package stays at the lockfile's version.
    echo "bootstrap-prometheus: the pinned lockfile does not install here ($(grep -m1 -o 'ERR_PNPM_[A-Z_]*' "$work/install.log" || echo error)); overriding @mantine/code-highlight to 9.6.2"
    sed -i 's/^minimumReleaseAge: .*/minimumReleaseAge: 0/; s/^minimumReleaseAgeStrict: .*/minimumReleaseAgeStrict: false/' pnpm-workspace.yaml
    printf "overrides:\n  '@mantine/code-highlight': 9.6.2\n" >> pnpm-workspace.yaml
    pnpm install --no-frozen-lockfile --reporter=silent
  fi
  CI="" bash build_ui.sh --mantine-ui >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }
  rm -rf "$home/static" && mkdir -p "$home/static" && mv static/mantine-ui "$home/static/mantine-ui"
fi
touch "$home/.complete"
