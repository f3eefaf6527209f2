"""Metric names in PromQL expressions, checked against the metric catalogue.

A deliberately small parser: it removes string literals, label matchers, ranges and
the label lists of `by/without/on/ignoring/group_left/group_right`, then keeps the
identifiers that are not functions, keywords or durations. Good enough for the
expressions txnwatch generates (tests use it to keep dashboards and rules honest).
"""

from __future__ import annotations

import re

from txnwatch.metrics import CATALOG

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
            "offset", "bool", "inf", "nan", "atan2"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_BRACES = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_GRAFANA_VAR = re.compile(r"\$\{?\w+\}?")


def metric_names(expr: str) -> set[str]:
    """Names of the series an expression selects (not functions, keywords or labels)."""
    text = _GRAFANA_VAR.sub("1m", expr)
    text = _STRING.sub('""', text)
    text = _LABEL_LIST.sub(" ", text)
    text = _BRACES.sub(" ", text)
    text = _RANGE.sub(" ", text)
    names = set()
    for m in _IDENT.finditer(text):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names


def exposed_names() -> dict[str, str]:
    """Every series name the catalogue exposes -> the catalogue source that writes it."""
    out: dict[str, str] = {}
    for spec in CATALOG.values():
        if spec.kind == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                out[spec.name + suffix] = spec.source
        elif spec.kind == "info":
            out[spec.name + "_info"] = spec.source
        else:
            out[spec.exposed_name] = spec.source
    return out


EXTRA_NAMES = {"up": "prometheus"}


def source_of(name: str) -> str:
    return {**exposed_names(), **EXTRA_NAMES}.get(name, "unknown")


def unknown_names(expr: str, allowed: set[str] | None = None) -> set[str]:
    """Names in expr that are neither catalogue series, `up`, nor in `allowed`."""
    ok = set(exposed_names()) | set(EXTRA_NAMES) | set(allowed or ())
    return metric_names(expr) - ok
