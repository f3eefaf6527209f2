from pathlib import Path

from txnwatch.metrics.docs import render

ROOT = Path(__file__).resolve().parents[2]


def test_metrics_doc_matches_the_catalogue():
    committed = (ROOT / "docs" / "metrics.md").read_text()
    assert committed == render(), "docs/metrics.md is stale: run `.venv/bin/python -m txnwatch.metrics.docs`"


def test_every_metric_name_follows_conventions():
    from txnwatch.metrics import CATALOG

    for s in CATALOG.values():
        assert s.name.startswith(("kafka_", "spark_", "txnwatch_")), s.name
        assert not s.name.endswith("_total"), f"{s.name}: counters are declared without _total"
        if s.kind == "histogram":
            assert s.buckets and list(s.buckets) == sorted(s.buckets), s.name
            assert s.name.endswith("_seconds"), s.name
        assert "cluster" in s.labels or s.source in ("client", "spark", "self"), s.name
