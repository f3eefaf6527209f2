"""What the integration run showed, per broker line, for the compatibility tables of
docs/compatibility.md: tests record a cell once their assertions have passed, and
tests/integration/test_compatibility.py (run last: its run_last marker) holds the tables to
exactly what was recorded. A claim about a Kafka line holds only for what a test ran."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "compatibility.md"
_KEY = "_txnwatch_compatibility"


def record(config, table: str, row: str, column: str, value: object) -> None:
    """Record one cell (pytest's `request.config` carries them through the session)."""
    cells = getattr(config, _KEY, None)
    if cells is None:
        cells = {}
        setattr(config, _KEY, cells)
    cells[(table, row, column)] = str(value)


def recorded(config) -> dict[tuple[str, str, str], str]:
    return dict(getattr(config, _KEY, {}))


def parse_tables(text: str) -> dict[tuple[str, str, str], str]:
    """{(table, row, column): cell} of every table that follows a `<!-- table: NAME -->`
    marker; the first column names the row (pure)."""
    out: dict[tuple[str, str, str], str] = {}
    for name, body in re.findall(r"<!-- table: ([\w-]+) -->\s*\n((?:\|.*\n)+)", text):
        rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in body.strip().splitlines()]
        header, data = rows[0], [r for r in rows[2:]]
        for r in data:
            for col, cell in zip(header[1:], r[1:], strict=True):
                out[(name, r[0], col)] = cell
    return out
