"""`txnwatch serve`: the Prometheus exporter, one layer per folder.

    Kafka ──► kafka/   every Kafka client call (librdkafka admin, kafka-python for KIP-664
              │        and batched group offsets); errors.py: PollError and the one `cause`
              │        vocabulary; kafka_python.py: the only module touching kafka-python's
              │        internals
              ├──► poll/  the admin poller: schedule, pure derivations (derive.py), access
              │           findings, and the snapshot's families (render.py), once per poll
              └──► tap/   the transaction-log tap: decoder, state machine, I/O thread, render
                        │
                        ▼  model.py: immutable snapshots; health.py: per-source health
    runtime/   wiring: one ClusterRuntime per cluster (poller, tap, canary), in worker
               processes (worker.py, supervisor.py) that publish files (published.py), and
               the exporter process (service.py: `serve`)
                        │  rendered chunks, page digests, status
                        ▼
    serve/     HTTP: the Flask app, the page, the scrape-time collector, the WSGI server
    spark/     the Spark ingest endpoint and its blocked-query matching and page part

The rule (tests/unit/test_layers.py keeps it): serve/ and spark/ never import kafka/, poll/,
tap/ or runtime/, so no scrape can reach a Kafka client; kafka/ imports nothing of the
exporter but the model; poll/ and tap/ never import serve/, spark/ or runtime/; only
runtime/ imports every layer. access.py (missing-ACL findings, pure) serves poll/ and tap/.
Outside the exporter, the Spark sink (on executors) uses kafka/ and the model only.
"""
