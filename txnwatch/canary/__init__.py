"""A transactional canary: a probe that proves, every few seconds, that a transaction can
commit and become visible to read_committed consumers.

    rounds.py   the bookkeeping, free of I/O: what each round wrote, what became visible
    stats.py    the counters and histograms, and their rendering
    probe.py    the I/O: a transactional producer running rounds on its own thread and a
                read_committed consumer, made by the Kafka room (txnwatch/kafka/clients.py)
"""
