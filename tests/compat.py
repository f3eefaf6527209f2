"""What the integration run showed, per broker line, for the compatibility tables of
docs/compatibility.md: tests record a cell once their assertions have passed, and
tests/integration/test_compatibility.py (run last: its run_last marker) holds the tables to
exactly what was recorded. A claim about a Kafka line holds only for what a test ran."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "compatibility.md"
_KEY = "_txnwatch_compatibility"
# A directory every process of the run appends its cells to (tests/conftest.py makes one per
# run, and the parallel workers inherit it): the compatibility check, run after them,
# reads all.
RECORDS_ENV = "TXNWATCH_COMPAT_RECORDS"


def record(config, table: str, row: str, column: str, value: object) -> None:
    """Record one cell (pytest's `request.config` carries them through the session, and the
    run's records directory to the check of a later process)."""
    cells = getattr(config, _KEY, None)
    if cells is None:
        cells = {}
        setattr(config, _KEY, cells)
    cells[(table, row, column)] = str(value)
    folder = os.environ.get(RECORDS_ENV)
    if folder:
        with open(Path(folder) / f"{os.getpid()}.jsonl", "a") as f:
            f.write(json.dumps([table, row, column, str(value)]) + "\n")


def recorded(config) -> dict[tuple[str, str, str], str]:
    """Every cell this process and the run's other processes recorded."""
    cells: dict[tuple[str, str, str], str] = {}
    folder = os.environ.get(RECORDS_ENV)
    if folder and Path(folder).is_dir():
        for f in sorted(Path(folder).glob("*.jsonl")):
            for line in f.read_text().splitlines():
                table, row, column, value = json.loads(line)
                cells[(table, row, column)] = value
    cells.update(getattr(config, _KEY, {}))
    return cells


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
