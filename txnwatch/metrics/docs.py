"""Generate docs/metrics.md from the metric catalogue (a test fails when they drift)."""

from __future__ import annotations

import sys
from pathlib import Path

from . import CATALOG, DEFAULT_CLUSTER_LABEL

SECTIONS = [
    ("exporter", "Kafka side: admin poller"),
    ("tap", "Kafka side: transaction-log tap (`transaction_log_tap: true`)"),
    ("canary", "Transactional canary (`canary:` per cluster, opt-in)"),
    ("client", "Client side: instrumented transactional producer and Spark sink"),
    ("spark", "Spark side: StreamingQueryListener"),
    ("self", "txnwatch itself"),
]


def render() -> str:
    out = ["# Metrics reference", "",
           "Generated from `txnwatch/metrics/__init__.py` by `python -m txnwatch.metrics.docs`; "
           "`tests/unit/test_docs.py` fails when this file and the code drift.", "",
           "Counters are exposed with the `_total` suffix; histograms as `_bucket`, `_sum`, `_count`.", "",
           "Besides these, client_python's `process_*` series (CPU seconds, resident and virtual memory, "
           "open and maximum file descriptors, start time): the serving process's without labels, and "
           f"each worker process's (which holds a cluster's poller, tap and canary) with its `{DEFAULT_CLUSTER_LABEL}` "
           "label.", "",
           f"`{DEFAULT_CLUSTER_LABEL}` carries the configured cluster name. Its name is the exporter's "
           "`cluster_label` setting (not `cluster`, the label multi-cluster Prometheus stacks attach to every "
           "target); `txnwatch alerts` and `txnwatch dashboards` take the same setting. Renames since 0.1.0: "
           "CHANGELOG.md.", ""]
    for source, title in SECTIONS:
        specs = sorted((s for s in CATALOG.values() if s.source == source), key=lambda s: s.name)
        if not specs:
            continue
        out += [f"## {title}", "", "| metric | type | labels | description |", "|---|---|---|---|"]
        for s in specs:
            name = s.exposed_name if s.kind != "info" else s.name + "_info"
            extra = f" Buckets: {', '.join(f'{b:g}' for b in s.buckets)}." if s.buckets else ""
            labels = [DEFAULT_CLUSTER_LABEL if label == "cluster" else label for label in s.labels]
            out.append(f"| `{name}` | {s.kind} | {', '.join(f'`{label}`' for label in labels) or '-'} | "
                       f"{s.help.replace('|', '/')}{extra} |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
    target.write_text(render())
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
