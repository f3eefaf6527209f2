#!/usr/bin/env bash
# Idempotent: the container engine of the image tests (podman with runc, from Debian's apt) and
# the base image they build on, made locally with mmdebstrap from Debian's own packages (no
# image registry is reachable here): bookworm minbase with python3, its venv module,
# ca-certificates and passwd (useradd), imported as localhost/txnwatch-base-bookworm.
# The base trusts this machine's local CAs (/usr/local/share/ca-certificates, as a company's
# base image would): pip inside `podman build` reaches PyPI through a TLS-intercepting proxy.
# The released image is built on the official python image (the Dockerfile's default).
# Names and run options: txnwatch_dev/container.py.
set -euo pipefail
cd "$(dirname "$0")/.."
val() { sed -n "s/^$1 = \"\\(.*\\)\".*/\\1/p" txnwatch_dev/container.py; }
base=$(val LOCAL_BASE)
runtime=$(val RUNTIME)
ulimits=$(sed -n 's/^ULIMITS = (\(.*\))/\1/p' txnwatch_dev/container.py | tr -d '",')
# What the base is made of; a change rebuilds it (the image carries it as a label).
packages=python3,python3-venv,ca-certificates,passwd
local_cas=$(cat /usr/local/share/ca-certificates/*.crt 2>/dev/null | sha256sum | cut -c1-16)
recipe="bookworm minbase $packages cas-$local_cas v1"

# Debian's packages, as dpkg records them (not whatever podman comes first on PATH).
need=()
for pkg in podman "$runtime" mmdebstrap; do
  [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" = "install ok installed" ] || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap-podman: cannot install ${need[*]} (need root and apt-get): install them, then run make again" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  # runc named with podman: apt would otherwise pick crun for podman's `crun | runc`.
  apt-get install -y -qq --no-install-recommends podman "$runtime" mmdebstrap catatonit >/dev/null
fi

have=$(podman image inspect --format '{{index .Config.Labels "org.txnwatch.base.recipe"}}' "$base" 2>/dev/null || true)
if [ "$have" != "$recipe" ]; then
  echo "bootstrap-podman: building $base with mmdebstrap from Debian's packages (once, a minute)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mirror=http://deb.debian.org/debian
  # No manuals, docs (but copyrights) or translations: the base stays near the official slim one.
  mmdebstrap --quiet --variant=minbase --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='cp /usr/local/share/ca-certificates/*.crt "$1/usr/local/share/ca-certificates/" 2>/dev/null || true' \
    --customize-hook='chroot "$1" update-ca-certificates >/dev/null 2>&1' \
    bookworm "$work/base.tar" "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main"
  podman rmi --force "$base" >/dev/null 2>&1 || true
  podman import --quiet --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' \
    --change "LABEL org.txnwatch.base.recipe=\"$recipe\"" "$work/base.tar" "$base" >/dev/null
fi

# podman's default rlimits (nofile 1048576) are above this machine's hard limits, and a container
# may lower limits but never raise them: every `podman run` (the README's, `make release`'s) then
# fails. Only there, a drop-in gives containers the harness's limits by default.
dropin=/etc/containers/containers.conf.d/50-txnwatch-ulimits.conf
if ! podman run --rm --network host "$base" true >/dev/null 2>&1 && [ ! -f "$dropin" ]; then
  [ "$(id -u)" = 0 ] || { echo "bootstrap-podman: podman cannot run a container here with its default rlimits;" \
    "as root, bootstrap would write $dropin" >&2; exit 1; }
  mkdir -p "$(dirname "$dropin")"
  printf '# written by txnwatch scripts/bootstrap-podman.sh: podman'"'"'s default rlimits exceed this host'"'"'s hard limits\n[containers]\ndefault_ulimits = [%s]\n' \
    "$(printf '"%s", ' $ulimits | sed 's/, $//')" > "$dropin"
  echo "bootstrap-podman: containers here get rlimits $ulimits by default ($dropin)"
fi
podman run --rm --network host "$base" true \
  || { echo "bootstrap-podman: a plain \`podman run\` still fails here (see $dropin)" >&2; exit 1; }

# Once per podman version and base: a container runs here as the tests run them.
stamp="${XDG_CACHE_HOME:-$HOME/.cache}/txnwatch/podman/works-$(podman version --format '{{.Client.Version}}')-$(podman image inspect --format '{{.Id}}' "$base" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  args=()
  for u in $ulimits; do args+=(--ulimit "$u"); done
  podman --runtime "$runtime" run --rm --network host "${args[@]}" "$base" python3 -c 'import ssl, venv' \
    || { echo "bootstrap-podman: podman cannot run a container of $base here" >&2; exit 1; }
  mkdir -p "$(dirname "$stamp")" && rm -f "$(dirname "$stamp")"/works-* && touch "$stamp"
fi
