"""Helpers to drive a broker from tests, benchmarks and the demo: topics and producers."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ..net import wait_for
from ..procs import kill_group


def create_topics(bootstrap: str, topics: Iterable[str], partitions: int = 1,
                  timeout: float = 30.0, replication_factor: int = 1,
                  config: dict[str, str] | None = None) -> None:
    """Create topics (already-existing ones are fine) and wait until metadata shows them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = list(topics)
    futures = admin.create_topics([NewTopic(t, partitions, replication_factor, config=config or {})
                                   for t in wanted],
                                  operation_timeout=timeout, request_timeout=timeout)
    for _topic, fut in futures.items():
        try:
            fut.result()
        except Exception as exc:  # TOPIC_ALREADY_EXISTS is fine
            if "already exists" not in str(exc).lower() and "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise

    def visible() -> bool:
        md = admin.list_topics(timeout=5)
        return all(t in md.topics and len(md.topics[t].partitions) >= partitions for t in wanted)

    wait_for(visible, timeout, what=f"topics {wanted} in metadata")


class TopicEnds:
    """The LSO and high watermark of each partition of a topic, from a read_committed and a
    read_uncommitted consumer kept open, so that asking often is cheap (close() them, or use
    it as a context manager). `partitions`: a count, else the topic's from metadata."""

    def __init__(self, bootstrap: str, topic: str, partitions: int | None = None) -> None:
        self.topic = topic
        self._consumers = {iso: Consumer({"bootstrap.servers": bootstrap, "group.id": "txnwatch-watermarks",
                                          "isolation.level": iso, "enable.auto.commit": False, "log_level": 3})
                           for iso in ("read_committed", "read_uncommitted")}
        try:
            self.partitions = list(range(partitions)) if partitions is not None else sorted(
                self._consumers["read_committed"].list_topics(topic, timeout=10).topics[topic].partitions)
        except BaseException:
            self.close()
            raise

    def offsets(self, isolation: str, partitions: Iterable[int] | None = None) -> dict[int, int]:
        """partition -> LSO (read_committed) or high watermark (read_uncommitted)."""
        c = self._consumers[isolation]
        return {p: c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1]
                for p in (self.partitions if partitions is None else partitions)}

    def __call__(self) -> tuple[dict[int, int], dict[int, int]]:
        """({partition: LSO}, {partition: high watermark})."""
        return self.offsets("read_committed"), self.offsets("read_uncommitted")

    def open_partitions(self) -> list[int]:
        """Partitions with a transaction open (their LSO below their high watermark)."""
        lso, hwm = self()
        return sorted(p for p in lso if lso[p] < hwm[p])

    def close(self) -> None:
        for c in self._consumers.values():
            c.close()

    def __enter__(self) -> TopicEnds:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def aborted_records(bootstrap: str, topic: str, lso: dict[int, int], hwm: dict[int, int],
                    timeout: float = 30.0) -> dict[int, int]:
    """partition -> how many data records in [lso, hwm) a read_committed reader skips: the
    records of the transactions that were open when (lso, hwm) was taken and later aborted.
    Ask once those transactions are over (the LSO past `hwm`): the broker's own account of
    whether a restart aborted or committed what a killed writer left open."""
    wanted = {p: (lso[p], hwm[p]) for p in lso if lso[p] < hwm[p]}
    seen: dict[str, dict[int, int]] = {}
    for iso in ("read_uncommitted", "read_committed"):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txnwatch-aborted", "isolation.level": iso,
                      "enable.auto.commit": False, "enable.partition.eof": True, "log_level": 3})
        try:
            c.assign([TopicPartition(topic, p, lo) for p, (lo, _hi) in wanted.items()])
            counts, done = dict.fromkeys(wanted, 0), set()
            deadline = time.monotonic() + timeout
            while len(done) < len(wanted):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{topic}: reading [LSO, HWM) {wanted} ({iso}) took over {timeout:.0f}s")
                msg = c.poll(0.5)
                if msg is None:
                    continue
                p = msg.partition()
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        done.add(p)         # the end (read_committed: the LSO, already past hwm)
                        continue
                    raise RuntimeError(f"{topic}[{p}]: {msg.error()}")
                if msg.offset() < wanted[p][1]:
                    counts[p] += 1
                else:
                    done.add(p)
            seen[iso] = counts
        finally:
            c.close()
    return {p: seen["read_uncommitted"][p] - seen["read_committed"][p] for p in wanted}


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """partition -> (LSO, HWM) as a read_committed / read_uncommitted consumer sees them."""
    with TopicEnds(bootstrap, topic, partitions) as ends:
        lso, hwm = ends()
    return {p: (lso[p], hwm[p]) for p in lso}


