"""Read a cluster's `__transaction_state` and print its records, decoded, one JSON object a
line (what the coordinator really wrote: fixtures for the tap's tests are captured with it).

    python -m txnwatch_dev.transactions.txnlog_dump --bootstrap H:P [--id-prefix scn-] [--raw]

Each line: partition, offset, timestamp, transactional id and either the decoded value
fields (status by name) or `"value": null` for a tombstone; `--raw` adds the value bytes
as hex, so a fixture replays exactly what the broker wrote.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator

from txnwatch.exporter.tap.decoder import TxnLogDecodeError, decode_key, decode_value

TOPIC = "__transaction_state"


def read_records(bootstrap: str, timeout: float = 30.0) -> Iterator[tuple[int, int, int, bytes, bytes | None]]:
    """(partition, offset, timestamp ms, key, value) of every record up to the current end."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txnwatch-txnlog-dump", "enable.auto.commit": False,
                  "isolation.level": "read_uncommitted", "log_level": 3})
    try:
        md = c.list_topics(TOPIC, timeout=timeout)
        parts = sorted(md.topics[TOPIC].partitions) if TOPIC in md.topics and md.topics[TOPIC].partitions else []
        ends = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=timeout)[1] for p in parts}
        todo = {p for p, end in ends.items() if end > 0}
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in todo])
        out = []
        while todo:
            msg = c.poll(timeout)
            if msg is None:
                raise TimeoutError(f"no records from {TOPIC} within {timeout:.0f}s; still reading {sorted(todo)}")
            if msg.error():
                continue
            p = msg.partition()
            out.append((p, msg.offset(), msg.timestamp()[1], msg.key(), msg.value()))
            if msg.offset() + 1 >= ends[p]:
                todo.discard(p)
        yield from sorted(out, key=lambda r: (r[2], r[0], r[1]))
    finally:
        c.close()


def record_json(partition: int, offset: int, timestamp: int, key: bytes, value: bytes | None,
                raw: bool = False) -> dict:
    """One record as a JSON-ready dict (pure)."""
    try:
        tid = decode_key(key).transactional_id
    except TxnLogDecodeError as exc:
        return {"partition": partition, "offset": offset, "timestamp": timestamp, "error": str(exc)}
    out: dict = {"partition": partition, "offset": offset, "timestamp": timestamp, "transactional_id": tid}
    if raw:
        out["key_hex"] = key.hex()
    if value is None:
        out["value"] = None
        return out
    try:
        v = decode_value(value)
        out["value"] = {"version": v.version, "producer_id": v.producer_id, "producer_epoch": v.producer_epoch,
                        "timeout_ms": v.timeout_ms, "status": v.status.name, "start_ms": v.start_ms,
                        "last_update_ms": v.last_update_ms,
                        "partitions": [[t, list(ps)] for t, ps in v.partitions] if v.partitions else None,
                        "client_transaction_version": v.client_transaction_version,
                        "previous_producer_id": v.previous_producer_id, "next_producer_id": v.next_producer_id,
                        "unknown_tags": list(v.unknown_tags)}
    except TxnLogDecodeError as exc:
        out["error"] = str(exc)
    if raw:
        out["value_hex"] = value.hex()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--id-prefix", default="", help="only transactional ids starting with this")
    p.add_argument("--raw", action="store_true", help="add key and value bytes as hex")
    a = p.parse_args(argv)
    for rec in read_records(a.bootstrap):
        j = record_json(*rec, raw=a.raw)
        if j.get("transactional_id", "").startswith(a.id_prefix):
            print(json.dumps(j, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
