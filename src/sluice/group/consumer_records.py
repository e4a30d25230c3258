"""The records of a consumer group of the new protocol (KIP-848) in ``__consumer_offsets``.

Kafka keeps such a group as several kinds of record, each keyed by the group (and the
member), so a change rewrites only what changed. These are Kafka's record types, as
plain data (the coordinator replays them, :mod:`~sluice.group.consumer_heartbeat`); the
key version names the record type, as for every record of ``__consumer_offsets``::

    key v3  ConsumerGroupMetadata            (group)          value v0: group epoch
    key v4  ConsumerGroupPartitionMetadata   (group)          value v0: subscribed topics
    key v5  ConsumerGroupMemberMetadata      (group, member)  value v0: what the member sent
    key v6  ConsumerGroupTargetAssignmentMetadata (group)     value v0: assignment epoch
    key v7  ConsumerGroupTargetAssignmentMember (group, member) value v0: its target
    key v8  ConsumerGroupCurrentMemberAssignment (group, member) value v0: its epochs,
            state, assigned partitions and partitions pending revocation

A record whose value is None is a tombstone: it deletes what its key names. A member
leaves as three tombstones (current assignment, target assignment, metadata, in that
order); a group is deleted by the tombstones of all its records, the group metadata
record last.

Their bytes (Kafka's layouts) are :mod:`~sluice.group.consumer_records_codec`'s. Kafka
4.1 replaced the partition metadata record by a hash of the topics' metadata in the
group metadata record; Sluice keeps writing the partition metadata record (Kafka still
reads it) and leaves the hash 0 ("not computed").
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import ClassVar

from sluice.group.consumer_group import ClassicMemberMetadata, MemberState

NO_METADATA_HASH = 0
"""The metadata hash Sluice writes (Kafka's "not computed")."""
NO_REBALANCE_TIMEOUT_MS = -1
"""The member metadata value's default rebalance timeout."""


@dataclass(frozen=True)
class TopicPartitions:
    """Partitions of one topic, named by its id (Kafka's records and responses do)."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]


@dataclass(frozen=True)
class TopicMetadataEntry:
    """A subscribed topic as the assignment last saw it."""

    topic_id: uuid.UUID
    topic_name: str
    partition_count: int
    partition_racks: tuple[tuple[str, ...], ...] = ()
    """Per partition, the racks of its replicas (empty when no broker has a rack)."""


# ======================================================================= keys


@dataclass(frozen=True)
class ConsumerGroupMetadataKey:
    VERSION: ClassVar[int] = 3
    group_id: str


@dataclass(frozen=True)
class ConsumerGroupPartitionMetadataKey:
    VERSION: ClassVar[int] = 4
    group_id: str


@dataclass(frozen=True)
class ConsumerGroupMemberMetadataKey:
    VERSION: ClassVar[int] = 5
    group_id: str
    member_id: str


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    VERSION: ClassVar[int] = 6
    group_id: str


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMemberKey:
    VERSION: ClassVar[int] = 7
    group_id: str
    member_id: str


@dataclass(frozen=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    VERSION: ClassVar[int] = 8
    group_id: str
    member_id: str


# ===================================================================== values


@dataclass(frozen=True)
class ConsumerGroupMetadataValue:
    VERSION: ClassVar[int] = 0
    epoch: int
    metadata_hash: int = NO_METADATA_HASH


@dataclass(frozen=True)
class ConsumerGroupPartitionMetadataValue:
    VERSION: ClassVar[int] = 0
    topics: tuple[TopicMetadataEntry, ...]


@dataclass(frozen=True)
class ConsumerGroupMemberMetadataValue:
    VERSION: ClassVar[int] = 0
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None
    """Tag 0: a member of the classic protocol's session timeout and protocols."""


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    VERSION: ClassVar[int] = 0
    assignment_epoch: int


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMemberValue:
    VERSION: ClassVar[int] = 0
    topic_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    VERSION: ClassVar[int] = 0
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned_partitions: tuple[TopicPartitions, ...]
    partitions_pending_revocation: tuple[TopicPartitions, ...]


ConsumerGroupRecordKey = (
    ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
)
ConsumerGroupRecordValue = (
    ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
)

_VALUE_TYPE: dict[type[ConsumerGroupRecordKey], type[ConsumerGroupRecordValue]] = {
    ConsumerGroupMetadataKey: ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey: ConsumerGroupPartitionMetadataValue,
    ConsumerGroupMemberMetadataKey: ConsumerGroupMemberMetadataValue,
    ConsumerGroupTargetAssignmentMetadataKey: ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey: ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupCurrentMemberAssignmentKey: ConsumerGroupCurrentMemberAssignmentValue,
}


@dataclass(frozen=True)
class ConsumerGroupRecord:
    """One record: a key and its value, or None for a tombstone."""

    key: ConsumerGroupRecordKey
    value: ConsumerGroupRecordValue | None

    def __post_init__(self) -> None:
        if self.value is not None:
            assert isinstance(self.value, _VALUE_TYPE[type(self.key)]), "value fits its key"

    @property
    def is_tombstone(self) -> bool:
        return self.value is None
