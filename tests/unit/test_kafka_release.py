"""Which Apache Kafka release the harness runs, and what it says when it cannot (no I/O:
Maven and Java are looked up, never run)."""

from __future__ import annotations

import pytest

import txnwatch_dev.kafka.release as rel


def test_kafka_version_is_a_release_or_a_line():
    assert rel.parse_spec("4.4.0") == ("exact", "4.4.0", "4.4.0")
    assert rel.parse_spec("4") == rel.parse_spec("4.x") == ("line", "4.0.0", "4.9999.9999")
    assert rel.parse_spec("3.9.x") == rel.parse_spec("3.9") == ("line", "3.9.0", "3.9.9999")
    with pytest.raises(rel.BrokerUnavailable, match="KAFKA_VERSION='latest'"):
        rel.parse_spec("latest")


def test_without_java_the_run_fails_naming_what_to_install(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(rel.shutil, "which", lambda name: None)
    with pytest.raises(rel.BrokerUnavailable, match="apt-get install openjdk-17-jdk-headless"):
        rel.kafka_release("4.4.0")


def test_without_maven_the_run_fails_naming_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(rel, "CACHE", tmp_path)          # nothing resolved yet
    monkeypatch.setattr(rel.maven.shutil, "which", lambda name: None)
    with pytest.raises(rel.BrokerUnavailable, match=r"Maven \(mvn\) not found.*apt-get install maven"):
        rel.resolve_classpath("4.4.0", "server")


def test_the_binding_follows_the_line():
    assert rel._profiles("4.4.0", "server") == "server,log4j2"
    assert rel._profiles("3.9.2", "streams") == "streams,reload4j"
    assert rel.KafkaRelease("4.4.0", "java").log4j2 and not rel.KafkaRelease("3.9.2", "java").log4j2


def test_log_configs_of_both_bindings(tmp_path):
    args = rel.KafkaRelease("4.4.0", "java").log_config(tmp_path / "a.properties", to_file=tmp_path / "server.log",
                                                          request_log=tmp_path / "req.log")
    text = (tmp_path / "a.properties").read_text()
    assert args == [f"-Dlog4j2.configurationFile={tmp_path / 'a.properties'}"]
    assert f"fileName = {tmp_path / 'server.log'}" in text and "logger.req.level = DEBUG" in text
    args = rel.KafkaRelease("3.9.2", "java").log_config(tmp_path / "b.properties")
    assert args == [f"-Dlog4j.configuration=file:{tmp_path / 'b.properties'}"]
    assert "log4j.rootLogger=WARN, main" in (tmp_path / "b.properties").read_text()
