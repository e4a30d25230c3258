"""The records of ``__share_group_state``: one snapshot per share-partition.

The topic is compacted: a share-partition's latest snapshot is its state, and a null
value (a tombstone) says the share-partition was deleted. Kafka writes ShareSnapshot
and ShareUpdate records (key versions 0 and 1) in its own layout; Sluice writes only
whole snapshots in the layout below, which is not Kafka's byte for byte (a Kafka broker
cannot read it, nor Sluice Kafka's).

Key (version 0)::

    ┌──────────────┬───────────────────────────────┬──────────────┬───────────────┐
    │ version int16│ group id: int16 length         │ topic id     │ partition     │
    │ = 0          │ + UTF-8 bytes                  │ 16 bytes     │ int32         │
    └──────────────┴───────────────────────────────┴──────────────┴───────────────┘

Value (version 0; a null value is the share-partition's tombstone)::

    version int16 (0) │ state epoch int32 │ leader epoch int32 │ start offset int64
    │ state batches: int32 count, each (first offset int64 │ last offset int64
    │ delivery state int8 │ delivery count int16)

All integers are big-endian. Delivery states are Kafka's (AVAILABLE 0, ACKNOWLEDGED 2,
ARCHIVED 4; ACQUIRED is never persisted). Decoding checks every length against the
bytes left, refuses trailing bytes, unknown versions and states, and batches that are
not ascending, disjoint and at or above the start offset: anything malformed raises
``CorruptMessage`` (the coordinator runtime logs and skips such a record).
"""

from __future__ import annotations

import struct
import uuid

from sluice.common.errors import CorruptMessage
from sluice.coordinator.record_reader import RecordReader
from sluice.share.state import DeliveryState, ShareState, ShareStateKey, StateBatch

KEY_VERSION = 0
VALUE_VERSION = 0

PERSISTED_STATES = frozenset(
    {DeliveryState.AVAILABLE, DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED}
)
"""The delivery states a snapshot may hold (acquired records are stored as available)."""

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_KEY_TAIL = struct.Struct(">16si")
_VALUE_HEAD = struct.Struct(">hiiq")
_BATCH = struct.Struct(">qqbh")


def batches_problem(start_offset: int, batches: tuple[StateBatch, ...]) -> str | None:
    """Why ``batches`` are not a valid in-flight window above ``start_offset`` (None if
    they are): each within itself, in a persisted state, ascending and disjoint."""
    previous_last = start_offset - 1
    for batch in batches:
        if batch.first_offset > batch.last_offset:
            return f"batch {batch.first_offset}-{batch.last_offset} ends before it starts"
        if batch.first_offset <= previous_last:
            return (
                f"batch {batch.first_offset}-{batch.last_offset} overlaps what precedes it "
                f"or lies below the start offset {start_offset}"
            )
        if batch.state not in PERSISTED_STATES:
            return f"batch {batch.first_offset}-{batch.last_offset} is {batch.state.name}"
        if batch.delivery_count < 0:
            return f"batch {batch.first_offset}-{batch.last_offset} has a negative count"
        previous_last = batch.last_offset
    return None


def encode_key(key: ShareStateKey) -> bytes:
    group = key.group_id.encode()
    return b"".join(
        (
            _INT16.pack(KEY_VERSION),
            _INT16.pack(len(group)),
            group,
            _KEY_TAIL.pack(key.topic_id.bytes, key.partition),
        )
    )


def encode_value(state: ShareState) -> bytes:
    parts = [
        _VALUE_HEAD.pack(VALUE_VERSION, state.state_epoch, state.leader_epoch, state.start_offset),
        _INT32.pack(len(state.batches)),
    ]
    parts.extend(
        _BATCH.pack(b.first_offset, b.last_offset, int(b.state), b.delivery_count)
        for b in state.batches
    )
    return b"".join(parts)


def decode_key(data: bytes) -> ShareStateKey:
    reader = RecordReader(data, "share state key")
    version = reader.integer(_INT16)
    if version != KEY_VERSION:
        raise CorruptMessage(f"share state key version {version} is not ours")
    group_id = reader.string()
    topic_id, partition = reader.unpack(_KEY_TAIL)
    assert isinstance(topic_id, bytes) and isinstance(partition, int)
    reader.end()
    if partition < 0:
        raise CorruptMessage(f"share state key: partition {partition}")
    return ShareStateKey(group_id, uuid.UUID(bytes=topic_id), partition)


def decode_value(data: bytes) -> ShareState:
    reader = RecordReader(data, "share state value")
    version, state_epoch, leader_epoch, start_offset = reader.integers(_VALUE_HEAD)
    if version != VALUE_VERSION:
        raise CorruptMessage(f"share state value version {version} is not ours")
    if start_offset < 0:
        raise CorruptMessage(f"share state value: start offset {start_offset}")
    batches = []
    for _ in range(reader.count(_BATCH.size)):
        first, last, state, count = reader.integers(_BATCH)
        try:
            delivery_state = DeliveryState(state)
        except ValueError:
            raise CorruptMessage(f"share state value: delivery state {state}") from None
        batches.append(StateBatch(first, last, delivery_state, count))
    reader.end()
    problem = batches_problem(start_offset, tuple(batches))
    if problem is not None:
        raise CorruptMessage(f"share state value: {problem}")
    return ShareState(state_epoch, start_offset, tuple(batches), leader_epoch)
