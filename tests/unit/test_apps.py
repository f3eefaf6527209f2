import re

from txnwatch.apps import AppResolver, AppRule


def test_builtin_rules():
    r = AppResolver()
    assert r("txnwatch.orders-enrich.3") == "orders-enrich"
    assert r("wordcount-5f1c9a1e-0b7d-4c55-9a51-2b8e6f2d7c10-2") == "wordcount"
    assert r("flink-sink-3-1200") == "flink-sink"
    assert r("payments-producer-7") == "payments-producer"
    assert r("solo") == "solo"
    assert r("txnwatch-canary-prod-eu-exporter-7d9f-2") == "txnwatch-canary"
    assert r(None) == "unknown"


def test_user_rules_first_with_templates():
    r = AppResolver([AppRule(re.compile(r"^team-(\w+)-"), r"team:\1")])
    assert r("team-billing-xyz") == "team:billing"
    assert r("flink-sink-3-1200") == "flink-sink"
