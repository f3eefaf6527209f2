"""The harness's JVM profiles (txnwatch_dev/jvm.py)."""

import pytest

from txnwatch_dev import jvm


def test_server_is_the_default_and_light_is_c1_with_the_serial_collector(monkeypatch):
    monkeypatch.delenv(jvm.ENV, raising=False)
    assert "-XX:+UseG1GC" in jvm.broker_flags() and "-XX:TieredStopAtLevel=1" not in jvm.broker_flags()
    assert jvm.spark_submit_args(None) == "pyspark-shell"
    monkeypatch.setenv(jvm.ENV, "light")
    assert {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"} <= set(jvm.broker_flags())
    assert "-XX:+UseG1GC" not in jvm.broker_flags() and "-XX:+UseG1GC" not in jvm.flink_jvm_args()
    assert jvm.spark_submit_args(None) == '--driver-java-options "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC" pyspark-shell'
    # what a user set stays: their driver options, or their other arguments after ours
    assert jvm.spark_submit_args('--driver-java-options "-Xmx2g" pyspark-shell') == \
        '--driver-java-options "-Xmx2g" pyspark-shell'
    assert jvm.spark_submit_args("--packages x:y:1 pyspark-shell").endswith(" --packages x:y:1 pyspark-shell")


def test_an_unknown_profile_is_named(monkeypatch):
    monkeypatch.setenv(jvm.ENV, "fast")
    with pytest.raises(ValueError, match="TXNWATCH_JVM_PROFILE='fast': use one of server, light"):
        jvm.broker_flags()
