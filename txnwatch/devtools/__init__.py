"""Development helpers: Apache Kafka brokers from Maven Central (`kafka/`), transactional
workloads, fault injection, the demo.

Used by the test suite, the benchmarks and `make demo`; never by the exporter itself.
"""
