"""The Prometheus the tests, the demo and the benchmarks run is Prometheus 3, with its web UI:
the pages the demo prints render in a real browser (headless Chromium) with txnwatch's rules."""

from __future__ import annotations

import pytest

from txnwatch.alerts import generate_alerts
from txnwatch.alerts.config import AlertConfig
from txnwatch_dev.gotools import PROMETHEUS_RELEASE
from txnwatch_dev.net import wait_for
from txnwatch_dev.observability.prometheus import PrometheusProcess
from txnwatch_dev.observability.screenshot import dump_dom

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    rules = generate_alerts(tmp_path_factory.mktemp("rules"), AlertConfig())[0]
    prom = PrometheusProcess([], [rules]).start()
    try:
        yield prom
    finally:
        prom.stop()


def test_it_is_prometheus_3(prometheus):
    info = prometheus.api("status/buildinfo")
    assert info["version"] == PROMETHEUS_RELEASE, info


def test_the_alerts_page_renders_the_rules(prometheus):
    wait_for(lambda: prometheus.api("rules")["groups"], 30, what="the rules loaded")
    dom = dump_dom(prometheus.page_url("alerts"), virtual_time_ms=10_000)
    # the UI's own markup, and what it fetched: the rule groups and alert names
    assert "KafkaTransactionHanging" in dom and "KafkaTransactionFencingPersistent" in dom, dom[-3000:]


def test_the_query_page_takes_the_expression_from_its_url(prometheus):
    url = prometheus.page_url("query", **{"g0.expr": "kafka_partition_lso_lag_offsets > 0"})
    assert url.startswith(prometheus.url + "/query?g0.expr=")
    dom = dump_dom(url, virtual_time_ms=10_000)
    assert "kafka_partition_lso_lag_offsets" in dom, dom[-3000:]
