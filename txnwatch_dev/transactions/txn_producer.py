"""A transactional producer meant to run as a child process.

Tests and the demo start it, read its stdout for progress lines and may SIGKILL it
mid-transaction: the coordinator then aborts the transaction at its
transaction.timeout.ms.

    python -m txnwatch_dev.transactions.txn_producer --bootstrap H:P --topic T \
        --transactional-id ID --action commit --count 3 [--partition N] [--then-hang]

Prints one line per finished transaction (`committed N`, `aborted N`) and `open` once
a transaction's records are flushed and left open (`--action hang` or `--then-hang`).
"""

from __future__ import annotations

import argparse
import sys
import time

from confluent_kafka import Producer


def run(args: argparse.Namespace) -> int:
    conf = {
        "bootstrap.servers": args.bootstrap,
        "transactional.id": args.transactional_id,
        "transaction.timeout.ms": args.transaction_timeout_ms,
        "linger.ms": 0,
    }
    producer = Producer(conf)
    producer.init_transactions(30)
    print("ready", flush=True)

    def one_transaction(i: int) -> None:
        producer.begin_transaction()
        for j in range(args.records):
            kwargs = {"partition": args.partition} if args.partition is not None else {}
            producer.produce(args.topic, value=f"{args.transactional_id}:{i}:{j}".encode(), **kwargs)
        producer.flush(30)

    actions = {"commit": "committed", "abort": "aborted"}
    if args.action in actions:
        for i in range(args.count):
            one_transaction(i)
            if args.action == "commit":
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
            print(f"{actions[args.action]} {i + 1}", flush=True)
            if args.interval:
                time.sleep(args.interval)
    if args.action == "hang" or args.then_hang:
        one_transaction(0)
        print("open", flush=True)
        # Stay alive with the transaction open until killed.
        while True:
            time.sleep(3600)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--transactional-id", required=True)
    p.add_argument("--action", choices=["commit", "abort", "hang"], default="commit")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--records", type=int, default=1, help="records per transaction")
    p.add_argument("--partition", type=int, default=None)
    p.add_argument("--interval", type=float, default=0.0, help="seconds between transactions")
    p.add_argument("--then-hang", action="store_true", help="after the transactions, leave one open")
    p.add_argument("--transaction-timeout-ms", type=int, default=60000)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
