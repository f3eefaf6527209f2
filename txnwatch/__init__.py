"""txnwatch: monitoring for exactly-once (transactional) Kafka pipelines."""

__version__ = "0.1.0"
