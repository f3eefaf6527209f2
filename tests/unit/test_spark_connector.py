"""Where Spark's Kafka connector comes from (no Spark started)."""

from __future__ import annotations

from txnwatch import spark_connector as sc


def jar_dir(tmp_path, names):
    for n in names:
        (tmp_path / n).write_bytes(b"")
    return tmp_path


CONNECTOR = ["spark-sql-kafka-0-10_2.13-4.0.0.jar", "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
             "commons-pool2-2.12.0.jar"]


def test_a_jar_directory_wins_with_its_own_kafka_clients(tmp_path, monkeypatch):
    d = jar_dir(tmp_path, [*CONNECTOR, "kafka-clients-3.9.0.jar", "spark-sql-kafka-0-10_2.13-4.0.0-sources.jar"])
    monkeypatch.setenv(sc.ENV_DIR, str(d))
    conf = sc.connector_conf("4.0.5")
    assert list(conf) == ["spark.jars"]
    assert conf["spark.jars"].split(",") == [str(d / n) for n in [*CONNECTOR, "kafka-clients-3.9.0.jar"]]


def test_kafka_clients_from_the_kafka_distribution(tmp_path, monkeypatch):
    (tmp_path / "jars").mkdir()
    d = jar_dir(tmp_path / "jars", CONNECTOR)
    libs = tmp_path / "kafka" / "libs"
    libs.mkdir(parents=True)
    (libs / "kafka-clients-3.1.0.jar").write_bytes(b"")
    import txnwatch.devtools.broker as broker

    monkeypatch.setattr(broker, "find_kafka", lambda: broker.KafkaInstall(tmp_path / "kafka", "3.1.0", "java", "test"))
    monkeypatch.setenv(sc.ENV_DIR, str(d))
    assert sc.find_jars()[-1] == libs / "kafka-clients-3.1.0.jar"


def test_incomplete_directory_falls_back_to_maven_coordinates(tmp_path, monkeypatch):
    d = jar_dir(tmp_path, CONNECTOR[:2])      # commons-pool2 missing
    monkeypatch.setenv(sc.ENV_DIR, str(d))
    monkeypatch.setattr(sc, "_candidates", lambda: [d])
    assert sc.connector_conf("3.5.3") == {"spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:3.5.3"}
    assert sc.package_coordinates("4.0.5+local", "2.12") == "org.apache.spark:spark-sql-kafka-0-10_2.12:4.0.5"
