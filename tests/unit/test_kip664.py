"""The KIP-664 path on the parsed responses' shapes (kafka-python's own result types)."""

from kafka.admin._transactions import (
    PartitionProducerState,
    ProducerState,
    TransactionDescription,
    TransactionListing,
    TransactionState,
)
from kafka.structs import TopicPartition

from txnwatch.apps import AppResolver
from txnwatch.exporter.poll import derive
from txnwatch.kafka.kafka_python import kafka_python_config
from txnwatch.kafka.kip664 import (
    TransactionAPI,
    capabilities_from_api_versions,
    descriptions_from_response,
    duration_filter_supported,
    list_request,
    listings_from_response,
    listings_of,
    producers_from_response,
)


def test_capabilities():
    assert capabilities_from_api_versions({0: (0, 9), 61: (0, 0), 65: (0, 0), 66: (0, 1)}) == \
        {"list_transactions": True, "describe_transactions": True, "describe_producers": True}
    assert capabilities_from_api_versions({0: (0, 9), 3: (0, 12)}) == \
        {"list_transactions": False, "describe_transactions": False, "describe_producers": False}


def test_end_to_end_derivation_from_response_shapes():
    now = 10_000_000
    listings = listings_from_response({
        1: [TransactionListing("orders-7f3a2c1e-1111-2222-3333-444455556666-0", 1001, TransactionState.ONGOING),
            TransactionListing("idle-writer", 1002, TransactionState.COMPLETE_COMMIT)],
        2: [TransactionListing("flink-sink-3-77", 1003, TransactionState.PREPARE_COMMIT)]})
    assert {(t.transactional_id, t.state) for t in listings} == {
        ("orders-7f3a2c1e-1111-2222-3333-444455556666-0", "Ongoing"), ("idle-writer", "CompleteCommit"),
        ("flink-sink-3-77", "PrepareCommit")}
    descs = descriptions_from_response({
        "orders-7f3a2c1e-1111-2222-3333-444455556666-0": TransactionDescription(
            1, TransactionState.ONGOING, 1001, 4, 60_000, now - 75_000,
            {TopicPartition("orders", 0), TopicPartition("orders", 3)}),
        "flink-sink-3-77": TransactionDescription(2, TransactionState.PREPARE_COMMIT, 1003, 0, 900_000, now - 1_000,
                                                  {TopicPartition("out", 1)})})
    txns = derive.open_transactions(descs.values(), AppResolver(), now)
    assert [(t.app, t.age_seconds, t.headroom_seconds) for t in txns] == [("orders", 75, -15), ("flink-sink", 1, 899)]
    assert txns[0].partitions == (("orders", 0), ("orders", 3))

    producers = producers_from_response({
        TopicPartition("orders", 0): PartitionProducerState([ProducerState(1001, 4, 10, now - 1_200_000, 3, 500)]),
        TopicPartition("orders", 1): PartitionProducerState([ProducerState(4242, 0, 3, now - 1_200_000, 3, 77),
                                                             ProducerState(5, 0, 3, now - 1_200_000, 3, -1)])})
    cands = derive.hanging_candidates(producers, 900_000, now)
    assert {(c.topic, c.partition, c.producer_id) for c in cands} == {("orders", 0, 1001), ("orders", 1, 4242)}
    hanging = derive.find_hanging(cands, {1001: "orders-7f3a2c1e-1111-2222-3333-444455556666-0"}, descs, now)
    assert [(h.topic, h.partition, h.start_offset, h.reason) for h in hanging] == [
        ("orders", 1, 77, "no_transactional_id")]


def test_kafka_python_config_maps_security_settings():
    cfg = kafka_python_config({"bootstrap.servers": "a:1,b:2", "security.protocol": "SASL_PLAINTEXT",
                               "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u", "sasl.password": "p",
                               "linger.ms": "5"}, timeout=5)
    assert cfg["bootstrap_servers"] == ["a:1", "b:2"]
    assert (cfg["security_protocol"], cfg["sasl_mechanism"], cfg["sasl_plain_username"],
            cfg["sasl_plain_password"]) == ("SASL_PLAINTEXT", "SCRAM-SHA-256", "u", "p")
    assert "linger.ms" not in cfg and "linger_ms" not in cfg and "ssl_context" not in cfg
    oauth = kafka_python_config({"bootstrap.servers": "a:1", "security.protocol": "SASL_PLAINTEXT",
                                 "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token": "tok123"}, timeout=5)
    assert oauth["sasl_oauth_token_provider"].token() == "tok123"
    assert "tok123" not in repr(oauth)


