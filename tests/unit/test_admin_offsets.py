"""A partition's offsets from its ListOffsets answers (txnwatch.kafka.admin)."""

from __future__ import annotations

from txnwatch.kafka.admin import partition_offsets
from txnwatch.kafka.answers import PartitionOffsets


def test_offsets_and_the_lso_capped_at_the_hwm():
    assert partition_offsets("t", 0, 10, 7) == PartitionOffsets("t", 0, 10, 7)
    assert partition_offsets("t", 0, 10, 12) == PartitionOffsets("t", 0, 10, 10)
    assert partition_offsets("t", 0, 0, 0) == PartitionOffsets("t", 0, 0, 0)


def test_an_answer_without_offsets_is_no_offset():
    """librdkafka's OFFSET_INVALID (-1001) for a partition whose leader just died, seen by a
    fresh run of test_cluster's dead-broker test: exported, it read as a high watermark of -1001."""
    assert partition_offsets("t", 1, -1001, -1001) is None
    assert partition_offsets("t", 1, 4, -1001) is None
    assert partition_offsets("t", 1, -1001, 4) is None
