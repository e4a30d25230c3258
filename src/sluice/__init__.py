"""Sluice: a durable, replicated, partitioned event log that speaks the Kafka protocol.

Packages, from the bottom of the dependency order up (see docs/ARCHITECTURE.md):
``common`` → ``protocol`` → ``storage`` → ``cluster`` → ``broker`` / ``client`` → ``cli``.

The client's public names (docs/client.md) are importable from here, ``from sluice
import Producer, NewTopic, TopicPartition``; each is imported on first use, so the
broker (which never uses the client) does not load it.
"""

__version__ = "0.1.0"

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice import sync as sync
    from sluice.client.admin import AlterConfigOp as AlterConfigOp
    from sluice.client.admin import ClusterDescription as ClusterDescription
    from sluice.client.admin import ConfigEntry as ConfigEntry
    from sluice.client.admin import ElectionType as ElectionType
    from sluice.client.admin import ListedOffset as ListedOffset
    from sluice.client.admin import NewTopic as NewTopic
    from sluice.client.admin import OffsetSpec as OffsetSpec
    from sluice.client.admin_api import Admin as Admin
    from sluice.client.cluster import BrokerMetadata as BrokerMetadata
    from sluice.client.cluster import ClusterMetadata as ClusterMetadata
    from sluice.client.cluster import PartitionMetadata as PartitionMetadata
    from sluice.client.cluster import TopicMetadata as TopicMetadata
    from sluice.client.consumer_api import Consumer as Consumer
    from sluice.client.consumer_api import ConsumerRebalanceListener as ConsumerRebalanceListener
    from sluice.client.consumer_api import ConsumerRecord as ConsumerRecord
    from sluice.client.consumer_api import NoOffsetForPartitionError as NoOffsetForPartitionError
    from sluice.client.consumer_api import OffsetAndTimestamp as OffsetAndTimestamp
    from sluice.client.errors import AuthenticationFailedError as AuthenticationFailedError
    from sluice.client.errors import BrokerUnreachableError as BrokerUnreachableError
    from sluice.client.errors import ClientError as ClientError
    from sluice.client.errors import ConnectionClosedError as ConnectionClosedError
    from sluice.client.errors import RequestTimedOutError as RequestTimedOutError
    from sluice.client.errors import TlsHandshakeError as TlsHandshakeError
    from sluice.client.errors import UnsupportedApiError as UnsupportedApiError
    from sluice.client.exactly_once import Output as Output
    from sluice.client.exactly_once import run_exactly_once as run_exactly_once
    from sluice.client.groups import GroupDescription as GroupDescription
    from sluice.client.groups import GroupListing as GroupListing
    from sluice.client.groups import OffsetAndMetadata as OffsetAndMetadata
    from sluice.client.producer_api import DeliveryTimeoutError as DeliveryTimeoutError
    from sluice.client.producer_api import Headers as Headers
    from sluice.client.producer_api import Producer as Producer
    from sluice.client.producer_api import ProducerClosedError as ProducerClosedError
    from sluice.client.producer_api import RecordMetadata as RecordMetadata
    from sluice.client.retries import RetryPolicy as RetryPolicy
    from sluice.client.share_consumer import ShareConsumer as ShareConsumer
    from sluice.client.share_records import AcknowledgeType as AcknowledgeType
    from sluice.client.share_records import ShareConsumerRecord as ShareConsumerRecord
    from sluice.client.transactions import GroupMetadata as GroupMetadata
    from sluice.client.transactions import ProducerFencedError as ProducerFencedError
    from sluice.client.transactions import TransactionAbortableError as TransactionAbortableError
    from sluice.client.transactions import TransactionStateError as TransactionStateError
    from sluice.common.errors import KafkaError as KafkaError
    from sluice.common.ids import TopicPartition as TopicPartition
    from sluice.protocol.records.builder import RecordInput as RecordInput

_PUBLIC_NAMES: dict[str, str] = {
    # the clients
    "Admin": "sluice.client.admin_api",
    "Consumer": "sluice.client.consumer_api",
    "Producer": "sluice.client.producer_api",
    "ShareConsumer": "sluice.client.share_consumer",
    "RetryPolicy": "sluice.client.retries",
    "Output": "sluice.client.exactly_once",
    "run_exactly_once": "sluice.client.exactly_once",
    # what they take and give back
    "TopicPartition": "sluice.common.ids",
    "NewTopic": "sluice.client.admin",
    "AlterConfigOp": "sluice.client.admin",
    "ConfigEntry": "sluice.client.admin",
    "ClusterDescription": "sluice.client.admin",
    "ElectionType": "sluice.client.admin",
    "ListedOffset": "sluice.client.admin",
    "OffsetSpec": "sluice.client.admin",
    "BrokerMetadata": "sluice.client.cluster",
    "ClusterMetadata": "sluice.client.cluster",
    "PartitionMetadata": "sluice.client.cluster",
    "TopicMetadata": "sluice.client.cluster",
    "ConsumerRecord": "sluice.client.consumer_api",
    "ConsumerRebalanceListener": "sluice.client.consumer_api",
    "OffsetAndTimestamp": "sluice.client.consumer_api",
    "GroupDescription": "sluice.client.groups",
    "GroupListing": "sluice.client.groups",
    "OffsetAndMetadata": "sluice.client.groups",
    "Headers": "sluice.client.producer_api",
    "RecordMetadata": "sluice.client.producer_api",
    "RecordInput": "sluice.protocol.records.builder",
    "AcknowledgeType": "sluice.client.share_records",
    "ShareConsumerRecord": "sluice.client.share_records",
    "GroupMetadata": "sluice.client.transactions",
    # errors
    "KafkaError": "sluice.common.errors",
    "ClientError": "sluice.client.errors",
    "AuthenticationFailedError": "sluice.client.errors",
    "BrokerUnreachableError": "sluice.client.errors",
    "ConnectionClosedError": "sluice.client.errors",
    "RequestTimedOutError": "sluice.client.errors",
    "TlsHandshakeError": "sluice.client.errors",
    "UnsupportedApiError": "sluice.client.errors",
    "NoOffsetForPartitionError": "sluice.client.consumer_api",
    "DeliveryTimeoutError": "sluice.client.producer_api",
    "ProducerClosedError": "sluice.client.producer_api",
    "ProducerFencedError": "sluice.client.transactions",
    "TransactionAbortableError": "sluice.client.transactions",
    "TransactionStateError": "sluice.client.transactions",
}
"""Each public name and the module it lives in (and is imported from on first use)."""

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
    "Output",
    "PartitionMetadata",
    "Producer",
    "ProducerClosedError",
    "ProducerFencedError",
    "RecordInput",
    "RecordMetadata",
    "RequestTimedOutError",
    "RetryPolicy",
    "ShareConsumer",
    "ShareConsumerRecord",
    "TlsHandshakeError",
    "TopicMetadata",
    "TopicPartition",
    "TransactionAbortableError",
    "TransactionStateError",
    "UnsupportedApiError",
    "__version__",
    "run_exactly_once",
    "sync",
]


def __getattr__(name: str) -> Any:
    # Imported on first use, so the broker (which never uses the client) does not
    # load it: ``sluice.Producer`` and ``sluice.sync.Producer``.
    if name == "sync":
        return importlib.import_module("sluice.sync")
    module = _PUBLIC_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'sluice' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
