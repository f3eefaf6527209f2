#!/usr/bin/env bash
# `make release`: everything a user installs, written afresh to DIST_DIR (default dist/):
#   txnwatch-<version>-py3-none-any.whl, txnwatch-<version>.tar.gz   the wheel and the sdist
#   txnwatch-<chart version>.tgz                                     the Helm chart
#   txnwatch-<version>.oci.tar          the image (localhost/txnwatch:<version>) as an OCI archive
#   txnwatch-<version>.cdx.json         a CycloneDX SBOM of the image's Python environment
#   SHA256SUMS                          `sha256sum -c SHA256SUMS` in DIST_DIR checks them all
# Each piece is made by the script a test also runs (dist-python.sh, package-chart.sh,
# build-image.sh). BASE_IMAGE as for `make image`: where no registry is reachable,
# BASE_IMAGE=localhost/txnwatch-base-bookworm (scripts/bootstrap-podman.sh builds it).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${DIST_DIR:-dist}
py=${PYTHON:-.venv/bin/python}
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' txnwatch/__init__.py)
image=localhost/txnwatch:$version

case "$out" in ""|/|.|..) echo "release: DIST_DIR=$out is not a directory of its own" >&2; exit 2;; esac
rm -rf "$out"
mkdir -p "$out"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
step() {   # a step's own output only when it fails
  "$@" > "$log" 2>&1 || { cat "$log" >&2; echo "release: $* failed" >&2; exit 1; }
}
echo "release $version into $out/"
step bash scripts/dist-python.sh "$out"
step bash scripts/package-chart.sh "$out"
IMAGE=$image step bash scripts/build-image.sh
# The OCI image format has no HEALTHCHECK: a container of the loaded archive gets it from
# `--health-cmd 'txnwatch healthcheck'` (docs/deployment.md); `make image` keeps it.
podman save --quiet --format oci-archive -o "$out/txnwatch-$version.oci.tar" "$image"
# The SBOM lists what the image holds: its own Python reads its distributions' metadata.
podman run --rm -i --network none --no-healthcheck --entrypoint /opt/txnwatch/venv/bin/python "$image" -I - \
  < scripts/python_inventory.py \
  | "$py" scripts/sbom.py --name txnwatch --version "$version" --image "$image" - > "$out/txnwatch-$version.cdx.json"
(cd "$out" && sha256sum -- * > SHA256SUMS)
ls -l "$out"
