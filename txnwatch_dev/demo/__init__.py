"""`make demo` (`python -m txnwatch_dev.demo`, run.py), its faults, the Streams app and its outbox sink."""
