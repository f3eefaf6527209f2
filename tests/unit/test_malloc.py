"""Releasing freed heap is safe to call (a no-op where glibc is absent)."""

import subprocess
import sys


def test_release_free_memory_in_a_fresh_process():
    code = ("from txnwatch.exporter.tap.malloc import release_free_memory\n"
            "x = [bytes(1000) for _ in range(100000)]\ndel x\nrelease_free_memory()\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
