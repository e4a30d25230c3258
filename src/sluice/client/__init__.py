"""Sluice's own Kafka-protocol client: asyncio first, speaking only the wire protocol.

What belongs here: everything a program needs to talk to a Sluice (or any Kafka)
broker from the outside, built on ``sluice.protocol`` (framing, codec, record batches)
and ``sluice.common`` (ids, errors, limits) and nothing higher. The broker never imports
this package, and this package never imports the broker or storage.

Modules, bottom up::

    connection    one TCP connection: ApiVersions negotiation, pipelined requests
                  matched by correlation id, timeouts, clean close
    cluster       bootstrap, metadata (brokers, topics, partition leaders), one
                  connection per broker
    messages      requests described as data, built at the version agreed on
    versions      the API versions this client speaks, and the negotiation
    errors        errors raised by the client itself (unreachable, timed out, ...)
    arguments     checks of what a program passes (option names, record types, topics)
    partitioner   murmur2 key hashing, identical to the Java client's
    accumulator   per-partition record batches waiting to be sent
    producer      low-level helpers: build record batches, send them to leaders
    producer_api  ``sluice.Producer``: batching, retrying, idempotent producer
    consumer      low-level fetch from partition offsets, decoding the records
    consumer_api  ``sluice.Consumer``: subscribe or assign, fetch, commit, seek
    membership    the consumer group protocol of one member (join, sync, heartbeat)
    assignors     partition assignment strategies (range, round-robin, sticky)
    groups        coordinators, group descriptions and committed offsets
    admin         ``Admin(cluster)``: topics, partitions, records, configs, offsets,
                  groups and the cluster's description
    admin_api     ``sluice.Admin``: that admin client owning its own ``Cluster``
    share_records the pure half of share groups (KIP-932): acquired records, GAP and
                  acknowledgement batches, share session epochs
    share_membership  a share group member's heartbeats and assignment (topic ids)
    share_consumer    ``sluice.ShareConsumer``: share sessions, acknowledgements
    admin_share_groups  share groups as an administrator sees them
    sync          blocking facades (``sluice.sync.Producer``, ``Consumer``,
                  ``ShareConsumer``, ``Admin``)
                  each running its client on a loop thread of its own

Everything builds on ``Cluster`` and ``BrokerConnection`` rather than opening sockets
of its own.
"""

from sluice.client.admin import (
    Admin,
    AlterConfigOp,
    ConfigEntry,
    ElectionType,
    ListedOffset,
    LogDirDescription,
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
from sluice.client.connection import BrokerConnection, SaslSettings
from sluice.client.consumer import ConsumedRecord, FetchedPartition, fetch_partitions
from sluice.client.errors import (
    BrokerUnreachableError,
    ClientError,
    ConnectionClosedError,
    MalformedResponseError,
    RequestTimedOutError,
    TlsHandshakeError,
    UnsupportedApiError,
)
from sluice.client.messages import Request
from sluice.client.partitioner import murmur2, partition_for_key
from sluice.client.producer import Acks, ProduceResult, produce_batch, produce_batches
from sluice.client.tls import TlsSettings

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
    "ElectionType",
    "FetchedPartition",
    "ListedOffset",
    "LogDirDescription",
    "MalformedResponseError",
    "NewTopic",
    "OffsetSpec",
    "PartitionMetadata",
    "ProduceResult",
    "Request",
    "RequestTimedOutError",
    "SaslSettings",
    "TlsHandshakeError",
    "TlsSettings",
    "TopicMetadata",
    "UnsupportedApiError",
    "fetch_partitions",
    "murmur2",
    "partition_for_key",
    "produce_batch",
    "produce_batches",
]
