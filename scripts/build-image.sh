#!/usr/bin/env bash
# Build the exporter image with podman: `make image`, and the image tests (txnwatch_dev/container.py).
#   IMAGE       the tag (default txnwatch:<version>, the version from txnwatch/__init__.py)
#   BASE_IMAGE  the base (default: the Dockerfile's, the official python image by digest);
#               where no registry is reachable, scripts/bootstrap-podman.sh's local one:
#               BASE_IMAGE=localhost/txnwatch-base-bookworm
#   REVISION    the source revision (default: git's HEAD, "-dirty" with uncommitted changes)
#   BUILDAH_ISOLATION  podman's own setting (default here chroot: RUN steps need no user
#               namespaces or runtime, and have the host's network)
# --format docker keeps the HEALTHCHECK (the OCI image format has none). Prints the image id.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v podman >/dev/null 2>&1 || { echo "build-image: podman not found (scripts/bootstrap-podman.sh installs it)" >&2; exit 1; }
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' txnwatch/__init__.py)
image=${IMAGE:-txnwatch:$version}
if [ -z "${REVISION:-}" ]; then
  REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  if [ "$REVISION" != unknown ] && ! git diff-index --quiet HEAD -- 2>/dev/null; then
    REVISION="$REVISION-dirty"
  fi
fi
args=(--format docker --isolation "${BUILDAH_ISOLATION:-chroot}" --network host
      --build-arg "VERSION=$version" --build-arg "REVISION=$REVISION" --tag "$image")
[ -z "${BASE_IMAGE:-}" ] || args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
podman build "${args[@]}" "$@" . >&2
podman image inspect --format '{{.Id}}' "$image"
