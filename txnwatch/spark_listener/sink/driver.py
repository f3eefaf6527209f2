"""The driver side: the foreachBatch callables (ExactlyOnceKafkaSink, AtLeastOnceKafkaSink)
that lay a batch out over the output tasks, run them and report their transactions."""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from typing import Any

from txnwatch.kafka import clients
from txnwatch.producer import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
)

from . import jvm
from .executor import _plain_partition, write_partition
from .metrics import SinkMetrics
from .progress import TaskProgress, task_progress
from .settings import (
    DISCOVER,
    NAME_RE,
    PARTITIONINGS,
    RESULT_SCHEMA,
    WRITERS,
    ProducerFactory,
    SinkConfig,
    SinkLayoutError,
    UnsafeSinkSettings,
    check_settings,
    default_progress_topic,
    discover_broker_max_timeout_ms,
    input_partitions,
    task_producer,
)

log = logging.getLogger(__name__)

MetricsTarget = Any   # see metrics.py: a listener, a state, a Forwarder, ForwardTo, a URL or a callable(event)


def ensure_progress_topic(bootstrap_servers: str, topic: str, num_tasks: int,
                          client_config: dict | None = None, timeout: float = 30.0) -> int:
    """Create the compacted progress topic with num_tasks partitions if missing; reject one
    with fewer partitions than tasks. Returns its partition count."""
    from confluent_kafka.admin import NewTopic

    admin = clients.admin_client({"bootstrap.servers": bootstrap_servers, **(client_config or {})})
    md = admin.list_topics(timeout=timeout)
    if topic not in md.topics or md.topics[topic].error is not None:
        fut = admin.create_topics([NewTopic(topic, num_tasks, -1, config={"cleanup.policy": "compact"})],
                                  request_timeout=timeout)[topic]
        try:
            fut.result()
        except Exception as exc:  # noqa: BLE001 - a concurrent creation is fine
            if "already exists" not in str(exc).lower():
                raise
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            md = admin.list_topics(topic, timeout=timeout)
            if topic in md.topics and len(md.topics[topic].partitions) >= num_tasks:
                break
            time.sleep(0.1)
    n = len(admin.list_topics(topic, timeout=timeout).topics[topic].partitions)
    if n < num_tasks:
        raise UnsafeSinkSettings(
            f"progress topic {topic} has {n} partitions but num_tasks={num_tasks}: each output task "
            "needs its own partition; add partitions or use another progress topic")
    return n


