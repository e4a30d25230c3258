"""The bytes of the consumer-group records (KIP-848) in ``__consumer_offsets``, as Kafka
lays them out, so Kafka's tools and brokers read what Sluice writes and the reverse.

The records themselves are :mod:`~sluice.group.consumer_records`. A key is an int16
naming the record type (3–8) and the key's fields in the old, fixed layout; a value is
an int16 version (0) and its fields in the *flexible* layout of Kafka's messages::

    key (types 3, 4, 6: group only; 5, 7, 8: group, member)
    ┌─────────┬─────────┬──────────┐
    │ i16 type│ group s │ member s │
    └─────────┴─────────┴──────────┘

    value, version 0 (every struct, nested ones too, ends with its tagged fields)
    3 ConsumerGroupMetadata             epoch i32 │ tags (0: metadata hash i64,
                                                  │       1: creation time i64)
    4 ConsumerGroupPartitionMetadata    [topic id u │ name cs │ partitions i32
                                         │ [partition i32 │ [rack cs] │ tags] │ tags] │ tags
    5 ConsumerGroupMemberMetadata       instance cs? │ rack cs? │ client id cs │ client
                                        host cs │ [topic cs] │ regex cs? │ rebalance
                                        timeout i32 │ assignor cs? │ tags (0: the
                                        classic member's protocols)
    6 ConsumerGroupTargetAssignmentMetadata  assignment epoch i32 │ tags
    7 ConsumerGroupTargetAssignmentMember    [topic id u │ [partition i32] │ tags] │ tags
    8 ConsumerGroupCurrentMemberAssignment   epoch i32 │ previous epoch i32 │ state i8
                                        │ assigned [topic id u │ [i32] │ tags]
                                        │ pending revocation [same] │ tags

    s   = int16 length, then UTF-8          cs  = uvarint length + 1, then UTF-8
    cs? = as cs, 0 meaning null             [x] = uvarint count + 1, then the entries
    u   = 16 bytes (a topic id)             tags = uvarint count, then each: uvarint
                                                   tag │ uvarint size │ bytes

    5, tag 0: a classic member's metadata, a nullable struct (int8 1, then the struct)
                                        session timeout i32 │ [protocol name cs
                                        │ metadata cb │ tags] │ tags
    cb  = uvarint length + 1, then the bytes

Sluice writes two tagged fields only: the metadata hash when it is not 0 (0 is Kafka's
"not computed", which Kafka leaves out) and a classic member's metadata (tag 0 of the
member metadata value: a member of the classic protocol inside a consumer group, see
:mod:`~sluice.group.consumer_classic`). Tags it does not know are skipped, as Kafka
skips them. Decoding checks every length and count against the bytes left and refuses
trailing bytes; anything malformed raises ``CorruptMessage``.
"""

from __future__ import annotations

import struct
import uuid

from sluice.common.errors import CorruptMessage
from sluice.group.consumer_group import ClassicMemberMetadata, MemberState
from sluice.group.consumer_records import (
    NO_METADATA_HASH,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupRecordKey,
    ConsumerGroupRecordValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicMetadataEntry,
    TopicPartitions,
)
from sluice.group.records import STRING_BYTES_MAX, RecordReader, uvarint

CONSUMER_GROUP_KEY_VERSIONS = range(
    ConsumerGroupMetadataKey.VERSION, ConsumerGroupCurrentMemberAssignmentKey.VERSION + 1
)
"""The key versions (record types) of consumer-group records: 3 to 8."""
METADATA_HASH_TAG = 0
"""The tagged field of the group metadata value holding Kafka's metadata hash."""
CLASSIC_MEMBER_METADATA_TAG = 0
"""The tagged field of the member metadata value holding a classic member's metadata."""
_NULLABLE_STRUCT_PRESENT = 1
"""The int8 in front of a nullable struct that is not null (Kafka's generated code)."""
UUID_BYTES = 16
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_GROUP_ONLY_KEYS = (
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)


