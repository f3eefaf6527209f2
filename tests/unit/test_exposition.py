import gzip
import zlib

from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text

from txnwatch.exporter.serve.collector import ExporterCollector, Part
from txnwatch.metrics.exposition import accepts_gzip, wants_openmetrics


def cluster_part(name, value_box):
    def render(w):
        w.add("kafka_cluster_brokers", {"cluster": name}, value_box[0])
        w.add("kafka_partition_lso_lag_offsets", {"cluster": name, "topic": 't"q', "partition": 0}, 3)
        w.add("kafka_transactions", {"cluster": name, "app": "a", "outcome": "committed"}, 5)
    return render


def make():
    a_val, b_val = [1], [2]
    a_key, b_key = [object()], [object()]
    parts = [Part("a", cluster_part("a", a_val), key=lambda: a_key[0]),
             Part("b", cluster_part("b", b_val), key=lambda: b_key[0]),
             Part("live", lambda w: w.add("txnwatch_up", {"cluster": "a", "source": "poller"}, 1))]
    c = ExporterCollector(parts)
    c.response_ttl = 0  # these tests look at every change at once
    return c, a_val, a_key


def test_both_formats_parse_and_merge_families_across_sources():
    c, _, _ = make()
    text = c.exposition(openmetrics=False).decode()
    om = c.exposition(openmetrics=True).decode()
    assert text.count("# TYPE kafka_cluster_brokers gauge") == 1 and om.count("# TYPE kafka_cluster_brokers gauge") == 1
    assert "# TYPE kafka_transactions_total counter" in text and "# TYPE kafka_transactions counter" in om
    assert om.endswith("# EOF\n")
    fams = {f.name: f for f in parse_text(text)}
    assert {s.labels["kafka_cluster"] for s in fams["kafka_cluster_brokers"].samples} == {"a", "b"}
    assert fams["kafka_partition_lso_lag_offsets"].samples[0].labels["topic"] == 't"q'
    om_fams = {f.name: f for f in parse_om(om)}
    assert om_fams["kafka_transactions"].type == "counter"
    assert om_fams["txnwatch_build"].type == "info"


def test_gzip_is_one_member_equal_to_plain():
    c, _, _ = make()
    for om in (False, True):
        plain = c.exposition(om)
        packed = c.exposition(om, gzip=True)
        d = zlib.decompressobj(31)
        unpacked = d.decompress(packed)
        assert d.eof and d.unused_data == b""  # one gzip member: curl --compressed reads it all
        # process_* values move between the two scrapes; everything before them is identical
        assert unpacked.split(b"# HELP process_")[0] == plain.split(b"# HELP process_")[0]
        assert gzip.decompress(packed) == unpacked


def test_cached_section_follows_snapshot_changes():
    c, a_val, a_key = make()
    assert b'kafka_cluster_brokers{kafka_cluster="a"} 1.0' in c.exposition(False)
    a_val[0] = 7
    assert b'kafka_cluster_brokers{kafka_cluster="a"} 1.0' in c.exposition(False)  # same snapshot: cached
    a_key[0] = object()                                               # new snapshot
    assert b'kafka_cluster_brokers{kafka_cluster="a"} 7.0' in c.exposition(False)
    assert b'kafka_cluster_brokers{kafka_cluster="a"} 7.0' in gzip.decompress(c.exposition(False, gzip=True))


