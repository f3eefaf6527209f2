"""Benchmark of the transaction-log tap's hot path (no broker): decode + apply.

    .venv/bin/python bench/bench_tap.py [--records 300000] [--ids 100000]

Prints
* records decoded and applied per second on one core (decode_key + decode_value +
  TxnLogState.apply with counting, realistic histories, v0 and v1 values mixed);
* memory per 100,000 tracked transactional ids (tracemalloc, after gc; ids included),
  with a resolver that memoises nothing and with AppResolver's own memo cache on top;
* the O(ids) idle scan and a view build at that size;
* churn: 5k / 50k / 500k ids created, committed and expired with a bounded live
  window -- retained memory must not grow with the number churned.

With `--tracked 1000000`: the decode+apply rate with a million ids in the state.
With `--rebuild 1000000`: only the tap's rebuild from a compacted log of a million ids
through a real broker (one record per id, 50 partitions), timed and its RSS growth.

With `--broker N`: also end to end through a real broker (Apache Kafka where found) on this machine --
N records written to a stand-in for `__transaction_state` (a topic of the same record format), then a TransactionLogTap started
and timed until it has applied them all (consume + decode + apply on the tap thread).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.txnlog_encoder import encode_key, encode_value  # noqa: E402
from txnwatch.apps import AppResolver  # noqa: E402
from txnwatch.exporter.tap.decoder import decode_key, decode_value  # noqa: E402
from txnwatch.exporter.tap.state import TxnLogState  # noqa: E402

T0 = 1_700_000_000_000
APPS = ("orders-producer", "payments", "inventory-sync", "billing", "clickstream")


def tid_of(i: int) -> str:
    return f"{APPS[i % len(APPS)]}-{i}"


def history(tid: str, epoch: int, t: int, v1: bool) -> list[tuple[bytes, bytes]]:
    """One committed transaction: Ongoing x2, PrepareCommit, CompleteCommit (4 records)."""
    ver, tv = (1, 2) if v1 else (0, 0)
    bump = 1 if v1 else 0
    k = encode_key(tid)
    parts = [("orders", [0, 3]), ("audit", [1])]
    rows = [(1, epoch, parts, t, t), (1, epoch, parts, t + 3, t), (2, epoch + bump, parts, t + 40, t),
            (4, epoch + bump, None, t + 45, t)]
    return [(k, encode_value(version=ver, producer_id=10_000 + epoch, producer_epoch=e, timeout_ms=60_000,
                             status=s, partitions=p, last_update_ms=lu, start_ms=st,
                             client_transaction_version=tv)) for s, e, p, lu, st in rows]


def build_records(n_records: int, n_ids: int) -> list[tuple[bytes, bytes]]:
    recs: list[tuple[bytes, bytes]] = []
    i = 0
    while len(recs) < n_records:
        idx = i % n_ids
        recs.extend(history(tid_of(idx), i // n_ids, T0 + i * 10, v1=bool(idx % 2)))
        i += 1
    return recs[:n_records]


def track_ids(st: TxnLogState, n_ids: int) -> None:
    """Fill `st` with `n_ids` ids, each after one committed transaction (Empty)."""
    values = [decode_value(v) for _, v in history("x-1", 0, T0, v1=False)]
    for i in range(n_ids):
        tid = tid_of(i)
        for val in values:
            st.apply(tid, val, T0, T0, False)


def throughput(n_records: int, n_ids: int, tracked: int = 0) -> dict:
    """Records/s of decode + apply over `n_ids` active ids, with `tracked` ids (those
    included) already in the state: a dict of a million entries costs cache misses."""
    recs = build_records(n_records, n_ids)
    st = TxnLogState(AppResolver())
    if tracked:
        track_ids(st, tracked)
    # warm the ids (creation path), then time the steady state
    for k, v in recs[: min(len(recs), n_ids * 4)]:
        st.apply(decode_key(k).transactional_id, decode_value(v), T0, T0, True)
    gc.collect()
    t0 = time.perf_counter()
    for k, v in recs:
        st.apply(decode_key(k).transactional_id, decode_value(v), T0, T0, True)
    full = time.perf_counter() - t0
    t0 = time.perf_counter()
    for k, v in recs:
        decode_key(k)
        decode_value(v)
    dec = time.perf_counter() - t0
    return {"records": len(recs), "seconds": full, "rate": len(recs) / full, "tracked": len(st),
            "decode_rate": len(recs) / dec, "committed": sum(st.view().transactions.values())}


def unmemoised() -> AppResolver:
    """A resolver that keeps one id: the state's own memory, without AppResolver's memo."""
    return AppResolver(builtins=False, cache_size=1)


def memory_per_ids(n_ids: int, resolver: AppResolver) -> dict:
    """Traced bytes held by a state tracking `n_ids` ids (each Empty after one commit)."""
    values = [decode_value(v) for _, v in history("x-1", 0, T0, v1=False)]
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    st = TxnLogState(resolver)
    for i in range(n_ids):
        tid = tid_of(i)
        for val in values:
            st.apply(tid, val, T0, T0, False)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    t0 = time.perf_counter()
    idle = st.idle_scan(500, T0)
    scan = time.perf_counter() - t0
    t0 = time.perf_counter()
    st.view(idle)
    view = time.perf_counter() - t0
    assert len(st) == n_ids
    return {"ids": n_ids, "bytes": held, "per_id": held / n_ids, "idle_scan_s": scan, "view_s": view}


def churn(n_ids: int, live: int = 1000) -> dict:
    """Create, commit and expire `n_ids` ids, at most `live` alive at a time."""
    values = [decode_value(v) for _, v in history("x-1", 0, T0, v1=True)]
    st = TxnLogState(unmemoised())
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    for i in range(n_ids):
        tid = tid_of(i)
        for val in values:
            st.apply(tid, val, T0, T0, True)
        if i >= live:
            st.apply(tid_of(i - live), None, T0, T0, True)
    secs = time.perf_counter() - t0
    gc.collect()
    cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"ids": n_ids, "live": len(st), "retained": cur - base, "peak": peak - base,
            "expired": sum(st.view().expirations.values()), "seconds": secs}


def write_log(bootstrap: str, topic: str, records, linger_ms: int = 20, **producer) -> float:
    """Produce (key, value, partition) records to `topic`; seconds taken."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "batch.num.messages": 10000,
                  **producer})
    t0 = time.perf_counter()
    for i, (k, v, part) in enumerate(records):
        while True:
            try:
                p.produce(topic, key=k, value=v, partition=part)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return time.perf_counter() - t0


