"""RequestPath: when txnwatch's own request path is used, left, and tried again."""

import logging

from txnwatch.kafka.request_path import RequestPath


def test_untried_then_on_logs_once(caplog):
    path = RequestPath("partition offsets", "librdkafka's", recheck_calls=3)
    assert path.on is None and path.due()
    with caplog.at_level(logging.INFO, logger="txnwatch.kafka.request_path"):
        path.turn_on("one ListOffsets v11 per leader", 11)
        path.turn_on("one ListOffsets v11 per leader", 11)
    assert path.on is True and path.version == 11
    assert [r.getMessage() for r in caplog.records] == ["partition offsets: one ListOffsets v11 per leader"]


def test_off_for_a_while_is_tried_again_after_recheck_calls(caplog):
    path = RequestPath("cluster metadata", "librdkafka's", recheck_calls=3)
    assert path.due()
    with caplog.at_level(logging.INFO, logger="txnwatch.kafka.request_path"):
        path.turn_off("timed out")
        assert [path.due() for _ in range(3)] == [False, False, True]
        path.turn_off("timed out")       # the same reason again: not logged again
    assert path.on is False
    assert [r.getMessage() for r in caplog.records] == ["cluster metadata: librdkafka's (timed out)"]
    assert not path.due()


def test_off_for_good_is_never_tried_again():
    path = RequestPath("committed offsets", "one request per group", recheck_calls=1)
    path.turn_off("SASL mechanism kafka-python lacks", forever=True)
    assert not any(path.due() for _ in range(100))
