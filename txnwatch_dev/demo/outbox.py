"""The demo's outbox sink: the reading half of the transactional outbox.

The Kafka Streams app writes high-balance alerts to the `alert-outbox` topic in the same
transaction as its state; this sink applies them to a SQLite table, each exactly once:

* it reads `read_committed` (as a consumer group), so it never sees an aborted alert;
* it applies a batch in one SQLite transaction with INSERT OR IGNORE keyed by the alert's
  deterministic `alert_id`, then commits the group's offsets: a crash between the two
  re-reads the batch and the re-inserts are ignored (idempotent, at-least-once reading).

That is also why it stops dead behind a hanging transaction: a read_committed consumer
cannot read past the partition's last stable offset, so its lag against the LSO stays at
0 while its lag against the high watermark grows (what txnwatch shows for the group).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

# applied_at (unix seconds): when the sink applied the row (the demo's test tells rows read
# before `txnwatch abort` from rows it let through)
SCHEMA = ("CREATE TABLE IF NOT EXISTS alerts (alert_id TEXT PRIMARY KEY, account TEXT, balance REAL, "
          "kind TEXT, topic TEXT, partition INTEGER, offset INTEGER, applied_at REAL)")


@dataclass(frozen=True)
class Alert:
    alert_id: str
    account: str | None
    balance: float | None
    kind: str | None


def parse_alert(value: bytes | None) -> Alert | None:
    """An outbox record's alert, or None when it is not one (no JSON object, no alert_id)."""
    if not value:
        return None
    try:
        doc = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("alert_id"), str) or not doc["alert_id"]:
        return None
    balance = doc.get("balance")
    return Alert(doc["alert_id"], doc.get("account"),
                 float(balance) if isinstance(balance, int | float) else None, doc.get("kind"))


def apply_alerts(db: sqlite3.Connection, rows: Iterable[tuple[Alert, str, int, int]]) -> tuple[int, int]:
    """Apply (alert, topic, partition, offset) rows in one SQLite transaction, stamped with the
    time; an alert id already in the table is ignored. Returns (inserted, ignored)."""
    inserted = ignored = 0
    now = time.time()
    with db:
        for a, topic, partition, offset in rows:
            cur = db.execute("INSERT OR IGNORE INTO alerts VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             (a.alert_id, a.account, a.balance, a.kind, topic, partition, offset, now))
            if cur.rowcount:
                inserted += 1
            else:
                ignored += 1
    return inserted, ignored


def open_db(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False)
    db.execute(SCHEMA)
    db.commit()
    return db


class OutboxSink(threading.Thread):
    """A read_committed consumer group applying outbox alerts to SQLite, once each."""

    def __init__(self, bootstrap: str, topic: str, db_path: str, group: str = "alert-outbox-sink") -> None:
        super().__init__(name="demo-outbox-sink", daemon=True)
        self.bootstrap, self.topic, self.db_path, self.group = bootstrap, topic, db_path, group
        self.stopping = threading.Event()
        self.inserted = self.ignored = self.skipped = 0
        self.partitions_read: set[int] = set()
        self.error: str | None = None

    def run(self) -> None:
        from confluent_kafka import Consumer

        db = open_db(self.db_path)
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                      "isolation.level": "read_committed", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "log_level": 3})
        try:
            c.subscribe([self.topic])
            while not self.stopping.is_set():
                msgs = c.consume(500, timeout=0.5)
                rows = []
                for m in msgs:
                    if m.error():
                        continue
                    a = parse_alert(m.value())
                    if a is None:
                        self.skipped += 1
                        continue
                    rows.append((a, m.topic(), m.partition(), m.offset()))
                    self.partitions_read.add(m.partition())
                if rows:
                    ins, ign = apply_alerts(db, rows)
                    self.inserted += ins
                    self.ignored += ign
                if msgs:
                    c.commit(asynchronous=False)   # after the rows are durable in SQLite
        except Exception as exc:  # noqa: BLE001 - the demo reports it and goes on
            self.error = f"{type(exc).__name__}: {exc}"
            log.warning("outbox sink stopped: %s", exc)
        finally:
            c.close()
            db.close()