def key_version(key: bytes) -> int:
    """The record type a ``__consumer_offsets`` key starts with (CorruptMessage if none)."""
    if len(key) < _I16.size:
        raise CorruptMessage(f"__consumer_offsets key of {len(key)} bytes")
    version: int = _I16.unpack_from(key)[0]
    return version


def is_consumer_group_key(key: bytes) -> bool:
    return len(key) >= _I16.size and key_version(key) in CONSUMER_GROUP_KEY_VERSIONS


# ===================================================================== writing


def _string(value: str) -> bytes:
    encoded = value.encode()
    assert len(encoded) <= STRING_BYTES_MAX, "strings are bounded where they enter"
    return _I16.pack(len(encoded)) + encoded


def _compact_string(value: str | None) -> bytes:
    if value is None:
        return uvarint(0)
    encoded = value.encode()
    assert len(encoded) <= STRING_BYTES_MAX, "strings are bounded where they enter"
    return uvarint(len(encoded) + 1) + encoded


def _array(entries: list[bytes]) -> bytes:
    return uvarint(len(entries) + 1) + b"".join(entries)


_NO_TAGS = uvarint(0)


def _topic_partitions(entries: tuple[TopicPartitions, ...]) -> bytes:
    return _array(
        [
            entry.topic_id.bytes + _array([_I32.pack(p) for p in entry.partitions]) + _NO_TAGS
            for entry in entries
        ]
    )


def encode_key(key: ConsumerGroupRecordKey) -> bytes:
    out = _I16.pack(key.VERSION) + _string(key.group_id)
    if not isinstance(key, _GROUP_ONLY_KEYS):
        out += _string(key.member_id)
    return out


def encode_value(value: ConsumerGroupRecordValue) -> bytes:
    out = _I16.pack(value.VERSION)
    if isinstance(value, ConsumerGroupMetadataValue):
        out += _I32.pack(value.epoch)
        if value.metadata_hash != NO_METADATA_HASH:
            field = _I64.pack(value.metadata_hash)
            return out + uvarint(1) + uvarint(METADATA_HASH_TAG) + uvarint(len(field)) + field
    elif isinstance(value, ConsumerGroupPartitionMetadataValue):
        out += _array([_topic_metadata(topic) for topic in value.topics])
    elif isinstance(value, ConsumerGroupMemberMetadataValue):
        out += (
            _compact_string(value.instance_id)
            + _compact_string(value.rack_id)
            + _compact_string(value.client_id)
            + _compact_string(value.client_host)
            + _array([_compact_string(name) for name in value.subscribed_topic_names])
            + _compact_string(value.subscribed_topic_regex)
            + _I32.pack(value.rebalance_timeout_ms)
            + _compact_string(value.server_assignor)
        )
        if value.classic_member_metadata is not None:
            field = _classic_member_metadata(value.classic_member_metadata)
            return (
                out
                + uvarint(1)
                + uvarint(CLASSIC_MEMBER_METADATA_TAG)
                + uvarint(len(field))
                + field
            )
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        out += _I32.pack(value.assignment_epoch)
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        out += _topic_partitions(value.topic_partitions)
    else:
        out += (
            _I32.pack(value.member_epoch)
            + _I32.pack(value.previous_member_epoch)
            + struct.pack(">b", int(value.state))
            + _topic_partitions(value.assigned_partitions)
            + _topic_partitions(value.partitions_pending_revocation)
        )
    return out + _NO_TAGS


def _classic_member_metadata(metadata: ClassicMemberMetadata) -> bytes:
    protocols = [
        _compact_string(name) + uvarint(len(data) + 1) + data + _NO_TAGS
        for name, data in metadata.protocols
    ]
    return (
        struct.pack(">b", _NULLABLE_STRUCT_PRESENT)
        + _I32.pack(metadata.session_timeout_ms)
        + _array(protocols)
        + _NO_TAGS
    )


def _topic_metadata(topic: TopicMetadataEntry) -> bytes:
    racks = [
        _I32.pack(partition) + _array([_compact_string(r) for r in partition_racks]) + _NO_TAGS
        for partition, partition_racks in enumerate(topic.partition_racks)
    ]
    return (
        topic.topic_id.bytes
        + _compact_string(topic.topic_name)
        + _I32.pack(topic.partition_count)
        + _array(racks)
        + _NO_TAGS
    )


