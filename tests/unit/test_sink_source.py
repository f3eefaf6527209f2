"""The confluent-kafka streaming source's offset planning (no broker: offsets are faked)."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from txnwatch.spark_listener.kafka_source import KafkaRange, KafkaStreamReader, fair_share


def test_fair_share_water_filling():
    assert fair_share({"a": 100, "b": 100}, 50) == {"a": 25, "b": 25}
    assert fair_share({"a": 10, "b": 100}, 50) == {"a": 10, "b": 40}
    assert fair_share({"a": 0, "b": 7}, 50) == {"a": 0, "b": 7}
    assert sum(fair_share({"a": 5, "b": 5, "c": 5}, 7).values()) == 7
    assert fair_share({"a": 3}, 0) == {"a": 0}


def reader(lso, **opts):
    r = KafkaStreamReader({"kafka.bootstrap.servers": "x:1", "subscribe": "in", **opts})
    r._offsets = lambda spec: lso          # stands in for ListOffsets(read_committed)
    return r


def test_options_are_case_insensitive_and_checked():
    r = KafkaStreamReader({"kafka.bootstrap.servers": "x:1", "subscribe": "a, b",
                           "maxrecordsperbatch": "10", "startingoffsets": "latest"})
    assert r.topics == ["a", "b"] and r.max_records == 10 and r.starting == "latest"
    assert r.getDefaultReadLimit() == ReadMaxRows(10)
    assert KafkaStreamReader({"kafka.bootstrap.servers": "x:1", "subscribe": "a"}).getDefaultReadLimit() \
        == ReadAllAvailable()
    with pytest.raises(ValueError, match="bootstrap"):
        KafkaStreamReader({"subscribe": "a"})
    with pytest.raises(ValueError, match="subscribe"):
        KafkaStreamReader({"kafka.bootstrap.servers": "x:1"})


def test_latest_offset_respects_the_limit_and_the_lso():
    r = reader({"in": {"0": 1000, "1": 10}})
    end = r.latestOffset({"in": {"0": 0, "1": 0}}, ReadMaxRows(100))
    assert end == {"in": {"0": 90, "1": 10}}
    assert r.latestOffset({"in": {"0": 0, "1": 0}}, ReadAllAvailable()) == {"in": {"0": 1000, "1": 10}}
    assert r.reportLatestOffset() == {"in": {"0": 1000, "1": 10}}


def test_an_lso_below_the_start_never_moves_offsets_back():
    # An LSO below the planned start (a leader that lost records; a broker reporting 0
    # while a transaction is open) never moves an offset back.
    r = reader({"in": {"0": 0, "1": 50}})
    assert r.latestOffset({"in": {"0": 400, "1": 20}}, ReadAllAvailable()) == {"in": {"0": 400, "1": 50}}


def test_new_partitions_start_at_zero_and_ranges_are_planned():
    r = reader({"in": {"0": 5, "1": 3}})
    end = r.latestOffset({"in": {"0": 5}}, ReadAllAvailable())
    assert end == {"in": {"0": 5, "1": 3}}
    parts = r.partitions({"in": {"0": 5}}, end)
    assert [(p.topic, p.partition, p.start, p.end) for p in parts] == [("in", 1, 0, 3)]
    assert all(isinstance(p, KafkaRange) for p in parts)


def test_available_now_target_is_fixed_at_start():
    r = reader({"in": {"0": 10}})
    r.prepareForTriggerAvailableNow()
    r._offsets = lambda spec: {"in": {"0": 99}}
    assert r.latestOffset({"in": {"0": 0}}, ReadAllAvailable()) == {"in": {"0": 10}}
