"""`txnwatch serve`: the Prometheus exporter, one layer per folder, over the Kafka room.

    Kafka ──► txnwatch/kafka/  every Kafka client call and client (beside the exporter: the
              │                canary and the Spark sink use it too); its answers are plain
              │                values (kafka/answers.py)
              ├──► poll/  the admin poller: schedule, pure derivations (derive.py), the
              │           findings worded for a person (findings.py), access findings, and
              │           the snapshot's families (render.py), once per poll
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

The rule (tests/unit/test_layers.py keeps it): serve/ and spark/ never import the Kafka
room, poll/, tap/ or runtime/, nor a Kafka client library, so no scrape can reach a Kafka
client; poll/ and tap/ never import serve/, spark/ or runtime/; only runtime/ imports every
layer. access.py (missing-ACL findings, pure) serves poll/ and tap/. Nothing below the
exporter imports it: not the Kafka room, nor the canary and the Spark side, which use that
room as the exporter does (runtime/ runs the canary; spark/ ingests the listener's events).
"""