def test_kafka_python_tls_means_what_librdkafka_means():
    """One SSLContext made from librdkafka's TLS properties: the system CAs for 'probe', hostname
    checks by ssl.endpoint.identification.algorithm, none at all without verification."""
    import ssl

    cfg = kafka_python_config({"bootstrap.servers": "a:1", "security.protocol": "sasl_ssl",
                               "sasl.mechanisms": "scram-sha-512", "ssl.ca.location": "probe",
                               "ssl.endpoint.identification.algorithm": "none"}, timeout=5)
    # librdkafka takes any case; kafka-python compares upper case
    assert (cfg["security_protocol"], cfg["sasl_mechanism"]) == ("SASL_SSL", "SCRAM-SHA-512")
    assert "ssl_cafile" not in cfg            # 'probe': the system's CA store
    ctx = cfg["ssl_context"]
    assert ctx.check_hostname is False and ctx.verify_mode == ssl.CERT_REQUIRED
    ctx = kafka_python_config({"bootstrap.servers": "a:2", "security.protocol": "SSL",
                               "enable.ssl.certificate.verification": "false"}, timeout=5)["ssl_context"]
    assert ctx.verify_mode == ssl.CERT_NONE and ctx.check_hostname is False
    default = kafka_python_config({"bootstrap.servers": "a:3", "security.protocol": "SSL"}, timeout=5)["ssl_context"]
    assert default.check_hostname is True     # librdkafka's default: https


def test_a_tls_setting_that_cannot_load_is_named():
    import pytest

    from txnwatch.kafka.login import LoginSettingsError

    with pytest.raises(LoginSettingsError) as err:
        kafka_python_config({"bootstrap.servers": "a:4", "security.protocol": "SSL",
                             "ssl.ca.location": "/nonexistent/ca.pem"}, timeout=5)
    assert err.value.key == "ssl.ca.location" and err.value.cause == "login_config"


class FakeAdmin:
    """Records the calls TransactionAPI makes; answers with kafka-python's result shapes."""

    def __init__(self, unknown: set[str] = frozenset()) -> None:
        self.calls: list[tuple] = []
        self.unknown = unknown

    def list_transactions(self, **kwargs):
        self.calls.append(("list", kwargs))
        return {1: [TransactionListing("a", 1, TransactionState.ONGOING)]}

    def describe_transactions(self, ids):
        from kafka.errors import TransactionalIdNotFoundError
        self.calls.append(("describe", list(ids)))
        if self.unknown & set(ids):
            raise TransactionalIdNotFoundError(sorted(self.unknown & set(ids))[0])
        return {t: TransactionDescription(1, TransactionState.ONGOING, 1, 0, 60_000, 0, set()) for t in ids}


def api_with(admin: FakeAdmin, duration_filter: bool = False) -> TransactionAPI:
    api = TransactionAPI({}, 5)
    api._admin = admin
    api.duration_filter = duration_filter
    return api


def test_open_states_are_filtered_by_the_coordinator_and_kip994_only_when_the_broker_has_it():
    admin = FakeAdmin()
    api_with(admin).list_transactions(derive.OPEN_STATES, min_duration_ms=5000)        # Kafka < 3.8
    api_with(admin, duration_filter=True).list_transactions(derive.OPEN_STATES, min_duration_ms=5000)
    api_with(admin, duration_filter=True).list_transactions(derive.OPEN_STATES)         # 0: no filter
    states = sorted(derive.OPEN_STATES)
    assert [kw for _, kw in admin.calls] == [{"state_filters": states},
                                             {"state_filters": states, "duration_filter_ms": 5000},
                                             {"state_filters": states}]
    assert duration_filter_supported({66: (0, 1)}) and not duration_filter_supported({66: (0, 0)})
    assert not duration_filter_supported({0: (0, 9)})


def test_an_id_expired_since_it_was_listed_is_left_out_not_fatal():
    admin = FakeAdmin(unknown={"gone"})
    out = api_with(admin).describe_transactions(["a", "gone", "b"])
    assert sorted(out) == ["a", "b"]
    assert admin.calls[0] == ("describe", ["a", "gone", "b"])          # one request, then one by one
    assert [c for c in admin.calls[1:]] == [("describe", ["a"]), ("describe", ["gone"]), ("describe", ["b"])]


def test_a_list_request_asks_the_lowest_version_that_carries_its_filters():
    """(`_min_version`: the floor kafka-python's version negotiation keeps to.)"""
    plain = list_request({"state_filters": ["Ongoing", "PrepareCommit"]})
    assert plain._min_version == 0 and list(plain.state_filters) == ["Ongoing", "PrepareCommit"]
    assert list_request({"duration_filter_ms": 5000})._min_version == 1
    with_pattern = list_request({"duration_filter_ms": 5000, "transactional_id_pattern": "app-.*"})
    assert with_pattern._min_version == 2 and with_pattern.transactional_id_pattern == "app-.*"
    assert with_pattern.duration_filter == 5000


def test_every_brokers_listing_counts_once_and_a_brokers_error_raises_its_class():
    from types import SimpleNamespace

    from kafka.errors import BrokerResponseError

    def answer(code, *ids):
        return SimpleNamespace(error_code=code, transaction_states=[
            SimpleNamespace(transactional_id=t, producer_id=7, transaction_state="Ongoing") for t in ids])
    got = listings_of([answer(0, "a", "b"), answer(0, "c"), answer(0, "a")])
    assert sorted((t.transactional_id, t.state) for t in got) == [("a", "Ongoing"), ("b", "Ongoing"), ("c", "Ongoing")]
    try:
        listings_of([answer(0, "a"), answer(128)])
    except BrokerResponseError as exc:
        assert exc.errno == 128        # the refused id pattern list_transactions falls back from
    else:
        raise AssertionError("an error code must raise")
