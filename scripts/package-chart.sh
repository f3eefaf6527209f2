#!/usr/bin/env bash
# The Helm chart as a release ships it: `helm package charts/txnwatch` into OUT_DIR (a release:
# dist/), once its generated files are current (scripts/regenerate.py --check), its appVersion
# is txnwatch's version (txnwatch/__init__.py) and `helm lint --strict` passes. Helm is the one
# scripts/bootstrap-go.sh builds (HELM overrides). Prints the package's path.
# Usage: scripts/package-chart.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/package-chart.sh OUT_DIR}
py=${PYTHON:-.venv/bin/python}
helm=${HELM:-${TXNWATCH_GO_BIN:-$HOME/.cache/txnwatch/go-bin}/helm}
[ -x "$helm" ] || { echo "$helm is missing: run make bootstrap (scripts/bootstrap-go.sh builds it)" >&2; exit 1; }

version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' txnwatch/__init__.py)
app=$(sed -n 's/^appVersion: "\(.*\)"$/\1/p' charts/txnwatch/Chart.yaml)
if [ "$app" != "$version" ]; then
  echo "charts/txnwatch/Chart.yaml: appVersion \"$app\" is not txnwatch's version $version" \
       "(txnwatch/__init__.py): set appVersion to the release being made" >&2
  exit 1
fi
"$py" scripts/regenerate.py --check >&2 ||
  { echo "the chart's generated files are out of date: run scripts/regenerate.py" >&2; exit 1; }

# a Helm home of its own: nothing of the user's (repositories, plugins) enters the package
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
export HELM_CACHE_HOME=$home/cache HELM_CONFIG_HOME=$home/config HELM_DATA_HOME=$home/data
"$helm" lint --strict charts/txnwatch >&2
mkdir -p "$out"
saved=$("$helm" package charts/txnwatch --destination "$out")
echo "${saved##*saved it to: }"
