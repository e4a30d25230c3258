"""Sluice's own Kafka-protocol client: asyncio first, speaking only the wire protocol.

What belongs here: everything a program needs to talk to a Sluice (or any Kafka)
broker from the outside, built on ``sluice.protocol`` (framing, codec, record batches)
and ``sluice.common`` (ids, errors, limits) and nothing higher. The broker never imports
this package, and this package never imports the broker or storage.

Layers, bottom up::

    connection  one TCP connection: ApiVersions negotiation, pipelined requests matched
                by correlation id, timeouts, clean close
    cluster     bootstrap, metadata (brokers, topics, partition leaders), one connection
                per broker
    admin       topics and configs (create, delete, describe, alter), list offsets
    producer    build record batches and send them to partition leaders
    consumer    fetch from partition offsets and decode the records
    partitioner murmur2 key hashing, identical to the Java client's

Later additions (batching producer, group consumer, transactions, a sync facade) build
on ``Cluster`` and ``BrokerConnection`` rather than opening sockets of their own.
"""

from sluice.client.admin import (
    Admin,
    AlterConfigOp,
    ConfigEntry,
    ListedOffset,
    NewTopic,
    OffsetSpec,
)
from sluice.client.cluster import (
    BrokerMetadata,
    Cluster,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from sluice.client.connection import BrokerConnection
from sluice.client.consumer import ConsumedRecord, FetchedPartition, fetch_partitions
from sluice.client.errors import (
    BrokerUnreachableError,
    ClientError,
    ConnectionClosedError,
    MalformedResponseError,
    RequestTimedOutError,
    UnsupportedApiError,
)
from sluice.client.messages import Request
from sluice.client.partitioner import murmur2, partition_for_key
from sluice.client.producer import Acks, ProduceResult, produce_batch, produce_batches

__all__ = [
    "Acks",
    "Admin",
    "AlterConfigOp",
    "BrokerConnection",
    "BrokerMetadata",
    "BrokerUnreachableError",
    "ClientError",
    "Cluster",
    "ClusterMetadata",
    "ConfigEntry",
    "ConnectionClosedError",
    "ConsumedRecord",
    "FetchedPartition",
    "ListedOffset",
    "MalformedResponseError",
    "NewTopic",
    "OffsetSpec",
    "PartitionMetadata",
    "ProduceResult",
    "Request",
    "RequestTimedOutError",
    "TopicMetadata",
    "UnsupportedApiError",
    "fetch_partitions",
    "murmur2",
    "partition_for_key",
    "produce_batch",
    "produce_batches",
]
