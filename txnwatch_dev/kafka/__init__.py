"""Brokers for tests, the demo and benchmarks: official Apache Kafka releases from Maven
Central, started as KRaft nodes with `java -cp`.

    release.py   which release (KAFKA_VERSION), its runtime resolved by Maven, its tools
    node.py      one node (storage formatted by the release's StorageTool)
    cluster.py   several nodes in one cluster
    secure.py    one node with SASL/SCRAM, SASL/PLAIN, TLS, mTLS (PEM or PKCS#12 clients),
                 OAUTHBEARER validated by Kafka's OIDC validator, and StandardAuthorizer ACLs
    kerberos.py  one node with SASL/GSSAPI listeners, its keytab from the tests' KDC
                 (txnwatch_dev/identity/)
    tools.py     the release's command-line tools by main class; finalized features
"""

from .cluster import KafkaCluster
from .node import SINGLE_NODE_DEFAULTS, KafkaBroker, Listener, make_broker, start_broker
from .release import BrokerUnavailable, KafkaRelease, kafka_release
from .tools import finalized_features, kafka_tool, share_consumer, transaction_version

__all__ = ["SINGLE_NODE_DEFAULTS", "BrokerUnavailable", "KafkaBroker", "KafkaCluster", "KafkaRelease", "Listener",
           "finalized_features", "kafka_release", "kafka_tool", "make_broker", "share_consumer", "start_broker",
           "transaction_version"]
