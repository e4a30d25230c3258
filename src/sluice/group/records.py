"""The records of ``__consumer_offsets``, in Kafka's own layouts so Kafka's tools (and a
Kafka broker reading a copied log) understand them.

Every record key starts with an int16 version that says which kind of record it is;
the value starts with its own int16 version. A record with a null value is a
tombstone: the offset (or the whole group) is deleted, and compaction drops it later::

    key, version 0 or 1: an offset commit     key, version 2: group metadata
    ┌──────┬─────────┬─────────┬───────────┐  ┌──────┬─────────┐
    │ i16 v│ group s │ topic s │ partition │  │ i16 2│ group s │
    │      │         │         │ i32       │  │      │         │
    └──────┴─────────┴─────────┴───────────┘  └──────┴─────────┘

    offset commit value (we write v3, or v1 when the commit carries an expiry time;
    v0–v3 are read):
    ┌──────┬────────┬──────────────┬────────────┬──────────────────┬──────────────────┐
    │ i16 v│ offset │ leader_epoch │ metadata s │ commit_timestamp │ expire_timestamp │
    │      │ i64    │ i32   (v3)   │            │ i64              │ i64   (v1 only)  │
    └──────┴────────┴──────────────┴────────────┴──────────────────┴──────────────────┘

    group metadata value (we write v3; v0–v3 are read):
    ┌──────┬─────────────┬────────────┬────────────┬──────────┬─────────────────┬─────────┐
    │ i16 v│ protocol_   │ generation │ protocol s?│ leader s?│ current_state_  │ members │
    │      │ type s      │ i32        │            │          │ timestamp i64   │ [member]│
    │      │             │            │            │          │ (v2+)           │         │
    └──────┴─────────────┴────────────┴────────────┴──────────┴─────────────────┴─────────┘
    member: member_id s │ group_instance_id s? (v3+) │ client_id s │ client_host s
            │ rebalance_timeout i32 (v1+) │ session_timeout i32 │ subscription b │ assignment b

    s  = int16 length, then UTF-8 (s? : length -1 means null)
    b  = int32 length, then the bytes
    [x] = int32 count, then the entries
    all integers big-endian

    key, version 11: share group metadata
    ┌───────┬─────────┐
    │ i16 11│ group s │
    └───────┴─────────┘

    share group metadata value (v0, flexible):
    ┌──────┬───────┬───────────────┬─────────────────────────────┐
    │ i16 0│ epoch │ metadata_hash │ tagged fields               │
    │      │ i32   │ i64 (0: none) │ (tag 1000: the topic names) │
    └──────┴───────┴───────────────┴─────────────────────────────┘
    tagged fields: uvarint count, then each: uvarint tag │ uvarint size │ bytes
    tag 1000 (Sluice's): every topic the group ever subscribed to, a compact array of
    compact strings (uvarint count + 1, then uvarint length + 1 and UTF-8)

The share group metadata record is Kafka's ShareGroupMetadata (key version 11, value
v0: the group epoch and a hash of the subscribed topics' metadata, which Sluice leaves
0, flexible), so Kafka's tools read it; the topic names ride in a
tagged field of Sluice's own (Kafka keeps them in its ShareGroupStatePartitionMetadata
record, version 15), which Kafka's readers skip as they skip every unknown tag. Deleting
the group's share-partition state needs them.

An empty ``protocol_type`` means a group that only stores offsets (a "simple" consumer
that assigns partitions itself). Decoding checks every length against the bytes left
and refuses trailing bytes; anything malformed raises ``CorruptMessage``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sluice.common.errors import CorruptMessage, KafkaError

OFFSET_COMMIT_KEY_VERSION = 1
"""The key version Kafka writes for offset commits (0 is read too)."""
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_WITH_EXPIRY_VERSION = 1
"""The only value version with an explicit expiry time (OffsetCommit v2-4 with a
retention time)."""
GROUP_METADATA_VALUE_VERSION = 3
SHARE_GROUP_METADATA_KEY_VERSION = 11
"""Kafka's key version of ShareGroupMetadata (Kafka's share-group records use 10–15;
Sluice writes only this one)."""
SHARE_GROUP_METADATA_VALUE_VERSION = 0
NO_METADATA_HASH = 0
"""The metadata hash Sluice writes (Kafka's "not computed"; Kafka recomputes it)."""
SHARE_GROUP_TOPICS_TAG = 1_000
"""The tagged field of the share group metadata value that holds the topic names (a tag
far from Kafka's own, which start at 0)."""

STRING_BYTES_MAX = 32_767
"""Longest string the int16 length prefix can describe."""

NO_TIMESTAMP = -1
NO_LEADER_EPOCH = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True)
class OffsetCommitKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupMetadataKey:
    group_id: str