class _Sink:
    """What the two sinks share: the foreachBatch call shape and result handling."""

    def __init__(self, name: str, bootstrap_servers: str, topic: str, num_tasks: int) -> None:
        if not NAME_RE.match(name or ""):
            raise UnsafeSinkSettings(f"sink name {name!r} must match {NAME_RE.pattern}")
        if not isinstance(num_tasks, int) or num_tasks < 1:
            raise UnsafeSinkSettings(f"num_tasks must be a positive integer, got {num_tasks!r}")
        self.name = name
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.num_tasks = num_tasks
        self.stats: dict[str, int] = {}
        self.task_seconds: list[float] = []     # time in the write function, tasks that wrote

    def _count(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n

    @staticmethod
    def _columns(df: Any) -> list[str]:
        cols = df.columns
        if "value" not in cols:
            raise ValueError(f"the batch needs a `value` column (and optionally `key`); got {cols}")
        return ["key", "value"] if "key" in cols else ["value"]

    @classmethod
    def _prepare(cls, df: Any, num_tasks: int) -> Any:
        cols = cls._columns(df)
        return df.select(*cols).repartition(num_tasks, cols[0])


class ExactlyOnceKafkaSink(_Sink):
    """foreachBatch writer: `query = df.writeStream.foreachBatch(sink).start()`.

    The batch DataFrame needs a `value` column (string or binary) and optionally `key`.
    Parameters:
    - name: the sink's name; transactional ids are `txnwatch.<name>.<task index>`, the
      progress group `txnwatch.<name>`, the `app` label of its metrics is `name`.
    - num_tasks: output tasks (= transactional ids) per batch; fixed for the checkpoint.
    - progress_topic: default `txnwatch-progress.<name>`, created compacted with
      num_tasks partitions; one per sink.
    - transaction_timeout_ms / trigger_interval_seconds / broker_max_timeout_ms: checked
      by `check_settings` (broker_max_timeout_ms="discover" asks DescribeConfigs; None
      skips the cap check).
    - metrics: where the `producer_transactions` event of every batch goes: a
      TxnWatchListener, a SparkQueryState or a callable(event) of this process, or the
      exporter to forward to (`ForwardTo(url, token)`, its URL, a Forwarder, a listener
      attached with forward_url). Under Spark Connect, which runs foreachBatch in the
      server's Python process, only the latter travel (metrics.py).
    - producer_config / client_config: extra librdkafka settings (client_config is also
      used by the progress consumer: security settings go there).
    - partitioning: "key" (default) hashes each batch on `key` into num_tasks output
      tasks (a shuffle); "input" writes the batch's own partitions as they are, task i =
      partition i, with no shuffle, when the batch has at most num_tasks partitions (else
      it falls back to "key" for that batch, counted in stats["layout_fallback"]). "input"
      is exactly once only while a replayed batch gets the partitioning its first attempt
      had: true of a stateful query's shuffle partitions (fixed by the checkpoint) and of
      Spark's Kafka source without minPartitions (one partition per topic-partition
      range, from the offset log); not across a change of the query's plan while a
      batch is pending. See docs/spark-sink.md.
    - warm_spares: each Python worker keeps, for every task id it has written, a spare
      producer connected to the cluster but not initialised, so that taking the id over
      from another worker (Spark runs a task on whichever worker is idle) costs an
      InitProducerId, not a new client's connections too. False to save the connections.
    - producer_factory: makes each task's TransactionalProducer from (SinkConfig, task
      index); picklable, as it travels to the executors. The default is a plain one with
      SinkConfig.producer_conf(task); a subclass can add behaviour around the sink's calls.
      Only the Python writer makes producers this way: another factory selects it.
    - writer: "auto" (default) writes each batch from Spark's JVM with Kafka's Java producer
      (jvm.py: the jar this package ships, on the session's `spark.jars`) where it can, and
      from Python workers otherwise: when the jar does not load (said once in the log, and
      in `writer_in_use`), for a producer_factory of its own, or for librdkafka settings the
      Java client names differently. "jvm" insists on the JVM writer (an error says why it
      cannot run), "python" on the Python one. Both write the same transactions, markers and
      progress, so a batch written by one is replayed by the other as committed.
    - jvm_client_config: Kafka client settings in the Java client's names (security, for
      instance) for the JVM writer, in place of client_config's librdkafka ones.
    - jvm_idle_close_seconds: the JVM writer keeps each task id's initialised producer in its
      executor between batches, and closes one left idle this long (a stopped query's, or an
      id the executor no longer gets); the next batch of that id then pays an init.
    """

    def __init__(self, name: str, bootstrap_servers: str, topic: str, *, num_tasks: int = 2,
                 progress_topic: str | None = None,
                 transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
                 trigger_interval_seconds: float | None = None,
                 broker_max_timeout_ms: int | str | None = DISCOVER,
                 producer_config: dict | None = None, client_config: dict | None = None,
                 metrics: MetricsTarget | None = None, commit_timeout_seconds: float = 60.0,
                 create_progress_topic: bool = True, partitioning: str = "key", warm_spares: bool = True,
                 producer_factory: ProducerFactory = task_producer, writer: str = "auto",
                 jvm_client_config: dict | None = None, jvm_idle_close_seconds: float = 600.0) -> None:
        super().__init__(name, bootstrap_servers, topic, num_tasks)
        if writer not in WRITERS:
            raise UnsafeSinkSettings(f"writer must be one of {', '.join(WRITERS)}, got {writer!r}")
        if partitioning not in PARTITIONINGS:
            raise UnsafeSinkSettings(f"partitioning must be one of {', '.join(PARTITIONINGS)}, got {partitioning!r}")
        self.partitioning = partitioning
        if broker_max_timeout_ms == DISCOVER:
            broker_max_timeout_ms = discover_broker_max_timeout_ms(bootstrap_servers,
                                                                   admin_config=client_config)
        self.broker_max_timeout_ms = broker_max_timeout_ms
        self.warnings = check_settings(transaction_timeout_ms, trigger_interval_seconds,
                                       broker_max_timeout_ms, num_tasks, producer_config)
        for w in self.warnings:
            log.warning("txnwatch sink %s: %s", name, w)
        self.progress_topic = progress_topic or default_progress_topic(name)
        self.config = SinkConfig(
            name=name, bootstrap_servers=bootstrap_servers, topic=topic, num_tasks=num_tasks,
            progress_topic=self.progress_topic, transaction_timeout_ms=int(transaction_timeout_ms),
            producer_config=tuple(sorted((producer_config or {}).items())),
            client_config=tuple(sorted((client_config or {}).items())),
            commit_timeout_seconds=commit_timeout_seconds, warm_spares=bool(warm_spares),
            producer_factory=producer_factory)
        if create_progress_topic:
            ensure_progress_topic(bootstrap_servers, self.progress_topic, num_tasks, client_config)
        self.metrics = SinkMetrics(metrics, name)
        self.writer = writer
        if not jvm_idle_close_seconds > 0:
            raise UnsafeSinkSettings(f"jvm_idle_close_seconds must be > 0, got {jvm_idle_close_seconds!r}")
        self.jvm_client_config = dict(jvm_client_config) if jvm_client_config is not None else None
        self.jvm_settings = jvm.JvmSettings(self.jvm_client_config, float(jvm_idle_close_seconds))
        self.writer_in_use = self._choose_writer()
        self._checked = False
        self._reported: OrderedDict[str, None] = OrderedDict()
        self.last_results: list[dict] = []

    # ------------------------------------------------------------------ driver API
    def progress(self) -> dict[int, TaskProgress]:
        """Committed progress per progress-topic partition (read from the driver)."""
        c = clients.consumer(self.config.consumer_conf())
        try:
            md = c.list_topics(self.progress_topic, timeout=10)
            parts = sorted(md.topics[self.progress_topic].partitions)
            return {p: task_progress(c, self.config, p) for p in parts}
        finally:
            c.close()

    def check_layout(self, batch_id: int) -> None:
        """Refuse to replay a batch that was written with another number of tasks."""
        for task, prog in self.progress().items():
            m = prog.marker
            if m is None:
                continue
            if m.batch >= batch_id and (m.tasks != self.num_tasks or task >= self.num_tasks):
                raise SinkLayoutError(
                    f"sink {self.name}: batch {m.batch} was written by task {task} of {m.tasks} tasks, "
                    f"and batch {batch_id} is being (re)played with num_tasks={self.num_tasks}. Output "
                    f"tasks hash the batch by key, so another task count would write some rows twice "
                    f"and lose others. Restart with num_tasks={m.tasks} until the query has moved past "
                    f"batch {m.batch}, then change it.")

    def _choose_writer(self) -> str:
        """The writer these settings allow ("jvm" or "python"); "jvm" may still fall back to
        "python" at the first batch, when the session's Spark cannot load the jar."""
        if self.writer == "python":
            return "python"
        why = ("it makes producers with a producer_factory of its own"
               if self.config.producer_factory is not task_producer else
               jvm.unsupported_settings(self.config, self.jvm_client_config))
        if why is None and not jvm.JAR.is_file():
            why = f"its jar is missing ({jvm.JAR}; a source checkout builds it with scripts/build-sink-jar.sh)"
        if why is None:
            return "jvm"
        if self.writer == "jvm":
            raise UnsafeSinkSettings(f"sink {self.name}: the JVM writer cannot run: {why}")
        log.info("sink %s: writing from Python workers: %s", self.name, why)
        return "python"

    def __call__(self, df: Any, batch_id: int) -> None:
        if not self._checked:
            self.check_layout(batch_id)
            self._checked = True
        prepared, tasks = self._layout(df)
        if self.writer_in_use == "jvm":
            try:
                results = jvm.write(prepared, self.config, int(batch_id), self.jvm_settings)
            except Exception as exc:
                if not jvm.is_missing(exc):
                    raise
                if self.writer == "jvm":
                    raise jvm.JvmWriterUnavailable(
                        f"sink {self.name}: this session's Spark cannot load the JVM writer: put {jvm.JAR} and "
                        "Spark's Kafka connector on its spark.jars (of the Spark Connect server, under Connect), "
                        f"or use writer='python' ({str(exc).splitlines()[0]})") from exc
                log.warning("sink %s: this session's Spark cannot load the JVM writer (%s); writing from Python "
                            "workers from now on. Put %s on spark.jars for the JVM writer.", self.name,
                            str(exc).splitlines()[0], jvm.JAR)
                self.writer_in_use = "python"
            else:
                self._handle(batch_id, results, tasks)
                return
        from functools import partial

        fn = partial(write_partition, self.config, int(batch_id))
        rows = prepared.mapInArrow(fn, RESULT_SCHEMA).collect()
        self._handle(batch_id, [r.asDict() for r in rows], tasks)

    def write_stream(self, df: Any) -> Any:
        """`df.writeStream` writing through this sink as the query's own sink: each batch is
        written in the batch's own job, as Spark's Kafka sink writes, with no foreachBatch call
        and no second job (the faster form; the same transactions, markers, progress and batch
        ids, so a query can move between the two forms). Add the rest and start it:

            sink.write_stream(df).option("checkpointLocation", ...).trigger(...).start()

        Needs the JVM writer (`writer_in_use == "jvm"`) on the session's spark.jars. The
        batches' transactions reach `metrics` through the query's progress events (one
        listener per session, reporting each sink name's batches to the newest sink object of
        that name)."""
        if self.writer_in_use != "jvm":
            raise UnsafeSinkSettings(f"sink {self.name}: write_stream needs the JVM writer, and this sink writes "
                                     "from Python workers (see writer_in_use and the log); use foreachBatch(sink)")
        from .stream import listen

        listen(df.sparkSession, self.name, self._report_stream)
        opts = jvm.options(self.config, None, self.jvm_settings, self.partitioning)
        return df.select(*self._columns(df)).writeStream.format(jvm.FORMAT).options(**opts)

    def _report_stream(self, batch_id: int, results: list[dict]) -> None:
        """A streaming write's batch, from its progress event (stream.py)."""
        self._handle(batch_id, results, self.num_tasks if self.partitioning == "key" else len(results))

    def _layout(self, df: Any) -> tuple[Any, int]:
        """The batch as the write tasks get it, and how many tasks that is."""
        if self.partitioning == "input":
            n = input_partitions(df)
            if n is not None and 1 <= n <= self.num_tasks:
                return df.select(*self._columns(df)), n
            self._count("layout_fallback")
        return self._prepare(df, self.num_tasks), self.num_tasks

    def _handle(self, batch_id: int, results: list[dict], expected_tasks: int | None = None) -> None:
        """One batch's task results; `expected_tasks` the tasks its layout made (num_tasks by default)."""
        expected_tasks = self.num_tasks if expected_tasks is None else expected_tasks
        tasks = sorted(r["task"] for r in results)
        if tasks != list(range(expected_tasks)):
            # Output already committed stays exactly once; this says the layout assumption broke.
            log.error("sink %s batch %s: results from tasks %s, expected 0..%d", self.name, batch_id,
                      tasks, expected_tasks - 1)
            self._count("layout_mismatch")
        self.last_results = results
        self._count("batches")
        records: list[dict] = []
        self.task_seconds.extend(float(r.get("seconds") or 0.0) for r in results if r["status"] == "committed")
        for r in results:
            self._count(f"tasks_{r['status']}")
            self._count("rows", int(r["rows"] or 0))
            for rec in json.loads(r["records"] or "[]"):
                key = f"{rec.get('attempt')}:{rec.get('outcome')}"
                if key in self._reported:
                    continue           # a dead attempt reported twice (skipped replays)
                self._reported[key] = None
                while len(self._reported) > 10_000:
                    self._reported.popitem(last=False)
                self._count(f"transactions_{rec['outcome']}")
                if rec.get("error"):
                    self._count(f"error_{rec['error']}")
                records.append({k: rec[k] for k in ("transactional_id", "outcome", "duration_seconds",
                                                    "commit_seconds", "timeout_ms", "error")})
        if records and self.metrics:
            self.metrics.emit({"type": "producer_transactions", "app": self.name, "timestamp": time.time(),
                               "records": records})


class AtLeastOnceKafkaSink(_Sink):
    """The same write path without transactions (idempotent producer, plain produce and
    flush): the guarantee of Spark's own Kafka sink (at least once) on the Python write path,
    which separates the cost of transactions from that of foreachBatch in bench_sink.py."""

    def __init__(self, name: str, bootstrap_servers: str, topic: str, *, num_tasks: int = 2,
                 producer_config: dict | None = None, client_config: dict | None = None) -> None:
        super().__init__(name, bootstrap_servers, topic, num_tasks)
        conf = {"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "partitioner": "murmur2_random",
                "enable.idempotence": True, **(client_config or {}), **(producer_config or {})}
        self.conf = tuple(sorted(conf.items()))

    def __call__(self, df: Any, batch_id: int) -> None:
        from functools import partial

        fn = partial(_plain_partition, self.conf, self.topic)
        rows = self._prepare(df, self.num_tasks).mapInArrow(fn, RESULT_SCHEMA).collect()
        self._count("batches")
        for r in rows:
            self._count("rows", int(r["rows"] or 0))
            if r["rows"]:
                self.task_seconds.append(float(r["seconds"] or 0.0))
