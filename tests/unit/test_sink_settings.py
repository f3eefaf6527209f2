"""Settings the exactly-once sink rejects up front, and its naming contract."""

from __future__ import annotations

import pytest

from txnwatch.apps import AppResolver
from txnwatch.spark_listener.sink import (
    AtLeastOnceKafkaSink,
    ExactlyOnceKafkaSink,
    UnsafeSinkSettings,
    check_settings,
    default_progress_topic,
    progress_group,
    transactional_id,
)


def test_timeout_floor_without_a_trigger():
    assert check_settings(10_000) == []
    with pytest.raises(UnsafeSinkSettings, match="10000 ms floor.*>= 10000"):
        check_settings(9_999)


def test_timeout_must_cover_twice_the_trigger():
    assert check_settings(60_000, trigger_interval_seconds=30) == []
    with pytest.raises(UnsafeSinkSettings, match=r"2 x the trigger interval \(30000 ms\).*>= 60000"):
        check_settings(59_999, trigger_interval_seconds=30)
    with pytest.raises(UnsafeSinkSettings, match="guarantees coordinator aborts"):
        check_settings(15_000, trigger_interval_seconds=10)


def test_broker_cap():
    assert check_settings(900_000, broker_max_timeout_ms=900_000) == []
    with pytest.raises(UnsafeSinkSettings, match="exceeds the broker's transaction.max.timeout.ms=900000"):
        check_settings(900_001, broker_max_timeout_ms=900_000)
    # A trigger so long that no timeout fits under the cap: say so.
    with pytest.raises(UnsafeSinkSettings, match="trigger interval is too long"):
        check_settings(1_300_000, trigger_interval_seconds=600, broker_max_timeout_ms=900_000)


def test_unknown_cap_warns_past_the_default():
    warnings = check_settings(1_000_000, broker_max_timeout_ms=None)
    assert len(warnings) == 1 and "900000" in warnings[0]


@pytest.mark.parametrize("conf,match", [
    ({"transactional.id": "mine"}, "owns transactional ids"),
    ({"transaction.timeout.ms": 5000}, "transaction_timeout_ms"),
    ({"enable.idempotence": False}, "idempotent"),
    ({"acks": "1"}, "acks=all"),
])
def test_producer_settings_rejected(conf, match):
    with pytest.raises(UnsafeSinkSettings, match=match):
        check_settings(60_000, producer_config=conf)


def test_num_tasks_and_name_checked_without_io():
    with pytest.raises(UnsafeSinkSettings, match="num_tasks"):
        check_settings(60_000, num_tasks=0)
    for bad in ("", "has space", ".lead", "trail.", "a..b"):
        with pytest.raises(UnsafeSinkSettings, match="sink name"):
            ExactlyOnceKafkaSink(bad, "x:1", "out", broker_max_timeout_ms=None, create_progress_topic=False)
    with pytest.raises(UnsafeSinkSettings, match="num_tasks"):
        AtLeastOnceKafkaSink("ok", "x:1", "out", num_tasks=0)


def test_sink_constructor_checks_settings_before_any_io():
    with pytest.raises(UnsafeSinkSettings, match="2 x the trigger"):
        ExactlyOnceKafkaSink("orders", "unreachable:1", "out", transaction_timeout_ms=20_000,
                             trigger_interval_seconds=15, broker_max_timeout_ms=None,
                             create_progress_topic=False)
    sink = ExactlyOnceKafkaSink("orders", "unreachable:1", "out", num_tasks=3, broker_max_timeout_ms=None,
                                create_progress_topic=False, producer_config={"linger.ms": 50})
    conf = sink.config.producer_conf(2)
    assert conf["transactional.id"] == "txnwatch.orders.2"
    assert conf["linger.ms"] == 50 and conf["acks"] == "all" and conf["enable.idempotence"] is True
    assert sink.progress_topic == "txnwatch-progress.orders"
    assert sink.config.consumer_conf()["group.id"] == "txnwatch.orders"


def test_ids_follow_the_app_rule():
    resolve = AppResolver()
    for name in ("orders", "orders-agg", "eu.orders_v2"):
        for task in (0, 7, 123):
            assert resolve(transactional_id(name, task)) == name
    assert progress_group("orders") == "txnwatch.orders"
    assert default_progress_topic("orders") == "txnwatch-progress.orders"


def test_an_unknown_partitioning_is_refused_before_any_broker_call():
    from txnwatch.spark_listener.sink import ExactlyOnceKafkaSink, UnsafeSinkSettings

    with pytest.raises(UnsafeSinkSettings, match="partitioning must be one of key, input"):
        ExactlyOnceKafkaSink("s", "127.0.0.1:1", "out", partitioning="round-robin")


def test_input_partitions_reads_the_jvm_count_and_says_none_without_one():
    from txnwatch.spark_listener.sink import input_partitions

    class JRdd:
        def getNumPartitions(self):
            return 3

    class JDf:
        def rdd(self):
            return JRdd()

    class Df:
        _jdf = JDf()

    class Broken:
        class _jdf:  # noqa: N801 - shaped like py4j's handle
            @staticmethod
            def rdd():
                raise RuntimeError("py4j gone")

    assert input_partitions(Df()) == 3
    assert input_partitions(object()) is None       # Spark Connect: no JVM handle
    assert input_partitions(Broken()) is None
