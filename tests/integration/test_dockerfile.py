"""The Dockerfile as text: hadolint-clean, and its default base is the official image pinned by
digest. The image it builds is run in test_image.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_hadolint_clean():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    out = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_default_base_is_the_official_image_pinned_by_digest():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=docker\.io/library/python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}$", text, re.M)
    assert all(line == "FROM ${BASE_IMAGE}" or line.startswith("FROM ${BASE_IMAGE} AS ")
               for line in text.splitlines() if line.startswith("FROM"))