def encode_record(record: ConsumerGroupRecord) -> tuple[bytes, bytes | None]:
    """The record's key and value bytes (value None: a tombstone)."""
    value = None if record.value is None else encode_value(record.value)
    return encode_key(record.key), value


# ===================================================================== reading


class _FlexibleReader(RecordReader):
    """The flexible layout's fields on top of the fixed ones."""

    def int8(self) -> int:
        value: int = struct.unpack(">b", self.take(1))[0]
        return value

    def topic_id(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self.take(UUID_BYTES)))

    def nullable_compact_string(self) -> str | None:
        length = self.uvarint() - 1
        if length == -1:
            return None
        try:
            return str(self.take(length), "utf-8")
        except UnicodeDecodeError:
            raise self._corrupt("string is not UTF-8") from None

    def compact_bytes(self) -> bytes:
        length = self.uvarint() - 1
        if length < 0:
            raise self._corrupt("null bytes where bytes are required")
        return bytes(self.take(length))

    def compact_count(self, entry_bytes_min: int) -> int:
        count = self.uvarint() - 1
        if count < 0 or count * entry_bytes_min > self.remaining:
            raise self._corrupt(f"array of {count} entries in {self.remaining} bytes")
        return count

    def tagged_fields(self) -> dict[int, bytes]:
        """Every tagged field of the struct, by tag (the caller keeps those it knows)."""
        fields = {}
        count = self.uvarint()
        if count * 2 > self.remaining:
            raise self._corrupt(f"{count} tagged fields in {self.remaining} bytes")
        for _ in range(count):
            tag = self.uvarint()
            fields[tag] = bytes(self.take(self.uvarint()))
        return fields

    def topic_partitions(self) -> tuple[TopicPartitions, ...]:
        entries = []
        for _ in range(self.compact_count(UUID_BYTES + 2)):
            topic_id = self.topic_id()
            partitions = tuple(self.int32() for _ in range(self.compact_count(4)))
            self.tagged_fields()
            entries.append(TopicPartitions(topic_id, partitions))
        return tuple(entries)


def decode_key(data: bytes) -> ConsumerGroupRecordKey:
    reader = _FlexibleReader(data, "consumer group record key")
    key_type = reader.int16()
    if key_type not in CONSUMER_GROUP_KEY_VERSIONS:
        raise CorruptMessage(f"consumer group record key: unknown type {key_type}")
    group_id = reader.string()
    key: ConsumerGroupRecordKey
    if key_type == ConsumerGroupMetadataKey.VERSION:
        key = ConsumerGroupMetadataKey(group_id)
    elif key_type == ConsumerGroupPartitionMetadataKey.VERSION:
        key = ConsumerGroupPartitionMetadataKey(group_id)
    elif key_type == ConsumerGroupTargetAssignmentMetadataKey.VERSION:
        key = ConsumerGroupTargetAssignmentMetadataKey(group_id)
    elif key_type == ConsumerGroupMemberMetadataKey.VERSION:
        key = ConsumerGroupMemberMetadataKey(group_id, reader.string())
    elif key_type == ConsumerGroupTargetAssignmentMemberKey.VERSION:
        key = ConsumerGroupTargetAssignmentMemberKey(group_id, reader.string())
    else:
        key = ConsumerGroupCurrentMemberAssignmentKey(group_id, reader.string())
    reader.end()
    return key


