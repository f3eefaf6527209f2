#!/usr/bin/env bash
# The wheel and the sdist, as a release ships them: `python -m build` (the sdist first, then the
# wheel built from that sdist, in isolated build environments) on a copy of the files git knows
# (tracked, or new and not ignored), so nothing stray in the checkout (build/, *.egg-info,
# caches) reaches them; then `twine check`. Usage: scripts/dist-python.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/dist-python.sh OUT_DIR}
py=${PYTHON:-.venv/bin/python}
mkdir -p "$out"
out=$(cd "$out" && pwd)

src=$(mktemp -d)
log=$(mktemp)
trap 'rm -rf "$src" "$log"' EXIT
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -e "$f" ] && printf '%s\0' "$f"        # not the tracked files deleted in the work tree
done | xargs -0 cp --parents -t "$src"
# The sink's JVM writer: built, not tracked (scripts/build-sink-jar.sh), and shipped.
bash scripts/build-sink-jar.sh
cp --parents txnwatch/spark_listener/sink/jars/txnwatch-spark-sink.jar "$src"

"$py" -m build --outdir "$out" "$src" > "$log" 2>&1 || { cat "$log" >&2; exit 1; }
"$py" -m twine check --strict "$out"/*.whl "$out"/*.tar.gz