def tap_until_applied(bootstrap: str, topic: str, n: int) -> tuple[float, object, int]:
    """Start a tap on `topic` and wait until it has applied `n` records: (seconds from its
    start, its view, the bench process's RSS in kB then, after gc)."""
    from txnwatch.exporter.tap.source import TransactionLogTap

    tap = TransactionLogTap("bench", {"bootstrap.servers": bootstrap}, AppResolver(), 500,
                            poll_timeout=0.2, view_interval=0.2, topic=topic)
    t0 = time.perf_counter()
    tap.start()
    try:
        deadline = t0 + 600
        while tap.view().applied < n and time.perf_counter() < deadline:
            time.sleep(0.05)
        secs = time.perf_counter() - t0
        view = tap.view()
        gc.collect()
        return secs, view, rss_kb() or 0
    finally:
        tap.stop()


def end_to_end(n_records: int, n_ids: int, partitions: int = 3) -> dict:
    from txnwatch_dev.kafka import make_broker
    from txnwatch_dev.transactions.workload import create_topics

    recs = build_records(n_records, n_ids)
    # A stand-in topic: clients cannot write Kafka's own __transaction_state.
    log_topic = "bench.transaction-log"
    with make_broker() as b:
        create_topics(b.bootstrap, [log_topic], partitions=partitions)
        write_log(b.bootstrap, log_topic, ((k, v, hash(k) % partitions) for k, v in recs))
        secs, view, _ = tap_until_applied(b.bootstrap, log_topic, len(recs))
    return {"records": view.applied, "seconds": secs, "rate": view.applied / secs}


