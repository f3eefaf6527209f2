"""The test and demo harness, in rooms:

    kafka/           Apache Kafka brokers from Maven Central (KRaft nodes, clusters, secured nodes)
    transactions/    transactional clients (Java, librdkafka), workloads, hanging and raw
                     transactions, the transaction log dump, the transaction scenario
    observability/   the Prometheus side: the exporter as a process, Prometheus, Alertmanager,
                     scrapes parsed, the naming rules, screenshots of pages
    demo/            `make demo` (`python -m txnwatch_dev.demo`): its fault plan and injector,
                     the Kafka Streams app, the outbox sink, the status line
    flink/           PyFlink jobs with Flink's exactly-once KafkaSink
    spark/           the reference Spark pipeline with faults in its exactly-once sink's tasks
                     (`python -m txnwatch_dev.spark.pipeline`: a task failing after producing,
                     pausing before its commit or before its marker)

and, shared by all: net.py (ports, waiting), procs.py (stopping child processes), jvm.py
(JVM flags by profile), pki.py (test certificates), proxy.py (a TCP proxy for faults),
gotools.py (tools built from the Go module proxy).

Used by the test suite, the benchmarks and `make demo` from a checkout; not part of the
txnwatch package (not in its wheel or image), and nothing in `txnwatch` imports it. It
imports `txnwatch` like any user would.
"""
