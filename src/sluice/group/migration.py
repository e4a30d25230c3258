"""What the online upgrade and downgrade between a classic group and a consumer group
(KIP-848) hand each other, Kafka's ``group.consumer.migration.policy``, and the bytes of
the consumer protocol embedded in classic groups' JoinGroup and SyncGroup.

A classic group of Kafka consumers (protocol type ``consumer``) becomes a consumer group
when a member of the new protocol joins it, and a consumer group whose last member of
the new protocol leaves becomes a classic group again; the group id and its committed
offsets stay. The two halves meet in :class:`ClassicGroupImage`, the classic group as
plain data with its members' subscriptions and assignments decoded::

    classic Group ──(classic_conversion)──▶ ClassicGroupImage ──(consumer_classic)──▶
                                                        records of a consumer group
    consumer group ─(consumer_heartbeat, last consumer member leaves)─▶ ClassicGroupImage
                   ──(classic_conversion)──▶ classic Group, its metadata record, a rebalance

The embedded consumer protocol (Kafka's ``ConsumerProtocolSubscription`` and
``ConsumerProtocolAssignment``, int16 version first; strings int16-length, arrays
int32-counted, bytes int32-length with -1 for null)::

    subscription v0  [topic s] │ user data b?
                 v1  + owned partitions [topic s │ [partition i32]]
                 v2  + generation i32
                 v3  + rack s?
    assignment   v0+ [topic s │ [partition i32]] │ user data b?

A version newer than the newest known is read as the newest (later versions only
append fields), as Kafka reads it.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SUBSCRIPTION_VERSION_MAX = 3
"""The newest ConsumerProtocolSubscription version read field by field."""
ASSIGNMENT_VERSION_MAX = 3
"""The newest ConsumerProtocolAssignment version (every one has the same fields)."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class MigrationPolicy(enum.IntEnum):
    """group.consumer.migration.policy: which conversions between a classic group with
    members and a consumer group are made (Kafka 4.3's default: both)."""

    DISABLED = 0
    UPGRADE = 1
    DOWNGRADE = 2
    BIDIRECTIONAL = 3

    @classmethod
    def parse(cls, text: str) -> MigrationPolicy:
        """Kafka's names, in any case; ValueError naming them otherwise."""
        try:
            return cls[text.strip().upper()]
        except KeyError:
            names = ", ".join(policy.name.lower() for policy in cls)
            raise ValueError(f"{text!r} is not one of {names}") from None

    @property
    def upgrades(self) -> bool:
        return self in (MigrationPolicy.UPGRADE, MigrationPolicy.BIDIRECTIONAL)

    @property
    def downgrades(self) -> bool:
        return self in (MigrationPolicy.DOWNGRADE, MigrationPolicy.BIDIRECTIONAL)


@dataclass(frozen=True)
class ClassicMemberImage:
    """One member of the classic protocol, as both kinds of group need it."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    """(protocol name, subscription bytes) in the member's order of preference."""
    subscribed_topic_names: tuple[str, ...]
    rack_id: str | None
    assignment: Mapping[str, frozenset[int]]
    """Topic name → partitions: its last assignment (upgrade) or its target (downgrade)."""


@dataclass(frozen=True)
class ClassicGroupImage:
    group_id: str
    generation: int
    """Upgrade: the classic group's generation, which becomes the group, assignment and
    member epochs; downgrade: the consumer group's epoch, which becomes the generation."""
    members: tuple[ClassicMemberImage, ...]
    rebalance: bool = True
    """Downgrade: whether the classic group rebalances at once. It does when a member
    left; a static classic member that took the place of the last member of the new
    protocol with the same subscription leaves it Stable (its own JoinGroup carries on
    with its predecessor's assignment), as in Kafka."""


class MalformedConsumerProtocol(ValueError):
    """Bytes that are not Kafka's embedded consumer protocol."""


