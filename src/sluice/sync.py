"""Blocking facades of Sluice's client, for code that runs in plain threads.

::

    import sluice.sync

    with sluice.sync.Producer(bootstrap_servers="127.0.0.1:9092") as producer:
        producer.send("orders", b"hello").result()

    with sluice.sync.Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        print([topic.name for topic in admin.list_topics()])

The types these clients take and give back, and the errors they raise, are importable
from here too (``from sluice.sync import Producer, NewTopic, TopicPartition``): the
same objects as ``sluice``'s (docs/client.md).
"""

from sluice.client.admin import (
    AlterConfigOp,
    ClusterDescription,
    ConfigEntry,
    ElectionType,
    ListedOffset,
    NewTopic,
    OffsetSpec,
)
from sluice.client.cluster import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata
from sluice.client.consumer_api import (
    ConsumerRebalanceListener,
    ConsumerRecord,
    NoOffsetForPartitionError,
    OffsetAndTimestamp,
)
from sluice.client.errors import (
    AuthenticationFailedError,
    BrokerUnreachableError,
    ClientError,
    ConnectionClosedError,
    RequestTimedOutError,
    TlsHandshakeError,
    UnsupportedApiError,
)
from sluice.client.groups import GroupDescription, GroupListing, OffsetAndMetadata
from sluice.client.producer_api import (
    DeliveryTimeoutError,
    Headers,
    ProducerClosedError,
    RecordMetadata,
)
from sluice.client.share_records import AcknowledgeType, ShareConsumerRecord
from sluice.client.sync import Admin, Consumer, Producer, ShareConsumer
from sluice.client.transactions import (
    GroupMetadata,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionStateError,
)
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.records.builder import RecordInput

__all__ = [
    "AcknowledgeType",
    "Admin",
    "AlterConfigOp",
    "AuthenticationFailedError",
    "BrokerMetadata",
    "BrokerUnreachableError",
    "ClientError",
    "ClusterDescription",
    "ClusterMetadata",
    "ConfigEntry",
    "ConnectionClosedError",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "DeliveryTimeoutError",
    "ElectionType",
    "GroupDescription",
    "GroupListing",
    "GroupMetadata",
    "Headers",
    "KafkaError",
    "ListedOffset",
    "NewTopic",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetSpec",
    "PartitionMetadata",
    "Producer",
    "ProducerClosedError",
    "ProducerFencedError",
    "RecordInput",
    "RecordMetadata",
    "RequestTimedOutError",
    "ShareConsumer",
    "ShareConsumerRecord",
    "TlsHandshakeError",
    "TopicMetadata",
    "TopicPartition",
    "TransactionAbortableError",
    "TransactionStateError",
    "UnsupportedApiError",
]
