from types import MappingProxyType

from txnwatch.apps import AppResolver, fold_ids
from txnwatch.exporter.model import ClusterSnapshot, HangingTransaction, PartitionState
from txnwatch.exporter.poll import derive
from txnwatch.exporter.poll.render import render_snapshot
from txnwatch.exporter.serve.collector import ExporterCollector
from txnwatch.kafka.answers import ClusterFacts, TxnDescription
from txnwatch_dev.observability.scrape import Metrics, parse_metrics, sample_lines_per_family


def scrape(parts) -> Metrics:
    return Metrics(parse_metrics(ExporterCollector(parts).exposition(openmetrics=False).decode()))


def snapshot(n_txns=3):
    parts = {("t", 0): PartitionState("t", 0, 10, 4, 0.0, 50.0), ("t", 1): PartitionState("t", 1, 7, 7)}
    descs = [TxnDescription(f"app-x-{i}", "Ongoing", i, 0, 60_000, 1000 * i, frozenset()) for i in range(n_txns)]
    txns = derive.open_transactions(descs, AppResolver(), now_ms=100_000)
    return ClusterSnapshot("c1", 1.0, 0.1, MappingProxyType(parts), (), ClusterFacts(brokers=3),
                           tuple(txns), (HangingTransaction("t", 0, 1, 0, 4, 50.0, None, "lso_stalled"),))


def test_render_partitions_and_transactions():
    m = scrape([("s", lambda w: render_snapshot(w, snapshot(), "partition", 500))])
    assert m.get_value("kafka_partition_lso_lag_offsets", kafka_cluster="c1", topic="t", partition=0) == 6
    assert m.get_value("kafka_partition_lso_stalled_seconds", partition=0) == 50
    assert m.get_value("kafka_transaction_hanging", partition=0) == 1
    assert m.get_value("kafka_transaction_hanging", partition=1) == 0
    assert m.get_value("kafka_transaction_open", app="app-x") == 3
    assert m.get_value("kafka_transaction_oldest_open_age_seconds", app="app-x") == 100
    assert m.get_value("kafka_transaction_timeout_headroom_seconds", transactional_id="app-x-0") == -40
    assert m.get_value("kafka_cluster_brokers") == 3


def test_id_cap_folds_into_other_and_topic_granularity():
    snap = snapshot(n_txns=5)
    folded = []
    m = scrape([("s", lambda w: folded.append(render_snapshot(w, snap, "topic", 2)))])
    ids = sorted(lbl["transactional_id"] for lbl, _ in m.select("kafka_transaction_timeout_headroom_seconds"))
    assert ids == ["__other__", "app-x-0", "app-x-1"]
    assert folded[0]["kafka_transaction_timeout_headroom_seconds"] == 3
    assert m.get_value("kafka_transaction_timeout_headroom_seconds", transactional_id="__other__") == -38
    assert m.get_value("kafka_partition_lso_lag_offsets", topic="t", partition="all") == 6
    assert m.get_value("kafka_partition_high_watermark", topic="t", partition="all") == 17


def test_a_broken_part_or_value_never_fails_the_scrape():
    def broken(w):
        raise RuntimeError("boom")

    def bad_value(w):
        w.add("kafka_cluster_brokers", {"cluster": "c"}, float("nan"))
        w.add("kafka_cluster_brokers", {"cluster": "d"}, "many")
        w.add("kafka_cluster_brokers", {}, 1)  # missing label
        w.add("kafka_cluster_brokers", {"cluster": "ok"}, 2)

    m = scrape([("broken", broken), ("bad", bad_value)])
    assert m.get_value("kafka_cluster_brokers", kafka_cluster="ok") == 2
    assert m.get_value("txnwatch_series_dropped_total", metric="broken", reason="render_error") == 1
    assert m.get_value("txnwatch_series_dropped_total", metric="kafka_cluster_brokers", reason="invalid_value") == 3
    assert m.get_value("txnwatch_build_info") == 1


def test_fold_ids_keeps_lowest_values():
    kept, n = fold_ids([("a", "1", 5.0), ("a", "2", 1.0), ("b", "3", 3.0), ("b", "4", 4.0)], cap=1)
    assert n == 3 and kept == [("a", "2", 1.0), ("b", "__other__", 3.0), ("a", "__other__", 5.0)]


def test_published_snapshot_parts_are_served_until_the_next_publish():
    c = ExporterCollector([("live", lambda w: w.add("txnwatch_up", {"cluster": "c1", "source": "poller"}, 1))])
    snap = snapshot()
    c.publish("poller:c1", lambda w: render_snapshot(w, snap, "partition", 500))
    first = c.exposition(openmetrics=True)
    m = Metrics(parse_metrics(c.exposition(openmetrics=False).decode()))
    assert m.get_value("kafka_partition_lso_lag_offsets", partition=0) == 6 and m.get_value("txnwatch_up") == 1
    assert first.endswith(b"# EOF\n") and first.count(b"# TYPE kafka_cluster_brokers gauge") == 1
    c.publish("poller:c2", lambda w: w.add("kafka_cluster_brokers", {"cluster": "c2"}, 5))
    m = Metrics(parse_metrics(c.exposition(openmetrics=False).decode()))
    assert m.get_value("kafka_cluster_brokers", kafka_cluster="c1") == 3 and m.get_value("kafka_cluster_brokers", kafka_cluster="c2") == 5
    import gzip
    assert gzip.decompress(c.exposition(openmetrics=False, gzip=True)).split(b"# HELP process_")[0] == \
        c.exposition(openmetrics=False).split(b"# HELP process_")[0]


def test_txnwatch_series_counts_every_family_of_the_document_as_scraped():
    """txnwatch_series{family}: each family's sample lines in the exposition, from the big
    published parts (counted once per publish), the live parts and the exporter's own, itself
    included; the count parsed back from the scrape agrees family by family."""
    def live(w):
        w.add("txnwatch_up", {"cluster": "c1", "source": "poller"}, 1)
        w.add("kafka_cluster_brokers", {"cluster": "c3"}, 1)     # a family both published and live

    c = ExporterCollector([("live", live)])
    snap = snapshot()
    c.publish("poller:c1", lambda w: render_snapshot(w, snap, "partition", 500))
    text = c.exposition(openmetrics=False).decode()
    parsed = sample_lines_per_family(text)
    reported = {lbl["family"]: v for lbl, v in Metrics(parse_metrics(text)).select("txnwatch_series")}
    assert reported == parsed
    assert reported["kafka_cluster_brokers"] == 2 and reported["kafka_partition_lso_lag_offsets"] == 2
    assert reported["txnwatch_series"] == len(reported)
    c.publish("poller:c1", lambda w: w.add("kafka_cluster_brokers", {"cluster": "c1"}, 3))   # a poll drops series
    after = {lbl["family"]: v for lbl, v in
             Metrics(parse_metrics(c.exposition(openmetrics=False).decode())).select("txnwatch_series")}
    assert "kafka_partition_lso_lag_offsets" not in after and after["kafka_cluster_brokers"] == 2
