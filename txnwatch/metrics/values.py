"""Sample and label values from input txnwatch does not control (events from listeners and
the ingest, records from producers): a number is finite or nothing, a label value is cut
short. Pure."""

from __future__ import annotations

import math
from typing import Any

LABEL_MAX = 120   # characters of a label value taken from input


def num(v: Any) -> float | None:
    """A finite float from an int/float or a numeric string; None for anything else."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        f = float(v)
    elif isinstance(v, str):
        try:
            f = float(v.strip())
        except ValueError:
            return None
    else:
        return None
    return f if math.isfinite(f) else None


def label_value(v: Any) -> str:
    """`v` as a label value, at most LABEL_MAX characters (a longer one ends in "...")."""
    s = str(v)
    return s if len(s) <= LABEL_MAX else s[:LABEL_MAX - 3] + "..."
