"""Causes of failed poll steps (txnwatch_poll_errors_total{cause}) from librdkafka errors."""

from confluent_kafka import KafkaError, KafkaException

from txnwatch.kafka.errors import PollError, classify, one_line


def cause(code) -> str:
    return classify(KafkaException(KafkaError(code)))


def test_causes():
    assert cause(KafkaError._AUTHENTICATION) == "auth"
    assert cause(KafkaError.SASL_AUTHENTICATION_FAILED) == "auth"
    assert cause(KafkaError.TOPIC_AUTHORIZATION_FAILED) == "authorization"
    assert cause(KafkaError.CLUSTER_AUTHORIZATION_FAILED) == "authorization"
    assert cause(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) == "authorization"
    assert cause(KafkaError._SSL) == "tls"
    assert cause(KafkaError._TRANSPORT) == "broker_unavailable"
    assert cause(KafkaError._TIMED_OUT) == "timeout"
    assert cause(KafkaError._NOENT) == "kafka_noent"
    assert cause(KafkaError.UNKNOWN_TOPIC_OR_PART) == "kafka_unknown_topic_or_part"
    assert classify(PollError("auth", "x")) == "auth"
    assert classify(TimeoutError()) == "timeout"
    assert classify(ValueError("x")) == "unexpected"


def test_one_line():
    assert one_line(KafkaException(KafkaError(KafkaError._SSL, "handshake failed"))) == "_SSL: handshake failed"
    assert one_line(PollError("auth", "authentication failed: x\nmore")) == "authentication failed: x"
    assert one_line(ValueError()) == "ValueError"
