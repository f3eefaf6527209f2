"""The Kafka errors that mean a producer was fenced: another instance of its transactional
id took over, and this one can never commit again.

A leaf, importing nothing of txnwatch: the producer wrapper tells fencing apart with it, and
the alerts' and dashboards' PromQL (alerts/promql.py) matches the same names, so a name
added here reaches all of them."""

from __future__ import annotations

# librdkafka's error names, as the `error` label of kafka_producer_transaction_errors_total
# carries them: the broker's two and librdkafka's local one. The generated PromQL regex
# lists them in this order.
FENCING_ERRORS = ("PRODUCER_FENCED", "_FENCED", "INVALID_PRODUCER_EPOCH")
