"""The one table of API versions Sluice serves; ApiVersions answers from it.

Each range reaches as far as the versions the Kafka 4.x clients (Java, librdkafka 2.16)
send, and no further than what is fully served: a version is listed only when every
field it adds means here what it means in Kafka (the comments below say why a range
stops where it does). The lower bounds stay where old clients need them: librdkafka
before 2.11 and kcat turn compression off unless Produce's range starts at 0 and Fetch's
contains 4 and 10, and want FindCoordinator and InitProducerId v0. Versions from
``first_flexible`` on use compact types, tagged fields and request header v2 (KIP-482).

The README's protocol coverage table lists the same ranges (those advertised: internal,
broker-to-broker APIs are served but never listed); a unit test keeps the two in step.
An API appears here only once a handler serves it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import IntEnum


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


@dataclass(frozen=True)
class VersionRange:
    min_version: int
    max_version: int
    first_flexible: int | None
    """First version whose body (and request header) is flexible; None if never."""
    min_served: int | None = None
    """Lowest version actually served when it differs from what is advertised (Produce
    advertises 0 so old librdkafka keeps compression on, but answers 0-2 with
    UNSUPPORTED_VERSION)."""

    internal: bool = False
    """Served only to other brokers and never advertised in ApiVersions (Kafka's
    broker-to-broker share-state APIs): a broker sending one uses its own table's
    version, as the peer does not list it."""

    rebalance_protocol: str | None = None
    """The group rebalance protocol this API belongs to when it is not always served:
    listed in ApiVersions and served only when the broker enables that protocol
    (``group.coordinator.rebalance.protocols``), as Kafka does for KIP-848's APIs."""

    def advertises(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def serves(self, version: int) -> bool:
        low = self.min_version if self.min_served is None else self.min_served
        return low <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        return self.first_flexible is not None and version >= self.first_flexible


SUPPORTED: dict[ApiKey, VersionRange] = {
    # Produce: 0-2 are advertised for old librdkafka's compression check but refused.
    # v9 is flexible; v10-11 name the current leader on NOT_LEADER_OR_FOLLOWER (KIP-951),
    # v11 also lets a transactional batch be refused with TRANSACTION_ABORTABLE; v12 adds
    # a transactional batch's partition to its transaction implicitly (transaction
    # version 2, KIP-890 part 2); v13 names topics by id (UNKNOWN_TOPIC_ID for an id no
    # topic has).
    ApiKey.PRODUCE: VersionRange(0, 13, 9, min_served=3),
    # Fetch: v12 is flexible and checks last_fetched_epoch (an answer with a diverging
    # epoch when the fetcher's log has diverged); v13 names topics by id; v14 may answer
    # a tiered-storage error (none here); v15 moves the replica id into a tagged
    # replica_state (consumers send none); v16 names the current leader on
    # NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH (KIP-951). v17 carries a follower's
    # log directory id (KIP-858), which Sluice, without directory assignment, cannot
    # check: the range stops below it.
    ApiKey.FETCH: VersionRange(4, 16, 12),
    # ListOffsets: v7-9 allow the special timestamps -3 (max timestamp), -4 (earliest
    # local) and -5 (latest tiered); v10 adds a timeout for remote lookups, which never
    # wait here. v11 (-6, earliest pending upload) is not served.
    ApiKey.LIST_OFFSETS: VersionRange(1, 10, 6),
    # Metadata: v10 returns topic ids, v12 accepts topics named only by id, v13 adds a
    # top-level error code (REBOOTSTRAP_REQUIRED, never needed here).
    ApiKey.METADATA: VersionRange(0, 13, 9),
    # OffsetCommit v9 / OffsetFetch v9 are the first versions usable by KIP-848 groups;
    # for classic groups they mean what v8 means (member epoch and id are not checked, as
    # in Kafka). v10 names topics by id: not served.
    ApiKey.OFFSET_COMMIT: VersionRange(2, 9, 8),
    ApiKey.OFFSET_FETCH: VersionRange(1, 9, 6),
    # FindCoordinator v4+ looks up a batch of keys; v6 allows share coordinator keys
    # (type 2, group:topic id:partition: the leader of its __share_group_state partition).
    ApiKey.FIND_COORDINATOR: VersionRange(0, 6, 3),
    ApiKey.JOIN_GROUP: VersionRange(0, 9, 6),
    ApiKey.HEARTBEAT: VersionRange(0, 4, 4),
    ApiKey.LEAVE_GROUP: VersionRange(0, 5, 4),
    ApiKey.SYNC_GROUP: VersionRange(0, 5, 4),
    # DescribeGroups v6 answers an unknown group with GROUP_ID_NOT_FOUND (KIP-1043).
    ApiKey.DESCRIBE_GROUPS: VersionRange(0, 6, 5),
    # ListGroups v3+ is flexible; v4 adds the state filter, v5 the type filter
    # ("classic" or "share").
    ApiKey.LIST_GROUPS: VersionRange(0, 5, 3),
    ApiKey.DELETE_GROUPS: VersionRange(0, 2, 2),
    ApiKey.OFFSET_DELETE: VersionRange(0, 0, None),
    ApiKey.API_VERSIONS: VersionRange(0, 4, 3),
    # SASL (handlers/sasl.py): SaslHandshake v1 is followed by SaslAuthenticate, which
    # every client in use sends; v0's raw tokens (Kafka's legacy framing) are refused.
    # SaslAuthenticate v1 returns the session lifetime (KIP-368), v2 is flexible.
    ApiKey.SASL_HANDSHAKE: VersionRange(0, 1, None),
    ApiKey.SASL_AUTHENTICATE: VersionRange(0, 2, 2),
    # SCRAM users (handlers/admin_users.py), as kafka-configs and the admin clients
    # manage them.
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: VersionRange(0, 0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: VersionRange(0, 0, 0),
    # CreateTopics v5+ returns the topic's partitions, replication factor and configs,
    # v7 its id. DeleteTopics v6 accepts topics by id.
    ApiKey.CREATE_TOPICS: VersionRange(2, 7, 5),
    ApiKey.DELETE_TOPICS: VersionRange(1, 6, 4),
    ApiKey.DELETE_RECORDS: VersionRange(0, 2, 2),
    # InitProducerId v3+ carries the producer's current id and epoch; without a
    # transactional id they are ignored and a new id is given, as in Kafka. v6 is
    # two-phase commit (KIP-939): not served.
    ApiKey.INIT_PRODUCER_ID: VersionRange(0, 5, 2),
    # Transactions (handlers/transactions.py). AddPartitionsToTxn v4 batches several
    # transactions and has verify_only (KIP-890 part 1, brokers ask it; clients stop at
    # v3). AddPartitionsToTxn v5, AddOffsetsToTxn v4, EndTxn v4 and TxnOffsetCommit v4
    # tell the broker the client understands TRANSACTION_ABORTABLE; EndTxn v5 and
    # TxnOffsetCommit v5 are transaction version 2 (KIP-890 part 2, finalized in
    # ApiVersions): each EndTxn bumps the producer epoch and returns it, and
    # TxnOffsetCommit v5 (like Produce v12) adds its partition to the transaction itself.
    # WriteTxnMarkers is what brokers send each other (and Kafka's admin "abort
    # transaction").
    ApiKey.ADD_PARTITIONS_TO_TXN: VersionRange(0, 5, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: VersionRange(0, 4, 3),
    ApiKey.END_TXN: VersionRange(0, 5, 3),
    ApiKey.TXN_OFFSET_COMMIT: VersionRange(0, 5, 3),
    ApiKey.WRITE_TXN_MARKERS: VersionRange(1, 1, 1),
    ApiKey.DESCRIBE_TRANSACTIONS: VersionRange(0, 0, 0),
    ApiKey.LIST_TRANSACTIONS: VersionRange(0, 1, 0),
    # OffsetForLeaderEpoch: where a leader epoch ends, for followers truncating after a
    # leader change and for clients validating their position (librdkafka sends v2).
    # v3 adds the replica id; v0-1 were removed in Kafka 4.0.
    ApiKey.OFFSET_FOR_LEADER_EPOCH: VersionRange(2, 4, 4),
    # ACLs (handlers/acls.py): v0 was removed in Kafka 4.0; v1 adds pattern types
    # (PREFIXED), v2 is flexible, v3 only widens what USER resources may hold.
    ApiKey.DESCRIBE_ACLS: VersionRange(1, 3, 2),
    ApiKey.CREATE_ACLS: VersionRange(1, 3, 2),
    ApiKey.DELETE_ACLS: VersionRange(1, 3, 2),
    ApiKey.DESCRIBE_CONFIGS: VersionRange(1, 4, 4),
    ApiKey.ALTER_CONFIGS: VersionRange(0, 2, 2),
    ApiKey.CREATE_PARTITIONS: VersionRange(0, 3, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: VersionRange(0, 1, 1),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: VersionRange(0, 0, 0),
    # Admin APIs every tool calls (handlers/admin_cluster.py, admin_partitions.py,
    # admin_producers.py), at the ranges the Java 4.0-4.2 admin client, librdkafka and
    # kafka-python 3 send. DescribeLogDirs v0 was removed in Kafka 4.0; v5 (is_cordoned)
    # is Kafka 4.3's, and kafka-python 3 takes DescribeLogDirs v5 as the sign of a 4.3
    # broker, switching on behaviour keyed to the broker version (epoch bumps through
    # InitProducerId v3+, which Sluice does not serve), so it stays out.
    ApiKey.DESCRIBE_LOG_DIRS: VersionRange(1, 4, 2),
    # AlterReplicaLogDirs (handlers/admin_log_dirs.py): one log directory, so a move
    # within it succeeds as a no-op; v0 was removed in Kafka 4.0. DescribeQuorum
    # (handlers/describe_quorum.py): no KRaft quorum here, every partition answers
    # UNKNOWN_TOPIC_OR_PARTITION; it is flexible from v0.
    ApiKey.ALTER_REPLICA_LOG_DIRS: VersionRange(1, 2, 2),
    ApiKey.DESCRIBE_QUORUM: VersionRange(0, 2, 0),
    ApiKey.ELECT_LEADERS: VersionRange(0, 2, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: VersionRange(0, 1, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: VersionRange(0, 0, 0),
    ApiKey.DESCRIBE_CLUSTER: VersionRange(0, 2, 0),
    ApiKey.DESCRIBE_PRODUCERS: VersionRange(0, 0, 0),
    # Client quotas (KIP-546, handlers/admin_quotas.py): v1 is flexible, nothing else.
    ApiKey.DESCRIBE_CLIENT_QUOTAS: VersionRange(0, 1, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: VersionRange(0, 1, 1),
    ApiKey.LIST_CONFIG_RESOURCES: VersionRange(0, 1, 0),
    # Share groups (KIP-932, handlers/share_groups.py): membership and its description.
    # v0 was the early-access version of Kafka 4.0, gone since 4.1 (no client sends it);
    # v1 is what librdkafka 2.15+ and Java 4.1+ send.
    ApiKey.SHARE_GROUP_HEARTBEAT: VersionRange(1, 1, 0),
    ApiKey.SHARE_GROUP_DESCRIBE: VersionRange(1, 1, 0),
    # Share groups (KIP-932, handlers/share_fetch.py): v0 was early access, gone since
    # Kafka 4.1; v1 is what librdkafka 2.15+ and the Java 4.2 client send; v2 adds the
    # RENEW acknowledgement and the acquire modes.
    ApiKey.SHARE_FETCH: VersionRange(1, 2, 0),
    ApiKey.SHARE_ACKNOWLEDGE: VersionRange(1, 2, 0),
    # Share groups' offsets for administrators (handlers/share_offsets.py);
    # DescribeShareGroupOffsets v1 adds the lag.
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: VersionRange(0, 1, 0),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: VersionRange(0, 0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: VersionRange(0, 0, 0),
    # Share-partition state (KIP-932), between brokers only (internal: not in
    # ApiVersions): a share-partition's leader reads and writes its state at the share
    # coordinator of its __share_group_state partition. Write v1 and ReadSummary v1 add
    # a delivery-complete count, which Sluice does not keep.
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: VersionRange(0, 0, 0, internal=True),
    ApiKey.READ_SHARE_GROUP_STATE: VersionRange(0, 0, 0, internal=True),
    ApiKey.WRITE_SHARE_GROUP_STATE: VersionRange(0, 0, 0, internal=True),
    ApiKey.DELETE_SHARE_GROUP_STATE: VersionRange(0, 0, 0, internal=True),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: VersionRange(0, 0, 0, internal=True),
    # AlterPartition (KIP-497): a partition leader asks the controller for an ISR change,
    # between brokers only. Kafka 4 serves v2 (topics by id) and v3 (each member with its
    # broker epoch, KIP-903).
    ApiKey.ALTER_PARTITION: VersionRange(2, 3, 0, internal=True),
    # ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848): listed and served when
    # group.coordinator.rebalance.protocols enables `consumer` (docs/consumer-groups.md):
    # franz-go switches to it as soon as 68 is listed, librdkafka with
    # group.protocol=consumer. Heartbeat v1 makes the member choose its id; Describe v1
    # adds the member type.
    ApiKey.CONSUMER_GROUP_HEARTBEAT: VersionRange(0, 1, 0, rebalance_protocol="consumer"),
    ApiKey.CONSUMER_GROUP_DESCRIBE: VersionRange(0, 1, 0, rebalance_protocol="consumer"),
}

ADVERTISED: dict[ApiKey, VersionRange] = {
    key: served for key, served in SUPPORTED.items() if not served.internal
}
"""What ApiVersions lists with every rebalance protocol enabled (and the README's coverage
table): ``SUPPORTED`` without the internal, broker-to-broker APIs."""


def advertised(rebalance_protocols: Collection[str]) -> dict[ApiKey, VersionRange]:
    """What a broker lists in ApiVersions with these rebalance protocols enabled
    (``group.coordinator.rebalance.protocols``)."""
    return {
        key: served
        for key, served in ADVERTISED.items()
        if served.rebalance_protocol is None or served.rebalance_protocol in rebalance_protocols
    }


# Flexibility of every version of the APIs we know, served or not: the request header's
# shape depends on it, and a request we refuse must still be parsed far enough to answer.
# APIs absent here (OffsetDelete) have no flexible version.
FIRST_FLEXIBLE_VERSION: dict[int, int] = {
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 9,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 6,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 6,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 4,
    ApiKey.SYNC_GROUP: 4,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 3,
    ApiKey.API_VERSIONS: 3,
    ApiKey.CREATE_TOPICS: 5,
    ApiKey.DELETE_TOPICS: 4,
    ApiKey.DELETE_RECORDS: 2,
    ApiKey.INIT_PRODUCER_ID: 2,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.ADD_OFFSETS_TO_TXN: 3,
    ApiKey.END_TXN: 3,
    ApiKey.WRITE_TXN_MARKERS: 1,
    ApiKey.TXN_OFFSET_COMMIT: 3,
    ApiKey.DESCRIBE_ACLS: 2,
    ApiKey.CREATE_ACLS: 2,
    ApiKey.DELETE_ACLS: 2,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.SASL_AUTHENTICATE: 2,
    ApiKey.CREATE_PARTITIONS: 2,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.ALTER_REPLICA_LOG_DIRS: 2,
    ApiKey.DESCRIBE_LOG_DIRS: 2,
    ApiKey.DESCRIBE_QUORUM: 0,
    ApiKey.ALTER_PARTITION: 0,
    ApiKey.ELECT_LEADERS: 2,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.DESCRIBE_CLUSTER: 0,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: 1,
    ApiKey.ALTER_CLIENT_QUOTAS: 1,
    ApiKey.DESCRIBE_PRODUCERS: 0,
    ApiKey.DESCRIBE_TRANSACTIONS: 0,
    ApiKey.LIST_TRANSACTIONS: 0,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: 0,
    ApiKey.CONSUMER_GROUP_DESCRIBE: 0,
    ApiKey.LIST_CONFIG_RESOURCES: 0,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: 0,
    ApiKey.SHARE_GROUP_HEARTBEAT: 0,
    ApiKey.SHARE_GROUP_DESCRIBE: 0,
    ApiKey.SHARE_FETCH: 0,
    ApiKey.SHARE_ACKNOWLEDGE: 0,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: 0,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: 0,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: 0,
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE: 0,
    ApiKey.WRITE_SHARE_GROUP_STATE: 0,
    ApiKey.DELETE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: 0,
}


def request_is_flexible(api_key: int, version: int) -> bool:
    first = FIRST_FLEXIBLE_VERSION.get(api_key)
    return first is not None and version >= first


def api_name(api_key: int) -> str:
    """A readable name for an API key ("Metadata", "CreateTopics", or "API 57")."""
    try:
        return ApiKey(api_key).name.title().replace("_", "")
    except ValueError:
        return f"API {api_key}"
