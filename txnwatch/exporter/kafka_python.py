"""What txnwatch needs of kafka-python beyond its public API, in one place."""

from __future__ import annotations


def api_versions(admin) -> dict[int, tuple[int, int]]:
    """ApiVersions of the admin client's bootstrap broker: {api key: (min, max)}.

    Read from the raw answer: `KafkaAdminClient.api_versions()` maps every key to its
    ApiKey enum and raises ValueError for keys it does not know, which brokers newer than
    the library have (Kafka 4.4 lists key 93)."""
    data = getattr(getattr(admin, "_manager", None), "broker_version_data", None)
    raw = getattr(data, "api_versions", None)
    if raw is None:   # another kafka-python: its public call, with its limits
        raw = admin.api_versions()
    return {int(k): (int(v[0]), int(v[1])) for k, v in raw.items()}
