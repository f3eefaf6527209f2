"""The test and demo harness: Apache Kafka brokers from Maven Central (`kafka/`),
transactional workloads and clients, fault injection, the transaction scenario, the Flink
and Kafka Streams programs, and the demo.

Used by the test suite, the benchmarks and `make demo` from a checkout; not part of the
txnwatch package (not in its wheel or image), and nothing in `txnwatch` imports it. It
imports `txnwatch` like any user would.
"""
