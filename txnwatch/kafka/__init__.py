"""The Kafka room: every call txnwatch makes to Kafka, for the exporter's poller and tap, the
canary, the Spark sink and `txnwatch check` alike, and every Kafka client txnwatch makes:
confluent-kafka's in clients.py, kafka-python's in kafka_python.py and kip664.py
(tests/unit/test_layers.py keeps it so: no module elsewhere makes one or uses kafka-python).

    clients.py        confluent-kafka's admin clients, consumers and producers, from the
                      caller's client properties
    admin.py          KafkaIO, the poller's calls: metadata, ListOffsets in both isolation
                      levels, consumer-group offsets, DescribeConfigs, LSO record timestamps,
                      gaps to the LSO holding only transaction markers
    kip664.py         TransactionAPI: KIP-664's ListTransactions, DescribeTransactions and
                      DescribeProducers, group types and finalized features (kafka-python)
    group_offsets.py  committed offsets of many groups in few requests (batched
                      FindCoordinator v4, OffsetFetch v8 per coordinator)
    metadata.py  list_offsets.py  offset_fetch.py
                      the requests txnwatch encodes and decodes itself, on wire.py
    request_path.py   which path a kind of request takes: txnwatch's own or librdkafka's
    kafka_python.py   the only module touching kafka-python's internals: client settings
                      mapped, ApiVersions, raw requests sent over its connections
    errors.py         PollError and the one `cause` vocabulary of failed calls
    answers.py        what the calls answer, as plain immutable values (the exporter's
                      snapshots keep them as they came)

The exporter, the canary and the Spark side stand above it; it imports none of them.
"""
