"""Draw the growth curves of bench_memory.py (`--json FILE`) as an SVG, without plotting libraries.

    .venv/bin/python bench/plot_growth.py growth.json docs/growth.svg

Two panels over the number of partitions (log scale): the poll cycle (seconds), and the
resident memory of the serving process and of the worker process (MB).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 420, 260, 58, 16, 34, 44
COLORS = ("#1f77b4", "#d62728", "#2ca02c")


def _ticks(top: float) -> list[float]:
    """About five round ticks from 0 to at least `top`."""
    raw = top / 5 or 1
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(math.ceil(top / step)) + 1)]


def panel(x0: int, title: str, unit: str, xs: list[int], series: dict[str, list[float]]) -> list[str]:
    lo, hi = math.log10(min(xs)), math.log10(max(xs))
    ticks = _ticks(max(v for vals in series.values() for v in vals))
    top = ticks[-1]

    def px(x: float) -> float:
        return x0 + PAD_L + (math.log10(x) - lo) / ((hi - lo) or 1) * (W - PAD_L - PAD_R)

    def py(y: float) -> float:
        return PAD_T + (1 - y / top) * (H - PAD_T - PAD_B)

    out = [f'<text x="{x0 + W / 2}" y="18" text-anchor="middle" font-weight="bold">{title}</text>']
    for t in ticks:
        out.append(f'<line x1="{x0 + PAD_L}" x2="{x0 + W - PAD_R}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 + PAD_L - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    for x in xs:
        out.append(f'<text x="{px(x):.1f}" y="{H - PAD_B + 16}" text-anchor="middle">{x / 1000:g}k</text>')
    out.append(f'<text x="{x0 + W / 2}" y="{H - 8}" text-anchor="middle">partitions (log scale)</text>')
    out.append(f'<text x="{x0 + 14}" y="{H / 2}" text-anchor="middle" '
               f'transform="rotate(-90 {x0 + 14} {H / 2})">{unit}</text>')
    for i, (name, vals) in enumerate(series.items()):
        c = COLORS[i % len(COLORS)]
        pts = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in zip(xs, vals, strict=True))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, v in zip(xs, vals, strict=True):
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(v):.1f}" r="3" fill="{c}"><title>{name}: {v:g} {unit} '
                       f'at {x:,} partitions</title></circle>')
        out.append(f'<text x="{x0 + PAD_L + 8}" y="{PAD_T + 4 + 14 * i}" fill="{c}">{name}</text>')
    return out


def render(rows: list[dict]) -> str:
    rows = sorted(rows, key=lambda r: r["partitions"])
    xs = [r["partitions"] for r in rows]
    body = panel(0, "Poll cycle", "seconds", xs, {"poll (worker)": [r["poll_s"] for r in rows]})
    body += panel(W, "Resident memory", "MB", xs, {"worker process": [r["worker_rss_mb"] for r in rows],
                                                   "serving process": [r["rss_mb"] for r in rows]})
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H}" font-family="sans-serif" '
            f'font-size="11"><rect width="100%" height="100%" fill="white"/>' + "".join(body) + "</svg>\n")


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        sys.exit("usage: plot_growth.py ROWS.json OUT.svg")
    Path(argv[1]).write_text(render(json.loads(Path(argv[0]).read_text())))


if __name__ == "__main__":
    main(sys.argv[1:])