@dataclass(frozen=True)
class ShareGroupMetadataKey:
    group_id: str


RecordKey = OffsetCommitKey | GroupMetadataKey | ShareGroupMetadataKey


@dataclass(frozen=True)
class ShareGroupMetadataValue:
    epoch: int
    """The group epoch."""
    subscribed_topic_names: tuple[str, ...]
    """Every topic the group has ever subscribed to, sorted."""


@dataclass(frozen=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp_ms: int = NO_TIMESTAMP
    expire_timestamp_ms: int = NO_TIMESTAMP
    """Set only by OffsetCommit v2–4 requests with an explicit retention time."""


@dataclass(frozen=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    """The member's metadata for the group's selected protocol."""
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberMetadataValue, ...]


# ---------------------------------------------------------------------------- writing


class _Writer:
    def __init__(self, version: int) -> None:
        self._parts: list[bytes] = [_I16.pack(version)]

    def int32(self, value: int) -> None:
        self._parts.append(_I32.pack(value))

    def int64(self, value: int) -> None:
        self._parts.append(_I64.pack(value))

    def string(self, value: str | None) -> None:
        if value is None:
            self._parts.append(_I16.pack(-1))
            return
        encoded = value.encode()
        assert len(encoded) <= STRING_BYTES_MAX, "strings are bounded where they enter"
        self._parts.append(_I16.pack(len(encoded)))
        self._parts.append(encoded)

    def byte_array(self, value: bytes) -> None:
        self._parts.append(_I32.pack(len(value)))
        self._parts.append(value)

    def raw(self, value: bytes) -> None:
        self._parts.append(value)

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


def uvarint(value: int) -> bytes:
    """Kafka's unsigned varint (base-128, little-endian groups)."""
    assert value >= 0
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _compact_string(value: str) -> bytes:
    encoded = value.encode()
    assert len(encoded) <= STRING_BYTES_MAX, "strings are bounded where they enter"
    return uvarint(len(encoded) + 1) + encoded


def encode_key(key: RecordKey) -> bytes:
    if isinstance(key, OffsetCommitKey):
        writer = _Writer(OFFSET_COMMIT_KEY_VERSION)
        writer.string(key.group_id)
        writer.string(key.topic)
        writer.int32(key.partition)
    elif isinstance(key, ShareGroupMetadataKey):
        writer = _Writer(SHARE_GROUP_METADATA_KEY_VERSION)
        writer.string(key.group_id)
    else:
        writer = _Writer(GROUP_METADATA_KEY_VERSION)
        writer.string(key.group_id)
    return writer.getvalue()


def encode_share_group_metadata_value(value: ShareGroupMetadataValue) -> bytes:
    writer = _Writer(SHARE_GROUP_METADATA_VALUE_VERSION)
    writer.int32(value.epoch)
    writer.int64(NO_METADATA_HASH)
    topics = uvarint(len(value.subscribed_topic_names) + 1) + b"".join(
        _compact_string(name) for name in value.subscribed_topic_names
    )
    writer.raw(uvarint(1))  # one tagged field
    writer.raw(uvarint(SHARE_GROUP_TOPICS_TAG))
    writer.raw(uvarint(len(topics)))
    writer.raw(topics)
    return writer.getvalue()


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    """Version 3, or version 1 when the commit has an expiry time (v3 has no field for
    it; Kafka makes the same choice)."""
    if value.expire_timestamp_ms != NO_TIMESTAMP:
        writer = _Writer(OFFSET_COMMIT_VALUE_WITH_EXPIRY_VERSION)
        writer.int64(value.offset)
        writer.string(value.metadata)
        writer.int64(value.commit_timestamp_ms)
        writer.int64(value.expire_timestamp_ms)
        return writer.getvalue()
    writer = _Writer(OFFSET_COMMIT_VALUE_VERSION)
    writer.int64(value.offset)
    writer.int32(value.leader_epoch)
    writer.string(value.metadata)
    writer.int64(value.commit_timestamp_ms)
    return writer.getvalue()


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    writer = _Writer(GROUP_METADATA_VALUE_VERSION)
    writer.string(value.protocol_type)
    writer.int32(value.generation)
    writer.string(value.protocol)
    writer.string(value.leader)
    writer.int64(value.current_state_timestamp_ms)
    writer.int32(len(value.members))
    for member in value.members:
        writer.string(member.member_id)
        writer.string(member.group_instance_id)
        writer.string(member.client_id)
        writer.string(member.client_host)
        writer.int32(member.rebalance_timeout_ms)
        writer.int32(member.session_timeout_ms)
        writer.byte_array(member.subscription)
        writer.byte_array(member.assignment)
    return writer.getvalue()


# ---------------------------------------------------------------------------- reading


class RecordReader:
    """Reads the fields of one record's key or value; anything malformed raises
    ``CorruptMessage`` naming ``what`` and the byte."""

    def __init__(self, data: bytes, what: str) -> None:
        self._view = memoryview(data)
        self._position = 0
        self._what = what

    def _corrupt(self, problem: str) -> KafkaError:
        return CorruptMessage(f"{self._what}: {problem} at byte {self._position}")

    def take(self, size: int) -> memoryview:
        return self._take(size)

    def _take(self, size: int) -> memoryview:
        end = self._position + size
        if size < 0 or end > len(self._view):
            raise self._corrupt(f"needs {size} more bytes, {self.remaining} left")
        chunk = self._view[self._position : end]
        self._position = end
        return chunk

    @property
    def remaining(self) -> int:
        return len(self._view) - self._position

    def int16(self) -> int:
        value: int = _I16.unpack(self._take(2))[0]
        return value

    def int32(self) -> int:
        value: int = _I32.unpack(self._take(4))[0]
        return value

    def int64(self) -> int:
        value: int = _I64.unpack(self._take(8))[0]
        return value

    def nullable_string(self) -> str | None:
        length = self.int16()
        if length == -1:
            return None
        if length < 0:
            raise self._corrupt(f"string length {length}")
        try:
            return str(self._take(length), "utf-8")
        except UnicodeDecodeError:
            raise self._corrupt("string is not UTF-8") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise self._corrupt("null where a string is required")
        return value

    def byte_array(self) -> bytes:
        length = self.int32()
        if length < 0:
            raise self._corrupt(f"bytes length {length}")
        return bytes(self._take(length))

    def uvarint(self) -> int:
        value = 0
        for shift in range(0, 35, 7):
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
        raise self._corrupt("varint longer than 5 bytes")

    def compact_string(self) -> str:
        length = self.uvarint() - 1
        if length < 0:
            raise self._corrupt("null where a string is required")
        try:
            return str(self._take(length), "utf-8")
        except UnicodeDecodeError:
            raise self._corrupt("string is not UTF-8") from None

    def count(self, entry_bytes_min: int) -> int:
        count = self.int32()
        if count < 0 or count * entry_bytes_min > self.remaining:
            raise self._corrupt(f"array of {count} entries in {self.remaining} bytes")
        return count

    def version(self, low: int, high: int) -> int:
        version = self.int16()
        if not low <= version <= high:
            raise self._corrupt(f"unknown version {version} (known: {low}-{high})")
        return version

    def end(self) -> None:
        if self.remaining:
            raise self._corrupt(f"{self.remaining} trailing bytes")


def decode_key(data: bytes) -> RecordKey:
    reader = RecordReader(data, "__consumer_offsets key")
    version = reader.int16()
    key: RecordKey
    if version == SHARE_GROUP_METADATA_KEY_VERSION:
        key = ShareGroupMetadataKey(reader.string())
    elif not 0 <= version <= GROUP_METADATA_KEY_VERSION:
        raise CorruptMessage(f"__consumer_offsets key: unknown version {version}")
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(reader.string())
    else:
        key = OffsetCommitKey(reader.string(), reader.string(), reader.int32())
    reader.end()
    return key


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    reader = RecordReader(data, "offset commit value")
    version = reader.version(0, OFFSET_COMMIT_VALUE_VERSION)
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else NO_LEADER_EPOCH
    metadata = reader.string()
    commit_timestamp_ms = reader.int64()
    expire_timestamp_ms = reader.int64() if version == 1 else NO_TIMESTAMP
    reader.end()
    return OffsetCommitValue(
        offset, leader_epoch, metadata, commit_timestamp_ms, expire_timestamp_ms
    )


_MEMBER_BYTES_MIN = 2 + 2 + 2 + 4 + 4 + 4
"""member id, client id, client host (empty strings), session timeout, two empty byte
arrays: the smallest possible member entry (v0)."""


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    reader = RecordReader(data, "group metadata value")
    version = reader.version(0, GROUP_METADATA_VALUE_VERSION)
    protocol_type = reader.string()
    generation = reader.int32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    current_state_timestamp_ms = reader.int64() if version >= 2 else NO_TIMESTAMP
    members = []
    for _ in range(reader.count(_MEMBER_BYTES_MIN)):
        member_id = reader.string()
        group_instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        rebalance_timeout_ms = reader.int32() if version >= 1 else None
        session_timeout_ms = reader.int32()
        if rebalance_timeout_ms is None:
            rebalance_timeout_ms = session_timeout_ms  # v0 had none: Kafka used the session's
        members.append(
            MemberMetadataValue(
                member_id=member_id,
                group_instance_id=group_instance_id,
                client_id=client_id,
                client_host=client_host,
                rebalance_timeout_ms=rebalance_timeout_ms,
                session_timeout_ms=session_timeout_ms,
                subscription=reader.byte_array(),
                assignment=reader.byte_array(),
            )
        )
    reader.end()
    return GroupMetadataValue(
        protocol_type=protocol_type,
        generation=generation,
        protocol=protocol,
        leader=leader,
        current_state_timestamp_ms=current_state_timestamp_ms,
        members=tuple(members),
    )


def decode_share_group_metadata_value(data: bytes) -> ShareGroupMetadataValue:
    """Tagged fields other than the topic names are skipped."""
    reader = RecordReader(data, "share group metadata value")
    reader.version(0, SHARE_GROUP_METADATA_VALUE_VERSION)
    epoch = reader.int32()
    reader.int64()  # Kafka's metadata hash: Sluice compares the topics themselves
    topics: tuple[str, ...] = ()
    for _ in range(reader.uvarint()):
        tag = reader.uvarint()
        size = reader.uvarint()
        field = RecordReader(bytes(reader.take(size)), "share group metadata value topics")
        if tag != SHARE_GROUP_TOPICS_TAG:
            continue
        count = field.uvarint() - 1
        if count < 0 or count > field.remaining:
            raise CorruptMessage(f"share group metadata value: {count} topics in {size} bytes")
        topics = tuple(field.compact_string() for _ in range(count))
        field.end()
    reader.end()
    return ShareGroupMetadataValue(epoch, topics)
