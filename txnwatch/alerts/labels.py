"""The Kafka cluster's label under its configured name, in generated PromQL and templates.

Rules and panels are written with the catalogue's label name, `cluster`; an exporter
configured with another `cluster_label` (default kafka_cluster: see txnwatch.metrics)
exposes it under that name, and `rename_in_promql` and `rename_in_template` rewrite what was generated to
match. The user's own selectors are never rewritten (`mask_selectors`): a
`cluster=~"prod-.*"` there may well mean the target label of the same name."""

from __future__ import annotations

import re
from collections.abc import Callable

CATALOGUE_LABEL = "cluster"

# A PromQL token: a string literal (skipped), or an identifier (metric, label, function,
# recording-rule name with colons), or any other character.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`|[A-Za-z_:][A-Za-z0-9_:]*|.', re.S)


def rename_in_promql(expr: str, new: str, old: str = CATALOGUE_LABEL) -> str:
    """`expr` with the label `old` renamed to `new` wherever it is a label name: in
    `by`/`on`/`without`/`ignoring` lists, matchers and label_values(); never inside string
    literals, never a Grafana variable (`$cluster`) or part of a longer name."""
    if new == old:
        return expr
    out: list[str] = []
    for m in _TOKEN.finditer(expr):
        tok = m.group(0)
        if tok == old and not (out and out[-1] in ("$", ".")) and not _followed_by_call(expr, m.end()):
            tok = new
        out.append(tok)
    return "".join(out)


def _followed_by_call(expr: str, end: int) -> bool:
    rest = expr[end:].lstrip()
    return rest.startswith("(")


_TEMPLATE_REF = re.compile(r"(\$labels\.|\{\{\s*)" + CATALOGUE_LABEL + r"\b(?!\s*\()")


def rename_in_template(text: str, new: str) -> str:
    """Alert annotations (`$labels.cluster`) and Grafana legends (`{{cluster}}`)."""
    if new == CATALOGUE_LABEL:
        return text
    return _TEMPLATE_REF.sub(lambda m: m.group(1) + new, text)


def mask_selectors(cfg, fields: tuple[str, ...]) -> tuple[object, Callable[[str], str]]:
    """(a config whose selector `fields` are placeholders, restore(text)): generate with the
    first, rename labels, then put the user's selectors back with the second."""
    originals = {f: getattr(cfg, f) for f in fields if getattr(cfg, f)}
    marks = {f: f'__txnwatch_{f}__=""' for f in originals}
    masked = cfg.replace(**marks) if marks else cfg

    def restore(text: str) -> str:
        for f, mark in marks.items():
            text = text.replace(mark, originals[f])
        return text
    return masked, restore