def decode_value(key: ConsumerGroupRecordKey, data: bytes) -> ConsumerGroupRecordValue:
    """The value of ``key``'s record type."""
    reader = _FlexibleReader(data, f"{type(key).__name__.removesuffix('Key')} value")
    reader.version(0, 0)
    value: ConsumerGroupRecordValue
    if isinstance(key, ConsumerGroupMetadataKey):
        epoch = reader.int32()
        tags = reader.tagged_fields()
        metadata_hash = NO_METADATA_HASH
        if METADATA_HASH_TAG in tags:
            field = _FlexibleReader(tags[METADATA_HASH_TAG], "consumer group metadata hash")
            metadata_hash = field.int64()
            field.end()
        reader.end()
        return ConsumerGroupMetadataValue(epoch, metadata_hash)
    if isinstance(key, ConsumerGroupPartitionMetadataKey):
        value = ConsumerGroupPartitionMetadataValue(
            tuple(
                _read_topic_metadata(reader)
                for _ in range(reader.compact_count(UUID_BYTES + 1 + 4 + 1 + 1))
            )
        )
    elif isinstance(key, ConsumerGroupMemberMetadataKey):
        instance_id = reader.nullable_compact_string()
        rack_id = reader.nullable_compact_string()
        client_id = reader.compact_string()
        client_host = reader.compact_string()
        topic_names = tuple(reader.compact_string() for _ in range(reader.compact_count(1)))
        regex = reader.nullable_compact_string()
        rebalance_timeout_ms = reader.int32()
        server_assignor = reader.nullable_compact_string()
        tags = reader.tagged_fields()
        reader.end()
        classic = None
        if CLASSIC_MEMBER_METADATA_TAG in tags:
            classic = _read_classic_member_metadata(tags[CLASSIC_MEMBER_METADATA_TAG])
        return ConsumerGroupMemberMetadataValue(
            instance_id=instance_id,
            rack_id=rack_id,
            client_id=client_id,
            client_host=client_host,
            subscribed_topic_names=topic_names,
            subscribed_topic_regex=regex,
            rebalance_timeout_ms=rebalance_timeout_ms,
            server_assignor=server_assignor,
            classic_member_metadata=classic,
        )
    elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        value = ConsumerGroupTargetAssignmentMetadataValue(reader.int32())
    elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        value = ConsumerGroupTargetAssignmentMemberValue(reader.topic_partitions())
    else:
        value = ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=reader.int32(),
            previous_member_epoch=reader.int32(),
            state=MemberState.from_byte(reader.int8()),
            assigned_partitions=reader.topic_partitions(),
            partitions_pending_revocation=reader.topic_partitions(),
        )
    reader.tagged_fields()
    reader.end()
    return value


def _read_classic_member_metadata(data: bytes) -> ClassicMemberMetadata | None:
    reader = _FlexibleReader(data, "classic member metadata")
    if reader.int8() < 0:
        reader.end()
        return None
    session_timeout_ms = reader.int32()
    protocols = []
    for _ in range(reader.compact_count(1 + 1 + 1)):
        name = reader.compact_string()
        protocols.append((name, reader.compact_bytes()))
        reader.tagged_fields()
    reader.tagged_fields()
    reader.end()
    if not protocols:
        raise CorruptMessage("classic member metadata without protocols")
    return ClassicMemberMetadata(session_timeout_ms, tuple(protocols))


def _read_topic_metadata(reader: _FlexibleReader) -> TopicMetadataEntry:
    topic_id = reader.topic_id()
    name = reader.compact_string()
    partition_count = reader.int32()
    racks: dict[int, tuple[str, ...]] = {}
    for _ in range(reader.compact_count(4 + 1 + 1)):
        partition = reader.int32()
        racks[partition] = tuple(reader.compact_string() for _ in range(reader.compact_count(1)))
        reader.tagged_fields()
    reader.tagged_fields()
    if racks and (partition_count < 0 or not all(0 <= p < partition_count for p in racks)):
        raise CorruptMessage(f"topic {name}: racks of partitions beyond its {partition_count}")
    partition_racks = tuple(racks.get(p, ()) for p in range(partition_count)) if racks else ()
    return TopicMetadataEntry(topic_id, name, partition_count, partition_racks)


def decode_record(key: bytes, value: bytes | None) -> ConsumerGroupRecord:
    """One record of ``__consumer_offsets`` whose key type is 3 to 8."""
    decoded_key = decode_key(key)
    decoded_value = None if value is None else decode_value(decoded_key, value)
    return ConsumerGroupRecord(decoded_key, decoded_value)