@dataclass(frozen=True)
class ConsumerSubscription:
    version: int
    topics: tuple[str, ...]
    owned_partitions: Mapping[str, frozenset[int]]
    """Topic name → partitions the member owns as it joins (v1+; empty before)."""
    rack_id: str | None


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._position = 0
        self._what = what

    def _take(self, size: int) -> bytes:
        if size < 0 or self._position + size > len(self._data):
            raise MalformedConsumerProtocol(
                f"{self._what}: {size} byte(s) wanted at {self._position} of {len(self._data)}"
            )
        chunk = self._data[self._position : self._position + size]
        self._position += size
        return chunk

    def int16(self) -> int:
        value: int = _I16.unpack(self._take(_I16.size))[0]
        return value

    def int32(self) -> int:
        value: int = _I32.unpack(self._take(_I32.size))[0]
        return value

    def nullable_string(self) -> str | None:
        length = self.int16()
        if length < 0:
            return None
        try:
            return self._take(length).decode()
        except UnicodeDecodeError:
            raise MalformedConsumerProtocol(f"{self._what}: a string is not UTF-8") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise MalformedConsumerProtocol(f"{self._what}: null where a string is required")
        return value

    def count(self, entry_bytes_min: int) -> int:
        count = self.int32()
        if count < 0 or count * entry_bytes_min > len(self._data) - self._position:
            raise MalformedConsumerProtocol(f"{self._what}: array of {count} entries")
        return count

    def nullable_bytes(self) -> None:
        length = self.int32()
        if length >= 0:
            self._take(length)

    def topic_partitions(self) -> dict[str, frozenset[int]]:
        result: dict[str, frozenset[int]] = {}
        for _ in range(self.count(_I16.size + _I32.size)):
            topic = self.string()
            partitions = frozenset(self.int32() for _ in range(self.count(_I32.size)))
            result[topic] = result.get(topic, frozenset()) | partitions
        return result

    @property
    def exhausted(self) -> bool:
        return self._position >= len(self._data)


def decode_subscription(data: bytes) -> ConsumerSubscription:
    """A member's JoinGroup metadata for protocol type ``consumer``."""
    reader = _Reader(data, "consumer protocol subscription")
    version = reader.int16()
    if version < 0:
        raise MalformedConsumerProtocol(f"consumer protocol subscription version {version}")
    topics = tuple(reader.string() for _ in range(reader.count(_I16.size)))
    reader.nullable_bytes()
    known = min(version, SUBSCRIPTION_VERSION_MAX)
    owned: dict[str, frozenset[int]] = {}
    rack_id = None
    # Kafka's defaults for fields a short v1+ subscription leaves out are empty/null.
    if known >= 1 and not reader.exhausted:
        owned = reader.topic_partitions()
    if known >= 2 and not reader.exhausted:
        reader.int32()  # generation: the coordinator knows it
    if known >= 3 and not reader.exhausted:
        rack_id = reader.nullable_string()
    return ConsumerSubscription(version, topics, owned, rack_id)


def decode_assignment(data: bytes) -> dict[str, frozenset[int]]:
    """A member's SyncGroup assignment (topic name → partitions); empty bytes assign
    nothing (a member the leader left out)."""
    if not data:
        return {}
    reader = _Reader(data, "consumer protocol assignment")
    version = reader.int16()
    if version < 0:
        raise MalformedConsumerProtocol(f"consumer protocol assignment version {version}")
    return reader.topic_partitions()


def subscription_version(data: bytes) -> int:
    """The version a member's subscription is written in (0 if unreadable)."""
    if len(data) < _I16.size:
        return 0
    version: int = _I16.unpack_from(data)[0]
    return max(version, 0)


def encode_assignment(assignment: Mapping[str, Iterable[int]], version: int) -> bytes:
    """A SyncGroup assignment in ``version`` (capped to the newest known), topics and
    partitions sorted, without user data."""
    version = min(max(version, 0), ASSIGNMENT_VERSION_MAX)
    out = [_I16.pack(version), _I32.pack(len(assignment))]
    for topic in sorted(assignment):
        encoded = topic.encode()
        partitions = sorted(assignment[topic])
        out += [_I16.pack(len(encoded)), encoded, _I32.pack(len(partitions))]
        out += [_I32.pack(p) for p in partitions]
    out.append(_I32.pack(-1))
    return b"".join(out)
