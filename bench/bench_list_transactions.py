"""ListTransactions to every broker at once (TransactionAPI.list_transactions) against
kafka-python's own call, which asks one broker after another, alternating on one cluster.

    .venv/bin/python bench/bench_list_transactions.py --bootstrap HOST:PORT [--rounds 20]

Against a cluster set up before (bench_scrape's 7-node one at 100,000 partitions, say):
the wall time of listing the open transactions (the states a poll asks for), per round,
medians. Each coordinator holds a slice of __transaction_state, so a listing is one
request per broker either way; only the waiting differs.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from txnwatch.exporter.model import OPEN_STATES
from txnwatch.kafka.kip664 import TransactionAPI


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    api = TransactionAPI({"bootstrap.servers": a.bootstrap}, 30)
    states = sorted(OPEN_STATES)
    sides = {"every broker at once": lambda: api.list_transactions(OPEN_STATES),
             "one after another": lambda: api._call("list_transactions", state_filters=states)}
    out: dict[str, list[float]] = {name: [] for name in sides}
    try:
        for call in sides.values():       # connections to every broker: not measured
            call()
        brokers = len(api._client()._manager.cluster.brokers())
        for i in range(a.rounds):
            for name in (list(sides) if i % 2 else list(reversed(sides))):
                t = time.perf_counter()
                sides[name]()
                out[name].append(time.perf_counter() - t)
    finally:
        api.close()
    print(f"machine: {platform.machine()}, python {platform.python_version()}; {brokers} brokers, "
          f"{api.listed} open transactions listed; wall time, medians of {a.rounds} alternating rounds:")
    for name, xs in out.items():
        print(f"  {name:22s} {statistics.median(xs) * 1000:6.1f} ms  (all: {[round(x * 1000, 1) for x in xs]})")
    print(f"  ratio: {statistics.median(out['every broker at once']) / statistics.median(out['one after another']):.2f}x")


if __name__ == "__main__":
    main()
