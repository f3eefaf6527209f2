"""Remediation: `txnwatch abort`, the command an on-call engineer runs to end a transaction
that blocks read_committed readers.

It stands beside `check.py`, apart from the exporter, which never imports it and so stays
read-only (no Write or Alter ACL). It reads the cluster through the Kafka room and the
poller's own find-hanging logic (survey.py), decides what it may do as pure functions of that
reading (plan.py), shows the plan (report.py), and writes only through one module
(markers.py: abort markers written straight to a partition, as `kafka-transactions.sh abort`
does), recording every action it takes (audit.py). command.py runs the steps in order.
"""