class ProducerProcess:
    """A `txnwatch_dev.transactions.txn_producer` child process with line-based progress."""

    def __init__(self, bootstrap: str, topic: str, transactional_id: str, action: str = "commit",
                 count: int = 1, partition: int | None = None, then_hang: bool = False,
                 records: int = 1, interval: float = 0.0, timeout_ms: int = 60000) -> None:
        cmd = [sys.executable, "-m", "txnwatch_dev.transactions.txn_producer", "--bootstrap", bootstrap,
               "--topic", topic, "--transactional-id", transactional_id, "--action", action,
               "--count", str(count), "--records", str(records), "--interval", str(interval),
               "--transaction-timeout-ms", str(timeout_ms)]
        if partition is not None:
            cmd += ["--partition", str(partition)]
        if then_hang:
            cmd.append("--then-hang")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.lines: list[str] = []
        # Lines are read by a thread of their own. (Waiting with select() on the pipe and then
        # readline() lost lines: two printed together, e.g. "committed 2" and "open", went
        # into the reader's buffer at once, and select() then had nothing more to report.)
        self._seen = threading.Condition()
        self._eof = False
        threading.Thread(target=self._read_lines, daemon=True).start()

    def _read_lines(self) -> None:
        for line in self.proc.stdout:
            with self._seen:
                self.lines.append(line.strip())
                self._seen.notify_all()
        with self._seen:
            self._eof = True
            self._seen.notify_all()

    def wait_line(self, prefix: str, timeout: float = 60.0) -> str:
        """Block until the child prints a line starting with `prefix` (reads stdout)."""
        deadline = time.monotonic() + timeout
        with self._seen:
            while True:
                found = next((line for line in self.lines if line.startswith(prefix)), None)
                left = deadline - time.monotonic()
                if found is not None:
                    return found
                if self._eof or left <= 0:
                    break
                self._seen.wait(left)
        err = self.proc.stderr.read() if self.proc.poll() is not None else ""
        raise TimeoutError(f"producer never printed {prefix!r}; lines={self.lines} stderr={err[-2000:]}")

    def wait(self, timeout: float = 60.0) -> int:
        rc = self.proc.wait(timeout)
        if rc != 0:
            raise RuntimeError(f"producer exited {rc}: {self.proc.stderr.read()[-2000:]}")
        return rc

    def kill(self) -> None:
        """SIGKILL mid-transaction: the coordinator aborts it at its timeout."""
        kill_group(self.proc)


def commit_group_offset(bootstrap: str, group: str, topic: str, partition: int, offset: int,
                        config: dict | None = None) -> None:
    """Commit `offset` for a consumer group, as a read_committed consumer of it would."""
    commit_group_offsets(bootstrap, group, [(topic, partition, offset)], config)


def commit_group_offsets(bootstrap: str, group: str, offsets: Iterable[tuple[str, int, int] | tuple[str, int, int, str]],
                         config: dict | None = None) -> None:
    """Commit (topic, partition, offset[, metadata])s for a consumer group through a consumer's commit.
    (Not the admin API's AlterConsumerGroupOffsets: librdkafka can abort the process when a
    coordinator moves under it, confluentinc/librdkafka#3663.)"""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    loading = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
               KafkaError.COORDINATOR_NOT_AVAILABLE)
    tps = [TopicPartition(t, p, o, metadata=m[0]) if m else TopicPartition(t, p, o) for t, p, o, *m in offsets]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_committed", **(config or {})})

    def commit() -> bool:
        try:
            c.commit(offsets=tps, asynchronous=False)
            return True
        except KafkaException as exc:
            # NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS on a broker that just started:
            # __consumer_offsets is still being loaded; a consumer would retry, so do we
            if exc.args and exc.args[0].code() in loading:
                return False
            raise

    try:
        wait_for(commit, 30, what=f"the coordinator of group {group} to accept a commit")
    finally:
        c.close()