def test_negotiation():
    assert wants_openmetrics("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
    assert not wants_openmetrics("text/plain")
    assert accepts_gzip("gzip") and accepts_gzip("deflate, gzip;q=0.8") and not accepts_gzip("identity")
    assert not accepts_gzip("gzip;q=0")


def test_scrapes_close_together_share_one_response_until_a_publish():
    c, a_val, a_key = make()
    c.response_ttl = 60
    first = c.exposition(False)
    a_val[0], a_key[0] = 9, object()   # a live part changed: served after the ttl
    assert c.exposition(False) is first
    c.publish("poller:x", lambda w: w.add("kafka_cluster_brokers", {"cluster": "x"}, 4))  # new data: at once
    again = c.exposition(False)
    assert again is not first and b'kafka_cluster_brokers{kafka_cluster="x"} 4.0' in again
    assert b'kafka_cluster_brokers{kafka_cluster="a"} 9.0' in again


def test_a_shared_response_is_not_served_once_a_source_went_up_or_down():
    """The sources' up flags are live facts: a response rendered before one of them
    changed is not shared any more, so /metrics never shows an older txnwatch_up."""
    up = [0]
    c = ExporterCollector([Part("live", lambda w: w.add("txnwatch_up", {"cluster": "a", "source": "tap"}, up[0]))],
                          live_key=lambda: up[0])
    c.response_ttl = 60
    first = c.exposition(False)
    assert b'txnwatch_up{kafka_cluster="a",source="tap"} 0.0' in first and c.exposition(False) is first
    up[0] = 1
    assert b'txnwatch_up{kafka_cluster="a",source="tap"} 1.0' in c.exposition(False)


def test_ready_once_every_source_finished_its_first_attempt_up_or_down():
    """/readyz: the orchestrator's question is whether txnwatch serves what it knows, not
    whether Kafka is healthy (txnwatch_up says that): a first failed poll is ready."""
    from txnwatch.exporter.health import HealthTracker, first_attempts_done

    poller, tap = HealthTracker("poller"), HealthTracker("tap")
    assert not first_attempts_done([poller.view(), tap.view()])
    poller.failure("transport", "all brokers down")
    assert not first_attempts_done([poller.view(), tap.view()])     # the tap has not tried yet
    tap.success(0.1)
    assert first_attempts_done([poller.view(), tap.view()])
    assert not poller.view().up


def test_each_running_worker_has_its_process_series_by_cluster():
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pids = {"prod": proc.pid}
        c = ExporterCollector([], worker_pids=lambda: dict(pids))
        body = c.exposition(False).decode()
        assert 'process_resident_memory_bytes{kafka_cluster="prod"}' in body
        assert "\nprocess_resident_memory_bytes " in body               # the serving process's own
        assert body.count("# TYPE process_resident_memory_bytes gauge") == 1
        pids["gone"] = 2 ** 22 + 1                                      # above pid_max: no such process
        c.response_ttl = 0
        assert 'kafka_cluster="gone"' not in c.exposition(False).decode()
    finally:
        proc.kill()
        proc.wait()


def test_a_section_reuses_the_deflate_of_every_big_piece_that_came_back_unchanged():
    """DeflateCache: one valid gzip body from pieces compressed apart (each from an empty
    window, full-flushed), the unchanged big pieces' bytes taken from the last document."""
    from txnwatch.metrics.exposition import DeflateCache, Section, with_tail

    def family(name: str, n: int, value: int) -> bytes:
        return "".join(f'{name}{{topic="t{i // 100}",partition="{i % 100}"}} {value + i}.0\n'
                       for i in range(n)).encode()

    cache = DeflateCache()
    doc = [b"# HELP a A\n# TYPE a gauge\n", family("a", 2000, 1), b"# HELP b B\n# TYPE b gauge\n",
           family("b", 2000, 7), b"# HELP c C\n# TYPE c gauge\n", b"c 1.0\n"]
    first = Section(list(doc), keep_plain=False, deflate=True, reuse=cache)
    assert cache.compressed == 2
    tail = b"txnwatch_up 1.0\n"
    assert gzip.decompress(with_tail(first, tail, True)) == b"".join(doc) + tail
    doc[3] = family("b", 2000, 8)                                   # b moved, a did not
    second = Section([bytes(p) for p in doc], keep_plain=False, deflate=True, reuse=cache)   # new objects
    assert cache.compressed == 1
    assert gzip.decompress(with_tail(second, tail, True)) == b"".join(doc) + tail
    # the raw stream alone is byte-aligned and not final: it decodes to the pieces
    d = zlib.decompressobj(-15)
    assert d.decompress(second._deflate) == b"".join(doc) and not d.eof


def test_a_publish_builds_only_the_formats_scraped_lately(monkeypatch):
    """A plain scrape (one `curl`) does not make every later publish join the whole plain
    document: after `format_ttl` seconds without one, publishes build the gzip form only,
    and a plain scrape after that still gets the newest data, built for it."""
    from types import SimpleNamespace

    from txnwatch.exporter.serve import collector

    now = [1000.0]
    monkeypatch.setattr(collector, "time", SimpleNamespace(monotonic=lambda: now[0]))
    c = ExporterCollector([])
    c.response_ttl = 0

    def publish(value: int) -> None:
        c.publish("poller:x", lambda w: w.add("kafka_cluster_brokers", {"cluster": "x"}, value))

    def section():
        return c._published.sections[False]

    publish(1)
    assert b'kafka_cluster_brokers{kafka_cluster="x"} 1.0' in c.exposition(False)       # a curl
    c.exposition(False, gzip=True)                                                       # Prometheus
    publish(2)
    assert section().has_plain and section().has_deflate
    now[0] += c.format_ttl + 1                       # Prometheus goes on, nobody curls
    assert b'kafka_cluster_brokers{kafka_cluster="x"} 2.0' in gzip.decompress(c.exposition(False, gzip=True))
    publish(3)
    assert section().has_deflate and not section().has_plain
    assert b'kafka_cluster_brokers{kafka_cluster="x"} 3.0' in gzip.decompress(c.exposition(False, gzip=True))
    assert b'kafka_cluster_brokers{kafka_cluster="x"} 3.0' in c.exposition(False)      # a curl again
    publish(4)
    assert section().has_plain and section().has_deflate
