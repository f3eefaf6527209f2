"""txnwatch: monitoring for exactly-once (transactional) Kafka pipelines.

Which build runs: `__version__` (the one place the version is written; pyproject.toml reads
it) and `revision()`, the source revision it was built from."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

__version__ = "0.2.0"

REVISION_ENV = "TXNWATCH_REVISION"   # the image sets it from its build argument


@functools.cache
def revision() -> str:
    """The commit txnwatch was built from: $TXNWATCH_REVISION (the image's build argument),
    else the commit of the git checkout it runs from, else "unknown" (a plain pip install).
    Looked up once, on first use."""
    env = os.environ.get(REVISION_ENV, "").strip()
    if env:
        return env
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return "unknown"
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def describe_build() -> str:
    return f"txnwatch {__version__} (revision {revision()})"
