"""What every API needs when ``authorizer.enabled=true``: the one table of Kafka's
authorization rules (``KafkaApis``), by API key.

Each :class:`~sluice.broker.authorization.Need` is an operation on a resource type; the
handlers ask ``services.authorizer.allows(context, NEED, name)`` with the constants
below, so what this table says is what they check. A refusal answers the resource's
error code: TOPIC_AUTHORIZATION_FAILED (29), GROUP_AUTHORIZATION_FAILED (30),
CLUSTER_AUTHORIZATION_FAILED (31) or TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53), for the
refused resources only where the API answers per resource. Topics a request may not
DESCRIBE are answered as Kafka answers them (hidden from Metadata, TOPIC_AUTHORIZATION_
FAILED elsewhere), so their existence is not revealed.

Requests between brokers (a follower's Fetch and OffsetForLeaderEpoch, WriteTxnMarkers,
AddPartitionsToTxn's verification, the share-state APIs, AlterPartition, a forwarded Schema
Registry call) need CLUSTER_ACTION on the
cluster: list the brokers' principal in ``super.users``, as Kafka's documentation says.
A unit test checks that every API of the handler table has a row here.
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.broker.authorization import Need
from sluice.common.authorizer import Operation as Op
from sluice.common.authorizer import ResourceType as Res
from sluice.protocol.versions import ApiKey

# -- the needs handlers ask for ----------------------------------------------------------

TOPIC_READ = Need(Op.READ, Res.TOPIC, "each topic read")
TOPIC_WRITE = Need(Op.WRITE, Res.TOPIC, "each topic written")
TOPIC_DESCRIBE = Need(Op.DESCRIBE, Res.TOPIC, "each topic described (others are hidden)")
TOPIC_CREATE = Need(Op.CREATE, Res.TOPIC, "each topic created (unless CREATE on the cluster)")
TOPIC_DELETE = Need(Op.DELETE, Res.TOPIC, "each topic deleted, or its records")
TOPIC_ALTER = Need(Op.ALTER, Res.TOPIC, "each topic given partitions")
TOPIC_DESCRIBE_CONFIGS = Need(Op.DESCRIBE_CONFIGS, Res.TOPIC, "each topic's configs read")
TOPIC_ALTER_CONFIGS = Need(Op.ALTER_CONFIGS, Res.TOPIC, "each topic's configs changed")
GROUP_READ = Need(Op.READ, Res.GROUP, "the group joined, committed to or consumed by")
GROUP_DESCRIBE = Need(Op.DESCRIBE, Res.GROUP, "each group described or listed")
GROUP_DELETE = Need(Op.DELETE, Res.GROUP, "each group deleted, or its offsets")
GROUP_DESCRIBE_CONFIGS = Need(Op.DESCRIBE_CONFIGS, Res.GROUP, "each group's configs read")
GROUP_ALTER_CONFIGS = Need(Op.ALTER_CONFIGS, Res.GROUP, "each group's configs changed")
TRANSACTIONAL_WRITE = Need(Op.WRITE, Res.TRANSACTIONAL_ID, "the transactional id used")
TRANSACTIONAL_DESCRIBE = Need(Op.DESCRIBE, Res.TRANSACTIONAL_ID, "each transaction described")
CLUSTER_CREATE = Need(Op.CREATE, Res.CLUSTER, "creating any topic")
CLUSTER_ALTER = Need(Op.ALTER, Res.CLUSTER, "changing the cluster or its ACLs")
CLUSTER_DESCRIBE = Need(Op.DESCRIBE, Res.CLUSTER, "describing the cluster or its ACLs")
CLUSTER_DESCRIBE_FOR_OPERATIONS = Need(
    Op.DESCRIBE, Res.CLUSTER, "the cluster's authorized operations (else none are listed)"
)
CLUSTER_ACTION = Need(Op.CLUSTER_ACTION, Res.CLUSTER, "a request between brokers")
CLUSTER_DESCRIBE_CONFIGS = Need(Op.DESCRIBE_CONFIGS, Res.CLUSTER, "reading broker configs")
CLUSTER_ALTER_CONFIGS = Need(Op.ALTER_CONFIGS, Res.CLUSTER, "changing broker configs")
IDEMPOTENT_WRITE = Need(
    Op.IDEMPOTENT_WRITE, Res.CLUSTER, "an idempotent producer (or WRITE on some topic)"
)

# -- every API ---------------------------------------------------------------------------

RULES: Mapping[ApiKey, tuple[Need, ...]] = {
    ApiKey.PRODUCE: (TOPIC_WRITE, TRANSACTIONAL_WRITE, IDEMPOTENT_WRITE),
    ApiKey.FETCH: (TOPIC_READ, CLUSTER_ACTION),
    ApiKey.LIST_OFFSETS: (TOPIC_DESCRIBE,),
    ApiKey.METADATA: (TOPIC_DESCRIBE, CLUSTER_CREATE, TOPIC_CREATE),
    ApiKey.OFFSET_COMMIT: (GROUP_READ, TOPIC_READ),
    ApiKey.OFFSET_FETCH: (GROUP_DESCRIBE, TOPIC_DESCRIBE),
    ApiKey.FIND_COORDINATOR: (GROUP_DESCRIBE, TRANSACTIONAL_DESCRIBE, CLUSTER_ACTION),
    ApiKey.JOIN_GROUP: (GROUP_READ,),
    ApiKey.HEARTBEAT: (GROUP_READ,),
    ApiKey.LEAVE_GROUP: (GROUP_READ,),
    ApiKey.SYNC_GROUP: (GROUP_READ,),
    ApiKey.DESCRIBE_GROUPS: (GROUP_DESCRIBE,),
    ApiKey.LIST_GROUPS: (CLUSTER_DESCRIBE, GROUP_DESCRIBE),
    ApiKey.API_VERSIONS: (),
    ApiKey.SASL_HANDSHAKE: (),
    ApiKey.SASL_AUTHENTICATE: (),
    ApiKey.CREATE_TOPICS: (CLUSTER_CREATE, TOPIC_CREATE, TOPIC_DESCRIBE_CONFIGS),
    ApiKey.DELETE_TOPICS: (TOPIC_DELETE, TOPIC_DESCRIBE),
    ApiKey.DELETE_RECORDS: (TOPIC_DELETE,),
    ApiKey.INIT_PRODUCER_ID: (TRANSACTIONAL_WRITE, IDEMPOTENT_WRITE),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (TOPIC_DESCRIBE, CLUSTER_ACTION),
    ApiKey.ADD_PARTITIONS_TO_TXN: (TRANSACTIONAL_WRITE, TOPIC_WRITE, CLUSTER_ACTION),
    ApiKey.ADD_OFFSETS_TO_TXN: (TRANSACTIONAL_WRITE, GROUP_READ),
    ApiKey.END_TXN: (TRANSACTIONAL_WRITE,),
    ApiKey.WRITE_TXN_MARKERS: (CLUSTER_ACTION,),
    ApiKey.TXN_OFFSET_COMMIT: (TRANSACTIONAL_WRITE, GROUP_READ, TOPIC_READ),
    ApiKey.DESCRIBE_ACLS: (CLUSTER_DESCRIBE,),
    ApiKey.CREATE_ACLS: (CLUSTER_ALTER,),
    ApiKey.DELETE_ACLS: (CLUSTER_ALTER,),
    ApiKey.DESCRIBE_CONFIGS: (
        TOPIC_DESCRIBE_CONFIGS,
        CLUSTER_DESCRIBE_CONFIGS,
        GROUP_DESCRIBE_CONFIGS,
    ),
    ApiKey.ALTER_CONFIGS: (TOPIC_ALTER_CONFIGS, CLUSTER_ALTER_CONFIGS, GROUP_ALTER_CONFIGS),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (
        TOPIC_ALTER_CONFIGS,
        CLUSTER_ALTER_CONFIGS,
        GROUP_ALTER_CONFIGS,
    ),
    ApiKey.DESCRIBE_LOG_DIRS: (CLUSTER_DESCRIBE,),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (CLUSTER_ALTER,),
    ApiKey.DESCRIBE_QUORUM: (CLUSTER_DESCRIBE,),
    ApiKey.CREATE_PARTITIONS: (TOPIC_ALTER,),
    ApiKey.DELETE_GROUPS: (GROUP_DELETE,),
    ApiKey.ELECT_LEADERS: (CLUSTER_ALTER,),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (CLUSTER_ALTER,),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (CLUSTER_DESCRIBE,),
    ApiKey.OFFSET_DELETE: (GROUP_DELETE, TOPIC_READ),
    ApiKey.DESCRIBE_CLUSTER: (CLUSTER_DESCRIBE_FOR_OPERATIONS,),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (CLUSTER_DESCRIBE_CONFIGS,),
    ApiKey.ALTER_CLIENT_QUOTAS: (CLUSTER_ALTER_CONFIGS,),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (CLUSTER_DESCRIBE,),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (CLUSTER_ALTER,),
    ApiKey.DESCRIBE_PRODUCERS: (TOPIC_READ,),
    ApiKey.DESCRIBE_TRANSACTIONS: (TRANSACTIONAL_DESCRIBE,),
    ApiKey.LIST_TRANSACTIONS: (TRANSACTIONAL_DESCRIBE,),
    ApiKey.LIST_CONFIG_RESOURCES: (CLUSTER_DESCRIBE_CONFIGS,),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (TOPIC_DESCRIBE,),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (GROUP_READ, TOPIC_DESCRIBE),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (GROUP_DESCRIBE, TOPIC_DESCRIBE),
    ApiKey.SHARE_GROUP_HEARTBEAT: (GROUP_READ, TOPIC_DESCRIBE),
    ApiKey.SHARE_GROUP_DESCRIBE: (GROUP_DESCRIBE,),
    ApiKey.SHARE_FETCH: (GROUP_READ, TOPIC_READ),
    ApiKey.SHARE_ACKNOWLEDGE: (GROUP_READ, TOPIC_READ),
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: (CLUSTER_ACTION,),
    ApiKey.READ_SHARE_GROUP_STATE: (CLUSTER_ACTION,),
    ApiKey.WRITE_SHARE_GROUP_STATE: (CLUSTER_ACTION,),
    ApiKey.DELETE_SHARE_GROUP_STATE: (CLUSTER_ACTION,),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: (CLUSTER_ACTION,),
    ApiKey.ALTER_PARTITION: (CLUSTER_ACTION,),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (GROUP_DESCRIBE, TOPIC_DESCRIBE),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (GROUP_READ, TOPIC_READ),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (GROUP_DELETE, TOPIC_READ),
}

PRIVATE_RULES: Mapping[str, tuple[Need, ...]] = {
    "SluiceDescribeDelays": (TOPIC_READ,),
    "SluiceSchemaRegistryCall": (CLUSTER_ACTION,),
}
"""Sluice's own APIs, by name."""
