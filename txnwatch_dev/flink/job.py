"""A PyFlink DataStream job with Flink's exactly-once KafkaSink, for tests and spikes:
read IN (read_committed), map each value (upper-case), write OUT in Kafka transactions
that commit on Flink's checkpoints.

    .venv-flink/bin/python -m txnwatch_dev.flink.job --bootstrap 127.0.0.1:9092 \
        --input in --output out --prefix job1 --checkpoint-ms 2000 --timeout-ms 60000 \
        --jars connector.jar:kafka-clients.jar:...      # the connector's jars (runtime.py)

It runs in .venv-flink (PyFlink's pins clash with PySpark's), where txnwatch is not
installed: it imports only the standard library and pyflink. It prints one line,
"running", once the job is submitted (nothing per record) and runs until killed.

Checkpoints go to --checkpoint-dir (kept on cancellation and on a crash) so that a new
process can resume from one with --restore <chk-N dir>: Flink's state (source offsets, the
sink's pre-committed transactions) lives only there, so a restart without it re-reads IN
from the start and is not exactly-once.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--prefix", required=True, help="the KafkaSink's transactional-id prefix")
    p.add_argument("--checkpoint-ms", type=int, default=2000)
    p.add_argument("--timeout-ms", type=int, default=60000, help="the sink producers' transaction.timeout.ms")
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--group", help="the source's consumer group (default: <prefix>-source)")
    p.add_argument("--naming", choices=("incrementing", "pooling"), default="incrementing",
                   help="the sink's TransactionNamingStrategy (flink-connector-kafka 4.0+)")
    p.add_argument("--extra-sink", action="append", default=[], metavar="OUTPUT:PREFIX:NAMING",
                   help="the same stream also to OUTPUT through a KafkaSink of its own (repeatable): "
                        "two naming strategies in one job share its start-up and its checkpoints")
    p.add_argument("--checkpoint-dir", help="a directory for retained checkpoints (default: Flink's, in memory)")
    p.add_argument("--restore", help="a retained checkpoint (chk-N directory) to resume from")
    p.add_argument("--stall-while", metavar="FILE",
                   help="subtask 0's map waits at its next record while FILE exists (and creates FILE.waiting "
                        "then): its checkpoint barrier waits behind it, the other subtasks go on")
    p.add_argument("--jars", default=os.environ.get("TXNWATCH_FLINK_JARS", ""),
                   help="the connector's jars, os.pathsep-separated (default: $TXNWATCH_FLINK_JARS)")
    args = p.parse_args(argv)
    args.sinks = [(args.output, args.prefix, args.naming)]
    for spec in args.extra_sink:
        parts = spec.split(":")
        if len(parts) != 3 or parts[2] not in ("incrementing", "pooling") or not all(parts):
            p.error(f"--extra-sink {spec!r}: want OUTPUT:PREFIX:NAMING, NAMING incrementing or pooling")
        args.sinks.append(tuple(parts))
    return args


def configuration(args: argparse.Namespace):
    """Flink settings of the local mini-cluster, set before it starts (restore, checkpoint
    storage and the Python workers' interpreter cannot be changed afterwards)."""
    from pyflink.common import Configuration

    conf = Configuration()
    # Python operators run in worker processes: this venv's interpreter, not the PATH's python
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    conf.set_string("execution.checkpointing.interval", f"{args.checkpoint_ms} ms")
    conf.set_string("execution.checkpointing.mode", "EXACTLY_ONCE")
    # The Python operator hands its output on per bundle (default: every 1 s), so with a
    # checkpoint every second or two the sink got each interval's records in one burst just
    # before the barrier and its transactions were open for ~200 ms. Short bundles keep
    # records flowing: a transaction is open from the first record after a checkpoint to
    # the next one, as in a Flink job whose operators run in the JVM.
    conf.set_string("python.fn-execution.bundle.time", str(max(20, min(100, args.checkpoint_ms // 10))))
    # The first run after a crash must not wait out a tight failure loop.
    conf.set_string("restart-strategy.type", "fixed-delay")
    conf.set_string("restart-strategy.fixed-delay.attempts", "3")
    conf.set_string("restart-strategy.fixed-delay.delay", "2 s")
    if args.checkpoint_dir:
        conf.set_string("execution.checkpointing.dir", "file://" + os.path.abspath(args.checkpoint_dir))
        conf.set_string("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION")
        conf.set_string("execution.checkpointing.num-retained", "3")
    if args.restore:
        conf.set_string("execution.state-recovery.path", "file://" + os.path.abspath(args.restore))
    return conf


def build(env, args: argparse.Namespace) -> None:
    """IN -> upper-case -> OUT (and each --extra-sink's OUTPUT), exactly once."""
    from pyflink.common import Types, WatermarkStrategy
    from pyflink.common.serialization import SimpleStringSchema
    from pyflink.datastream.connectors.base import DeliveryGuarantee
    from pyflink.datastream.connectors.kafka import (
        KafkaOffsetsInitializer,
        KafkaRecordSerializationSchema,
        KafkaSink,
        KafkaSource,
    )
    from pyflink.java_gateway import get_gateway

    source = (KafkaSource.builder()
              .set_bootstrap_servers(args.bootstrap)
              .set_topics(args.input)
              .set_group_id(args.group or f"{args.prefix}-source")
              .set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_value_only_deserializer(SimpleStringSchema())
              .set_property("isolation.level", "read_committed")
              .build())
    upper = (env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka-in")
             .map(_stallable_upper()(args.stall_while) if args.stall_while else lambda v: v.upper(),
                  output_type=Types.STRING())
             .name("upper"))
    # PyFlink's builder has no setter for the naming strategy: the Java builder's, via py4j.
    strategy = get_gateway().jvm.org.apache.flink.connector.kafka.sink.TransactionNamingStrategy
    for output, prefix, naming in args.sinks:
        serializer = (KafkaRecordSerializationSchema.builder()
                      .set_topic(output)
                      .set_value_serialization_schema(SimpleStringSchema())
                      .build())
        builder = (KafkaSink.builder()
                   .set_bootstrap_servers(args.bootstrap)
                   .set_record_serializer(serializer)
                   .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
                   .set_transactional_id_prefix(prefix)
                   .set_property("transaction.timeout.ms", str(args.timeout_ms)))
        builder._j_builder.setTransactionNamingStrategy(strategy.valueOf(naming.upper()))
        upper.sink_to(builder.build()).name(f"kafka-out-{prefix}")


def _stallable_upper():
    """The map of --stall-while (a class made here: pyflink is imported only once the job is built)."""
    from pyflink.datastream.functions import MapFunction

    class StallableUpper(MapFunction):
        """Upper-case; subtask 0 waits while `held` exists. A checkpoint triggered meanwhile
        cannot complete, while the other subtasks' sinks pre-commit for it and go on writing."""

        def __init__(self, held: str) -> None:
            self.held = held
            self.subtask = -1

        def open(self, runtime_context) -> None:
            self.subtask = runtime_context.get_index_of_this_subtask()

        def map(self, value):
            if self.subtask == 0 and os.path.exists(self.held):
                open(self.held + ".waiting", "a").close()
                while os.path.exists(self.held):
                    time.sleep(0.05)
            return value.upper()

    return StallableUpper


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyflink.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment(configuration(args))
    env.set_parallelism(args.parallelism)
    jars = [j for j in args.jars.split(os.pathsep) if j]
    if not jars:
        print("no connector jars: pass --jars or set TXNWATCH_FLINK_JARS", file=sys.stderr)
        return 2
    env.add_jars(*("file://" + os.path.abspath(j) for j in jars))
    build(env, args)
    client = env.execute_async(f"txnwatch-flink-{args.prefix}")
    print("running", flush=True)
    print(f"job id {client.get_job_id()}", file=sys.stderr, flush=True)
    # Until killed; a job that fails for good ends the process (non-zero).
    client.get_job_execution_result().result()
    return 1


if __name__ == "__main__":
    sys.exit(main())
