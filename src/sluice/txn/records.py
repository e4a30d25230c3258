"""The records of ``__transaction_state``: Kafka's layouts, so the topic reads the same
to Kafka's tools.

Key (version 0), the transactional id::

    ┌──────────────┬───────────────────────────────┐
    │ version int16│ transactional id: int16 length │
    │ = 0          │ + UTF-8 bytes                  │
    └──────────────┴───────────────────────────────┘

Value (version 0; a null value is the id's tombstone)::

    version int16 (0) │ producer id int64 │ producer epoch int16 │ timeout ms int32
    │ state int8 │ partitions: int32 count, each (topic: int16 length + UTF-8,
    partition ids: int32 count + int32 each) │ last update ms int64 │ start ms int64

State bytes are Kafka's: Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3,
CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7. Values written by
newer Kafka versions (1, flexible) are refused as not ours.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.coordinator.record_reader import RecordReader

KEY_VERSION = 0
VALUE_VERSION = 0

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">hqhib")


class TransactionState(enum.IntEnum):
    """A transactional id's state, as stored."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """Kafka's name (DescribeTransactions, ListTransactions)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass(frozen=True, slots=True)
class TransactionValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int


def _string(text: str) -> bytes:
    encoded = text.encode()
    return _INT16.pack(len(encoded)) + encoded


def encode_key(transactional_id: str) -> bytes:
    return _INT16.pack(KEY_VERSION) + _string(transactional_id)


def encode_value(value: TransactionValue) -> bytes:
    parts = [
        _VALUE_HEAD.pack(
            VALUE_VERSION,
            value.producer_id,
            value.producer_epoch,
            value.timeout_ms,
            int(value.state),
        )
    ]
    by_topic: dict[str, list[int]] = {}
    for partition in sorted(value.partitions):
        by_topic.setdefault(partition.topic, []).append(partition.partition)
    parts.append(_INT32.pack(len(by_topic)))
    for topic, ids in by_topic.items():
        parts.append(_string(topic))
        parts.append(_INT32.pack(len(ids)))
        parts.extend(_INT32.pack(i) for i in ids)
    parts.append(_INT64.pack(value.last_update_ms))
    parts.append(_INT64.pack(value.start_ms))
    return b"".join(parts)


def decode_key(data: bytes) -> str:
    reader = RecordReader(data, "transaction log key")
    version = reader.integer(_INT16)
    if version != KEY_VERSION:
        raise errors.CorruptMessage(f"transaction log key version {version} is not ours")
    transactional_id = reader.string()
    reader.end()
    return transactional_id


def decode_value(data: bytes) -> TransactionValue:
    reader = RecordReader(data, "transaction log value")
    version, producer_id, producer_epoch, timeout_ms, state = reader.integers(_VALUE_HEAD)
    if version != VALUE_VERSION:
        raise errors.CorruptMessage(f"transaction log value version {version} is not ours")
    try:
        parsed_state = TransactionState(state)
    except ValueError:
        raise errors.CorruptMessage(f"transaction state {state} is unknown") from None
    partitions = set()
    for _ in range(reader.count(6, null_is_empty=True)):
        topic = reader.string()
        for _ in range(reader.count(4, null_is_empty=True)):
            partitions.add(TopicPartition(topic, reader.integer(_INT32)))
    last_update_ms = reader.integer(_INT64)
    start_ms = reader.integer(_INT64)
    reader.end()
    return TransactionValue(
        producer_id,
        producer_epoch,
        timeout_ms,
        parsed_state,
        frozenset(partitions),
        last_update_ms,
        start_ms,
    )
