"""`make demo`: an embedded Tansu broker, a transactional workload and the exporter.

    python -m txnwatch.devtools.demo [--broker-port N] [--exporter-port N] [--bootstrap-servers LIST]

The workload commits transactions steadily, aborts some, and leaves one transaction
hanging (its producer is SIGKILLed mid-transaction) so the exporter has something
to show. Ctrl-C stops every process the demo started.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from .broker import TansuBroker
from .exporter_proc import ExporterProcess
from .net import free_port
from .workload import ProducerProcess, create_topics

ROOT = Path(__file__).resolve().parents[2]
STATE_DIR = ROOT / ".demo"


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stopping = threading.Event()
        self.broker: TansuBroker | None = None
        self.exporter: ExporterProcess | None = None
        self.children: list[ProducerProcess] = []
        STATE_DIR.mkdir(exist_ok=True)

    def say(self, msg: str) -> None:
        print(msg, flush=True)

    def start(self) -> None:
        a = self.args
        if a.bootstrap_servers:
            bootstrap = a.bootstrap_servers
            self.say(f"using the cluster at {bootstrap} (no embedded broker)")
        else:
            self.broker = TansuBroker(port=a.broker_port or free_port(), log_path=STATE_DIR / "tansu.log").start()
            bootstrap = self.broker.bootstrap
            self.say(f"started Tansu broker on {bootstrap} (log: .demo/tansu.log)")
        self.bootstrap = bootstrap
        create_topics(bootstrap, ["demo.orders", "demo.payments"], partitions=3)
        self.say("created topics demo.orders, demo.payments (3 partitions each)")

        # Steady commits and periodic aborts; one transaction left hanging on demo.orders-2.
        self.children.append(ProducerProcess(bootstrap, "demo.payments", "payments-writer-0", action="commit",
                                             count=10**9, records=5, interval=a.commit_interval))
        self.children.append(ProducerProcess(bootstrap, "demo.payments", "payments-writer-1", action="abort",
                                             count=10**9, records=2, interval=a.abort_interval))
        hang = ProducerProcess(bootstrap, "demo.orders", "orders-enricher-7", action="commit", count=3,
                               records=4, partition=2, then_hang=True)
        hang.wait_line("open")
        hang.kill()
        self.say("workload: payments-writer-0 commits, payments-writer-1 aborts, orders-enricher-7 was "
                 "killed mid-transaction on demo.orders-2 (a hanging transaction)")
        self._commit_group(bootstrap)

        config = {"clusters": [{"name": "demo", "bootstrap_servers": bootstrap,
                                "poll_interval_seconds": a.poll_interval,
                                "hanging_threshold_seconds": a.hanging_threshold}]}
        self.exporter = ExporterProcess(config, port=a.exporter_port or 10129,
                                        log_path=STATE_DIR / "exporter.log").start()
        self.say(f"started txnwatch exporter (log: .demo/exporter.log)\n\n"
                 f"  exporter page : {self.exporter.url}/\n"
                 f"  metrics       : {self.exporter.url}/metrics\n"
                 f"  readiness     : {self.exporter.url}/readyz\n"
                 f"  one-shot check: .venv/bin/txnwatch check --bootstrap-servers {bootstrap}\n\n"
                 "Ctrl-C stops everything.")

    def _commit_group(self, bootstrap: str) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo.orders-reader",
                      "enable.auto.commit": False, "isolation.level": "read_committed"})
        c.commit(offsets=[TopicPartition("demo.orders", p, 0) for p in range(3)], asynchronous=False)
        c.close()

    def status_line(self) -> str:
        try:
            m = self.exporter.metrics()
        except Exception as exc:  # noqa: BLE001 - status only
            return f"exporter unreachable: {exc}"
        up = m.get_value("txnwatch_up", source="poller")
        hanging = sum(v for _, v in m.select("kafka_transaction_hanging"))
        stalled = max((v for _, v in m.select("kafka_partition_lso_stalled_seconds")), default=0)
        lag = sum(v for _, v in m.select("kafka_partition_lso_lag_messages"))
        return (f"poller {'up' if up == 1 else 'DOWN'} | hanging txns {hanging:.0f} | "
                f"max LSO stall {stalled:.0f}s | LSO lag {lag:.0f} msgs")

    def run(self) -> None:
        interactive = sys.stdout.isatty()
        while not self.stopping.wait(2.0):
            line = self.status_line()
            if interactive:
                print("\r" + line.ljust(100), end="", flush=True)
            else:
                print(line, flush=True)

    def stop(self) -> None:
        self.stopping.set()
        for c in self.children:
            c.kill()
        if self.exporter:
            self.exporter.stop()
        if self.broker:
            self.broker.stop()
        self.say("\nstopped every process the demo started")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--broker-port", type=int, default=int(os.environ.get("DEMO_BROKER_PORT", 0)) or None)
    p.add_argument("--exporter-port", type=int, default=int(os.environ.get("DEMO_EXPORTER_PORT", 0)) or None)
    p.add_argument("--bootstrap-servers", default=os.environ.get("DEMO_BOOTSTRAP_SERVERS"),
                   help="point at a real cluster instead of the embedded broker")
    p.add_argument("--poll-interval", type=float, default=5.0)
    p.add_argument("--hanging-threshold", type=float, default=30.0,
                   help="seconds an LSO may stall before it counts as hanging (Tansu has no KIP-664)")
    p.add_argument("--commit-interval", type=float, default=1.0)
    p.add_argument("--abort-interval", type=float, default=5.0)
    args = p.parse_args(argv)
    demo = Demo(args)
    signal.signal(signal.SIGTERM, lambda *_: demo.stopping.set())
    try:
        demo.start()
        demo.run()
    except KeyboardInterrupt:
        pass
    finally:
        demo.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
