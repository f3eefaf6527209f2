"""Spark's streaming trigger modes by name, and those whose batches do not measure lag.

A leaf, importing nothing of txnwatch: the listener reports a query's mode with these names
(spark_listener/trigger.py), and the exporter's page and the alert rules read the same
names, so a mode added here reaches all of them."""

from __future__ import annotations

# Spark's Trigger classes (org.apache.spark.sql.execution.streaming.*Trigger) by mode name.
KNOWN_MODES = ("ProcessingTime", "AvailableNow", "Once", "Continuous", "RealTime")
# Modes whose batches do not measure processing lag: batch duration and progress
# spacing follow the trigger by design.
LONG_BATCH_MODES = ("Continuous", "RealTime")
