"""Screenshot a page with headless Chromium (Debian's `chromium`).

    python -m txnwatch_dev.observability.screenshot URL OUT.png [--width 1280 --height 1000]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        raise RuntimeError("chromium is not installed: `apt-get install chromium` (make bootstrap does it)")
    return path


def _run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="txnwatch-chromium-") as profile:
        return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, timeout=timeout)


def screenshot(url: str, out: str, width: int = 1280, height: int = 1000) -> None:
    r = _run([f"--screenshot={out}", f"--window-size={width},{height}", url])
    if r.returncode != 0:
        raise RuntimeError(f"chromium failed ({r.returncode}): {r.stderr.decode()[-1500:]}")


def dump_dom(url: str, virtual_time_ms: int | None = None) -> str:
    """The page's DOM after load; with `virtual_time_ms`, after the page's scripts had that
    much (virtual) time for their requests and rendering (a single-page app's views)."""
    budget = [f"--virtual-time-budget={virtual_time_ms}"] if virtual_time_ms else []
    r = _run([*budget, "--dump-dom", url])
    if r.returncode != 0:
        raise RuntimeError(f"chromium failed ({r.returncode}): {r.stderr.decode()[-1500:]}")
    return r.stdout.decode()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("out")
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=1000)
    a = p.parse_args(argv)
    screenshot(a.url, a.out, a.width, a.height)
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