def rebuild(n_ids: int, partitions: int = 50) -> dict:
    """The tap's rebuild from a compacted log: one record per id (its last state, as
    compaction leaves it), over `partitions` partitions like __transaction_state; timed from
    the tap's start until it has applied them all and is following."""
    from txnwatch_dev.kafka import make_broker
    from txnwatch_dev.transactions.workload import create_topics

    def last_states():
        for i in range(n_ids):
            k, v = history(tid_of(i), i % 7, T0 + i, v1=bool(i % 2))[-1]   # CompleteCommit: the kept record
            yield k, v, i % partitions

    log_topic = "bench.transaction-log-compacted"
    with make_broker() as b:
        create_topics(b.bootstrap, [log_topic], partitions=partitions, config={"cleanup.policy": "compact"})
        written = write_log(b.bootstrap, log_topic, last_states(), linger_ms=50, **{"compression.type": "lz4"})
        gc.collect()
        rss0 = rss_kb() or 0
        secs, view, rss1 = tap_until_applied(b.bootstrap, log_topic, n_ids)
    return {"ids": n_ids, "applied": view.applied, "seconds": secs, "rate": view.applied / secs,
            "written_s": written, "rss_delta_mb": (rss1 - rss0) / 1024}


def rss_kb() -> int | None:
    try:
        for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--ids", type=int, default=100_000)
    ap.add_argument("--broker", type=int, default=0, metavar="N",
                    help="also measure N records end to end through a local broker")
    ap.add_argument("--tracked", type=int, default=0, metavar="N",
                    help="time decode+apply with N ids already tracked (e.g. 1000000)")
    ap.add_argument("--rebuild", type=int, default=0, metavar="IDS",
                    help="only: time the tap's rebuild from a compacted log of IDS ids through a local broker")
    args = ap.parse_args(argv)

    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs; Python {platform.python_version()}")
    if args.rebuild:
        e = rebuild(args.rebuild)
        print(f"rebuild: {e['applied']:,} of {e['ids']:,} ids (one record each, 50 partitions, written in "
              f"{e['written_s']:.1f} s) consumed, decoded and applied in {e['seconds']:.2f} s = "
              f"{e['rate']:,.0f} records/s (tap start included); RSS grew {e['rss_delta_mb']:.0f} MB = "
              f"{e['rss_delta_mb'] * 1048576 / e['ids']:.0f} B/id")
        return
    r = throughput(args.records, min(args.ids, 20_000), args.tracked)
    print(f"decode+apply: {r['records']:,} records in {r['seconds']:.2f} s = {r['rate']:,.0f} records/s "
          f"(decode only {r['decode_rate']:,.0f} records/s; {r['tracked']:,} ids tracked)")

    rss0 = rss_kb()
    m = memory_per_ids(args.ids, unmemoised())
    rss1 = rss_kb()
    print(f"memory: {m['ids']:,} ids hold {m['bytes'] / 1e6:.1f} MB traced = {m['per_id']:.0f} B/id "
          f"(no memo; RSS delta {((rss1 or 0) - (rss0 or 0)) / 1024:.1f} MB)")
    print(f"        idle scan (cap 500) {m['idle_scan_s'] * 1000:.0f} ms, view build {m['view_s'] * 1000:.1f} ms "
          f"at {m['ids']:,} ids")
    m2 = memory_per_ids(args.ids, AppResolver())
    print(f"memory: {m2['ids']:,} ids with AppResolver's memo cache: {m2['bytes'] / 1e6:.1f} MB = "
          f"{m2['per_id']:.0f} B/id (the cache is capped at 200,000 ids)")

    for n in (5_000, 50_000, 500_000):
        c = churn(n)
        print(f"churn: {c['ids']:>7,} ids churned (live window 1,000, {c['expired']:,} expired): "
              f"retained {c['retained'] / 1e3:.0f} kB, peak {c['peak'] / 1e3:.0f} kB, {c['seconds']:.1f} s")

    if args.broker:
        e = end_to_end(args.broker, min(args.ids, 20_000))
        print(f"end to end (broker on the same cores): {e['records']:,} records consumed, decoded and applied "
              f"in {e['seconds']:.2f} s = {e['rate']:,.0f} records/s (tap start included)")


if __name__ == "__main__":
    main()
