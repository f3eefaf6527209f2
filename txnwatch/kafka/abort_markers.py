"""The one Kafka call in txnwatch that changes a cluster: ABORT markers written straight to a
partition (WriteTxnMarkers through kafka-python's `abort_transaction`, what
`kafka-transactions.sh abort` sends). Only `txnwatch abort` imports this module; the exporter
never does, so it needs no Alter ACL and cannot write."""

from __future__ import annotations

from collections.abc import Mapping

from .errors import PollError
from .kafka_python import close_admin, kafka_python_config


class MarkerWriter:
    """A kafka-python admin client that writes abort markers, one partition per call."""

    def __init__(self, client_props: Mapping[str, str], timeout: float) -> None:
        self._props = dict(client_props)
        self._timeout = timeout
        self._admin = None

    def _client(self):
        if self._admin is None:
            from kafka.admin import KafkaAdminClient

            self._admin = KafkaAdminClient(**kafka_python_config(self._props, self._timeout))
        return self._admin

    def abort(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
              coordinator_epoch: int) -> None:
        """End the producer's open transaction on the partition. The leader checks the
        producer id and epoch against its own producer state before it writes. Raises
        PollError naming the broker's answer (cause `authorization` when the ACL is missing)."""
        from kafka.admin import AbortTransactionSpec
        from kafka.errors import ClusterAuthorizationFailedError
        from kafka.structs import TopicPartition

        spec = AbortTransactionSpec(TopicPartition(topic, partition), producer_id, producer_epoch,
                                    max(coordinator_epoch, 0))
        try:
            self._client().abort_transaction(spec)
        except ClusterAuthorizationFailedError as exc:
            raise PollError("authorization", f"WriteTxnMarkers refused: {exc}") from None
        except PollError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is reported per partition
            self.close()          # a new connection for the next partition
            raise PollError("abort_failed", f"{type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        close_admin(self._admin)
        self._admin = None
