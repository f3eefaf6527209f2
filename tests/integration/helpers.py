"""Helpers the integration tests share (imported from here, never from conftest.py or from
another test module): exporter configs, the reference pipeline's input and its exactly-once
checks, scraping the listener's own /metrics, a process's children."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import pytest
from confluent_kafka import Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from txnwatch.producer import TransactionalProducer
from txnwatch.spark_listener.sink import TXN_HEADER


# ------------------------------------------------------------------ exporter configs
def cluster_config(bootstrap: str, topics: list[str] | None = None, **extra) -> dict:
    c = {"name": "test", "bootstrap_servers": bootstrap, "poll_interval_seconds": 0.5,
         "poll_timeout_seconds": 5, **extra}
    if topics:
        c["topics"] = {"include": [t.replace(".", r"\.") for t in topics]}
    return {"clusters": [c]}


# ------------------------------------------------------------------ the reference pipeline: its input and checks
BASE = 1_700_000_000          # a multiple of the window
KEYS = 20
PER_PARTITION = 400           # 40 s of event time per partition, 0.1 s apart
WINDOW = 5

# The exactly-once sink's two forms: foreachBatch(sink), and sink.write_stream(df) (the
# query's own sink, the faster one); `txnwatch pipeline --sink-form`.
SINK_FORMS = pytest.mark.parametrize("form", ["foreachBatch", "stream"])


def make_input(bootstrap: str, topic: str) -> dict[tuple[str, int], tuple[int, float]]:
    """Write the input in one committed transaction, after an aborted one that the
    pipeline's read_committed source must skip; return the expected windows."""
    p = TransactionalProducer({"bootstrap.servers": bootstrap, "transactional.id": f"input-{topic}"})
    p.init_transactions()
    p.begin()
    for part in (0, 1):
        for j in range(0, PER_PARTITION, 10):
            p.produce(topic, value=json.dumps({"key": f"k{j % KEYS}", "amount": 1000, "ts": BASE + j * 0.1}).encode(),
                      partition=part)
    p.flush()
    p.abort()
    expected: dict[tuple[str, int], list] = {}
    p.begin()
    for part in (0, 1):
        for j in range(PER_PARTITION):
            key = f"k{(j * 2 + part) % KEYS}"
            ts = BASE + j * 0.1
            amount = j % 7 + part
            p.produce(topic, value=json.dumps({"key": key, "amount": amount, "ts": ts}).encode(),
                      key=key.encode(), partition=part)
            w = int(ts // WINDOW * WINDOW)
            c = expected.setdefault((key, w), [0, 0.0])
            c[0] += 1
            c[1] += amount
        # closes every window (same position in both partitions: read in the same batch)
        p.produce(topic, value=json.dumps({"key": "__flush__", "amount": 0, "ts": BASE + 3600}).encode(),
                  partition=part)
    p.commit()
    return {k: (v[0], v[1]) for k, v in expected.items()}


class Out(NamedTuple):
    partition: int
    offset: int
    value: dict
    attempt: str | None        # the sink's txnwatch.txn header


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed", partitions: int = 2) -> list[Out]:
    """Every record a consumer with this isolation level sees on `topic`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "isolation.level": isolation,
                  "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, eof = [], set()
    try:
        while len(eof) < partitions:
            m = c.poll(10)
            assert m is not None, f"{isolation} consumer stalled (open transaction?)"
            if m.error():
                eof.add(m.partition())
                continue
            hdr = dict(m.headers() or []).get(TXN_HEADER)
            out.append(Out(m.partition(), m.offset(), json.loads(m.value()), hdr.decode() if hdr else None))
    finally:
        c.close()
    return out


def windows(records: list[Out]) -> Counter:
    return Counter((r.value["key"], r.value["window_start"], r.value["count"], r.value["sum"]) for r in records)


def expected_counter(expected) -> Counter:
    return Counter((k, w, c, s) for (k, w), (c, s) in expected.items())


def assert_exactly_once(bootstrap: str, topic: str, expected) -> list[Out]:
    """A read_committed consumer sees every expected window exactly once; returns its records."""
    records = read_all(bootstrap, topic)
    got = windows(records)
    want = expected_counter(expected)
    dups = {k: n for k, n in got.items() if n > 1}
    assert not dups, f"windows written more than once: {list(dups)[:5]}"
    assert got == want, (f"missing {list((want - got).elements())[:5]}, "
                         f"unexpected {list((got - want).elements())[:5]}")
    return records


def aborted_records(bootstrap: str, topic: str, committed: list[Out]) -> list[Out]:
    """What a read_uncommitted consumer sees beyond the read_committed view: the records of
    aborted transactions."""
    seen = {(r.partition, r.offset) for r in committed}
    return [r for r in read_all(bootstrap, topic, "read_uncommitted") if (r.partition, r.offset) not in seen]


def samples(text: str) -> dict[tuple, float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            out[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
    return out


def total(smp: dict, name: str, **labels) -> float:
    want = {(k, str(v)) for k, v in labels.items()}
    return sum(v for (n, lb), v in smp.items() if n == name and want <= set(lb))


# ------------------------------------------------------------------ the listener's own /metrics and queries
def scrape(url: str) -> dict[tuple, float]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict, name: str, query: str, **labels) -> float | None:
    want = {("query", query), *((k, str(v)) for k, v in labels.items())}
    hits = [v for (n, lb), v in samples.items() if n == name and want <= set(lb)]
    return hits[0] if len(hits) == 1 else None


def stop(query) -> None:
    try:
        query.stop()
    except Exception:  # noqa: BLE001 - a failed query may already be gone
        pass


# ------------------------------------------------------------------ processes
def children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == pid and b"txnwatch.exporter.runtime.worker" in cmd:
                out.append(int(d.name))
    return out


def tap_caught_up(m) -> bool:
    """/metrics shows the poller and the tap up and the tap's state rebuilt from the log (what
    /readyz waited for before it became ready at each source's first attempt)."""
    return (m.get_value("txnwatch_up", source="poller") == 1 and m.get_value("txnwatch_up", source="tap") == 1
            and m.get_value("txnwatch_tap_rebuilt") == 1)
