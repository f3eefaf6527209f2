"""Where Spark's Kafka connector comes from (no Spark started, no Maven run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from txnwatch import spark_connector as sc


def jar_dir(tmp_path, names):
    for n in names:
        (tmp_path / n).write_bytes(b"")
    return tmp_path


CONNECTOR = ["spark-sql-kafka-0-10_2.13-4.0.0.jar", "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
             "commons-pool2-2.12.0.jar", "kafka-clients-3.9.0.jar"]


def test_a_jar_directory_wins(tmp_path, monkeypatch):
    d = jar_dir(tmp_path, [*CONNECTOR, "spark-sql-kafka-0-10_2.13-4.0.0-sources.jar"])
    monkeypatch.setenv(sc.ENV_DIR, str(d))
    conf, source = sc.connector_source("4.0.5")
    assert list(conf) == ["spark.jars"]
    assert conf["spark.jars"].split(",") == [str(d / n) for n in CONNECTOR]
    assert sc.ENV_DIR in source


def test_an_incomplete_jar_directory_is_an_error_that_names_what_is_missing(tmp_path, monkeypatch):
    d = jar_dir(tmp_path, CONNECTOR[:2])      # commons-pool2 and kafka-clients missing
    monkeypatch.setenv(sc.ENV_DIR, str(d))
    with pytest.raises(sc.ConnectorNotFound, match="commons-pool2"):
        sc.connector_conf("4.0.5")


def test_without_maven_spark_resolves_the_coordinates(monkeypatch):
    monkeypatch.delenv(sc.ENV_DIR, raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setattr(sc, "scala_suffix", lambda jars_dir=None: "2.13")
    conf, source = sc.connector_source("4.0.5")
    assert conf == {"spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.5"}
    assert "spark.jars.packages" in source
    assert sc.package_coordinates("4.0.5+local", "2.12") == "org.apache.spark:spark-sql-kafka-0-10_2.12:4.0.5"


def test_scala_suffix_and_artifact_names(tmp_path):
    d = jar_dir(tmp_path, ["scala-library-2.13.16.jar", "spark-core_2.13-4.0.5.jar"])
    assert sc.scala_suffix(d) == "2.13"
    assert sc.artifact_name(Path("kafka-clients-3.9.0.jar")) == "kafka-clients"
    assert sc.artifact_name(Path("spark-sql-kafka-0-10_2.13-4.0.4.jar")) == "spark-sql-kafka-0-10_2.13"
    assert sc.artifact_name(Path("commons-pool2-2.12.0.jar")) == "commons-pool2"
