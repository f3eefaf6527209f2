"""What KIP-994's duration filter and KIP-1152's transactional-id pattern save the KIP-664
poller: transactions the brokers list, ids it then describes, and the time of that step.

    .venv/bin/python bench/bench_list_filters.py --kafka-version 4 --apps 20 --per-app 20 --old 2

Starts a broker of the release, holds `apps` x `per-app` transactions open (raw requests:
txnwatch_dev.transactions.rawkafka), of which `old` per app were opened `--min-age` seconds before
the rest, and measures three ways of asking for them, as the poller does (ListTransactions
of the open states, then DescribeTransactions of what remains after txnwatch's own filter):
everything; the duration filter (open_transaction_min_age_seconds); the duration filter and
one app's pattern (transactional_ids.include). On a release without a filter the broker
lists everything and txnwatch filters, so only the brokers' side shrinks.
"""

from __future__ import annotations

import argparse
import platform
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from txnwatch.exporter.model import OPEN_STATES  # noqa: E402
from txnwatch.kafka.kip664 import TransactionAPI  # noqa: E402
from txnwatch_dev.kafka import KafkaBroker, kafka_release  # noqa: E402
from txnwatch_dev.transactions.rawkafka import RawTransaction  # noqa: E402
from txnwatch_dev.transactions.workload import create_topics  # noqa: E402

TOPIC = "bench-filters"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kafka-version", default=None)
    ap.add_argument("--apps", type=int, default=20)
    ap.add_argument("--per-app", type=int, default=20)
    ap.add_argument("--old", type=int, default=2, help="transactions per app opened before the rest")
    ap.add_argument("--min-age", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    release = kafka_release(a.kafka_version)
    broker = KafkaBroker(release=release, properties={"transaction.max.timeout.ms": 3_600_000}).start()
    try:
        create_topics(broker.bootstrap, [TOPIC], partitions=4)
        apps = [f"app{i:02d}" for i in range(a.apps)]
        t0 = time.perf_counter()
        for n in range(a.per_app):
            if n == a.old:
                time.sleep(a.min_age + 1)
            for i, app in enumerate(apps):
                RawTransaction(broker.bootstrap, f"{app}-{n}", timeout_ms=3_600_000).open(TOPIC, i % 4)
        print(f"{a.apps * a.per_app} transactions open ({a.apps} apps x {a.per_app}, {a.old} per app older than "
              f"{a.min_age:g} s) in {time.perf_counter() - t0:.1f}s on {broker.describe()}")
        api = TransactionAPI({"bootstrap.servers": broker.bootstrap}, 30)
        api.detect()
        keep = re.compile(f"{apps[0]}-.*")
        ways = {"no filter": (0, None), "duration filter": (int(a.min_age * 1000), None),
                "duration filter + id pattern": (int(a.min_age * 1000), keep.pattern)}
        print(f"\nbroker has the duration filter: {api.duration_filter}, the id pattern: {api.id_pattern_filter}\n")
        print("| query | listed by the brokers | described | ListTransactions + DescribeTransactions, median ms |")
        print("|---|---|---|---|")
        for name, (min_ms, pattern) in ways.items():
            times, listed, described = [], 0, 0
            for _ in range(a.rounds):
                t = time.perf_counter()
                listings = api.list_transactions(OPEN_STATES, min_ms, pattern)
                listed = api.listed
                now_ms = time.time() * 1000
                # txnwatch's own filters where the broker had none: the poller describes what is left
                ids = [x.transactional_id for x in listings if (pattern is None or keep.fullmatch(x.transactional_id))]
                descriptions = api.describe_transactions(ids)
                if min_ms:
                    ids = [i for i, d in descriptions.items() if d.start_ms >= 0 and now_ms - d.start_ms >= min_ms]
                described = len(descriptions)
                times.append(time.perf_counter() - t)
            print(f"| {name} | {listed} | {described} | {statistics.median(times) * 1000:.1f} |")
        api.close()
    finally:
        broker.cleanup()
    print(f"\nmachine: {platform.machine()}, python {platform.python_version()}, Apache Kafka {release.version}")


if __name__ == "__main__":
    main()
