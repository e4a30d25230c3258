"""The one table of API versions Sluice serves; ApiVersions answers from it.

Ranges come from PROTOCOL.md ("advertise"), verified against librdkafka, kafka-python,
aiokafka, kafkajs and kcat. An API appears here only once a handler serves it.
"""

from __future__ import annotations

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
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    LIST_CONFIG_RESOURCES = 74


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

    def advertises(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def serves(self, version: int) -> bool:
        low = self.min_version if self.min_served is None else self.min_served
        return low <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        return self.first_flexible is not None and version >= self.first_flexible


SUPPORTED: dict[ApiKey, VersionRange] = {
    ApiKey.PRODUCE: VersionRange(0, 8, 9, min_served=3),
    ApiKey.FETCH: VersionRange(4, 11, 12),
    ApiKey.LIST_OFFSETS: VersionRange(1, 5, 6),
    ApiKey.METADATA: VersionRange(0, 8, 9),
    ApiKey.OFFSET_COMMIT: VersionRange(2, 7, 8),
    ApiKey.OFFSET_FETCH: VersionRange(1, 5, 6),
    ApiKey.FIND_COORDINATOR: VersionRange(0, 2, 3),
    ApiKey.JOIN_GROUP: VersionRange(0, 5, 6),
    ApiKey.HEARTBEAT: VersionRange(0, 3, 4),
    ApiKey.LEAVE_GROUP: VersionRange(0, 3, 4),
    ApiKey.SYNC_GROUP: VersionRange(0, 3, 4),
    ApiKey.DESCRIBE_GROUPS: VersionRange(0, 4, 5),
    # ListGroups v3+ is flexible; clients without flexible versions pick 0-2. v4 adds the
    # state filter and each group's state (admin clients show it).
    ApiKey.LIST_GROUPS: VersionRange(0, 4, 3),
    ApiKey.DELETE_GROUPS: VersionRange(0, 1, 2),
    ApiKey.OFFSET_DELETE: VersionRange(0, 0, None),
    ApiKey.API_VERSIONS: VersionRange(0, 2, 3),
    ApiKey.CREATE_TOPICS: VersionRange(2, 4, 5),
    ApiKey.DELETE_TOPICS: VersionRange(1, 3, 4),
    ApiKey.DELETE_RECORDS: VersionRange(0, 1, 2),
    ApiKey.INIT_PRODUCER_ID: VersionRange(0, 1, 2),
    ApiKey.DESCRIBE_CONFIGS: VersionRange(1, 3, 4),
    ApiKey.ALTER_CONFIGS: VersionRange(0, 1, 2),
    ApiKey.CREATE_PARTITIONS: VersionRange(0, 1, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: VersionRange(0, 0, 1),
    # Admin APIs every tool calls (handlers/admin_cluster.py, admin_partitions.py,
    # admin_producers.py), at the ranges the Java 4.0-4.2 admin client, librdkafka and
    # kafka-python 3 send. DescribeLogDirs v0 was removed in Kafka 4.0; v5 (is_cordoned)
    # is Kafka 4.3's, and kafka-python 3 takes DescribeLogDirs v5 as the sign of a 4.3
    # broker, switching on behaviour keyed to the broker version (epoch bumps through
    # InitProducerId v3+, which Sluice does not serve), so it stays out.
    ApiKey.DESCRIBE_LOG_DIRS: VersionRange(1, 4, 2),
    ApiKey.ELECT_LEADERS: VersionRange(0, 2, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: VersionRange(0, 1, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: VersionRange(0, 0, 0),
    ApiKey.DESCRIBE_CLUSTER: VersionRange(0, 2, 0),
    ApiKey.DESCRIBE_PRODUCERS: VersionRange(0, 0, 0),
    ApiKey.LIST_CONFIG_RESOURCES: VersionRange(0, 1, 0),
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
    ApiKey.TXN_OFFSET_COMMIT: 3,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.SASL_AUTHENTICATE: 2,
    ApiKey.CREATE_PARTITIONS: 2,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.DESCRIBE_LOG_DIRS: 2,
    ApiKey.ELECT_LEADERS: 2,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.DESCRIBE_CLUSTER: 0,
    ApiKey.DESCRIBE_PRODUCERS: 0,
    ApiKey.LIST_CONFIG_RESOURCES: 0,
}


def request_is_flexible(api_key: int, version: int) -> bool:
    first = FIRST_FLEXIBLE_VERSION.get(api_key)
    return first is not None and version >= first
