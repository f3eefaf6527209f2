"""Several Apache Kafka KRaft nodes in one cluster (replication, min ISR, leader moves)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .node import KafkaBroker, new_cluster_id
from .release import KafkaRelease, kafka_release


class KafkaCluster:
    """`size` Kafka nodes in one KRaft cluster: node 1 is broker + the only controller,
    the rest broker-only, so any broker but node 1 can be stopped without losing the quorum.
    Replication defaults follow the size (internal topics RF = min(3, size))."""

    kind = "kafka"

    def __init__(self, size: int = 3, workdir: str | os.PathLike | None = None,
                 properties: Mapping[str, object] | None = None, host: str = "127.0.0.1",
                 heap: str = "512m", release: KafkaRelease | None = None,
                 features: Mapping[str, int] | None = None, request_log: bool = False) -> None:
        self.release = release or kafka_release()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="txnwatch-kafka-cluster-"))
        rf = min(3, size)
        props = {"offsets.topic.replication.factor": rf, "transaction.state.log.replication.factor": rf,
                 "transaction.state.log.min.isr": min(2, rf), "default.replication.factor": rf,
                 # Leaders (and so transaction and group coordinators) move only when a test
                 # moves them: the controller's automatic preferred-leader rebalance (every 5
                 # minutes) would otherwise move them back after a broker's restart at a moment
                 # of its own, in the middle of a later test.
                 "auto.leader.rebalance.enable": "false",
                 **(properties or {})}
        cid = new_cluster_id()
        common = dict(host=host, properties=props, cluster_id=cid, release=self.release, heap=heap,
                      features=features, request_log=request_log)
        first = KafkaBroker(workdir=self.workdir / "node-1", node_id=1, **common)
        self.nodes = [first] + [
            KafkaBroker(workdir=self.workdir / f"node-{i}", node_id=i, roles="broker",
                        controller=first.controller, **common)
            for i in range(2, size + 1)]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def version(self) -> str:
        return self.release.version

    def describe(self) -> str:
        return f"{self.release.describe()}, {len(self.nodes)}-node KRaft cluster"

    def node(self, node_id: int) -> KafkaBroker:
        return self.nodes[node_id - 1]

    def start(self, timeout: float = 120.0) -> KafkaCluster:
        deadline = time.monotonic() + timeout
        launched = [n for n in self.nodes if not n.running()]
        # every node's storage is formatted (a JVM each) at once, then all start together
        with ThreadPoolExecutor(max_workers=len(launched) or 1) as pool:
            list(pool.map(lambda n: n.format(), launched))
        for n in launched:
            n.launch()
        for n in launched:
            n.wait_ready(max(10.0, deadline - time.monotonic()))
        return self

    def settle(self, timeout: float = 120.0) -> KafkaCluster:
        """Every node running and every partition's ISR all of its replicas: the state a test
        after a broker stop or kill starts from. Leaders stay where the failover put them
        (automatic leader rebalancing is off in this harness, see __init__)."""
        from confluent_kafka.admin import AdminClient

        from ..net import wait_for

        self.start(timeout)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})

        def full() -> bool:
            topics = admin.list_topics(timeout=10).topics
            return all(sorted(md.isrs) == sorted(md.replicas) for tm in topics.values()
                       for md in tm.partitions.values())
        wait_for(full, timeout, what="every partition's ISR back to all of its replicas")
        wait_for(self._coordinators_loaded, timeout,
                 what="every broker's transaction coordinator done loading __transaction_state")
        return self

    def _coordinators_loaded(self) -> bool:
        """ListTransactions answered by every broker: a coordinator still loading a partition
        it took over (after a failover) answers COORDINATOR_LOAD_IN_PROGRESS, and a producer
        initialising meanwhile would fail at init (as a canary rightly counts)."""
        from txnwatch.kafka.kip664 import TransactionAPI

        api = TransactionAPI({"bootstrap.servers": self.bootstrap}, 10.0)
        try:
            api.list_transactions()
            return True
        finally:
            api.close()

    def stop(self) -> None:
        for n in reversed(self.nodes):
            n.stop()

    def cleanup(self) -> None:
        for n in self.nodes:
            n.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()
