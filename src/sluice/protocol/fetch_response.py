"""Fetch responses v4–16, framed by hand so record bytes never pass through Python.

Every other response is encoded by kio. A fetch response is the one that carries bulk
log data, so it is emitted as a list of *parts*: ``bytes`` for the framing, and opaque
record slices (anything with ``size_bytes``, e.g. storage file slices) that the network
layer sends with ``sendfile``. The layout::

    int32 size │ int32 correlation_id │ tagged fields (v12+, response header v1)
    int32 throttle_time_ms │ int16 error_code (v7+) │ int32 session_id (v7+)
    [topics]   string name (v4–12) │ uuid topic_id (v13+)
      [partitions] int32 index │ int16 error_code │ int64 high_watermark
                   int64 last_stable_offset │ int64 log_start_offset (v5+)
                   [aborted] (int64 producer_id │ int64 first_offset), null = -1
                   int32 preferred_read_replica (v11+)
                   int32 records size │ records …  ← slices, sent zero-copy
                   tagged fields (v12+): 0 diverging_epoch (int32 epoch, int64 end offset)
                                         1 current_leader (int32 leader id, int32 epoch)
      tagged fields (v12+)
    tagged fields (v12+): 0 node_endpoints [int32 node id │ string host │ int32 port
                                            │ nullable string rack]   (v16+)

From v12 (flexible, KIP-482) arrays and strings are "compact": their length is an
unsigned varint of length + 1 (0 is null), and every struct ends with its tagged fields
(an unsigned varint count, then tag, size and bytes for each). The records size is
compact too, so the framing still knows every slice's size before sending it.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sluice.protocol.varints import uvarint_bytes

FETCH_VERSION_MIN = 4
FETCH_VERSION_MAX = 16
FETCH_FIRST_FLEXIBLE_VERSION = 12
FETCH_FIRST_TOPIC_ID_VERSION = 13

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqq")
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")
_EPOCH_END_OFFSET = struct.Struct(">iq")
_LEADER_AND_EPOCH = struct.Struct(">ii")

NO_TAGGED_FIELDS = b"\x00"
DIVERGING_EPOCH_TAG = 0
CURRENT_LEADER_TAG = 1
NODE_ENDPOINTS_TAG = 0


class RecordsSlice(Protocol):
    @property
    def size_bytes(self) -> int: ...


ResponsePart = bytes | RecordsSlice


@dataclass(frozen=True, slots=True)
class RecordBytes:
    """Records built in memory for a response (a view's rebuilt batches), sent as bytes
    where the log's slices are sent zero-copy."""

    data: bytes

    @property
    def size_bytes(self) -> int:
        return len(self.data)


NodeEndpoint = tuple[int, str, int, str | None]
"""(node id, host, port, rack) of a broker named in a ``current_leader``."""


@dataclass
class FetchPartitionResult:
    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: Sequence[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    records: Sequence[RecordsSlice] = field(default_factory=list)
    diverging_epoch: tuple[int, int] | None = None
    """(epoch, end offset) where the fetcher's log diverged from this one (v12+: the
    fetcher's last fetched epoch ends before its fetch offset here); no records then."""
    current_leader: tuple[int, int] | None = None
    """(leader id, leader epoch) for a NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH
    answer (v16+, KIP-951), so the client need not ask Metadata first."""

    @property
    def records_size_bytes(self) -> int:
        return sum(part.size_bytes for part in self.records)


def _string(text: str, flexible: bool) -> bytes:
    encoded = text.encode()
    length = uvarint_bytes(len(encoded) + 1) if flexible else _I16.pack(len(encoded))
    return length + encoded


def _array_length(count: int, flexible: bool) -> bytes:
    return uvarint_bytes(count + 1) if flexible else _I32.pack(count)


def _tagged_fields(fields: Sequence[tuple[int, bytes]]) -> bytes:
    """Tagged fields in tag order: count, then tag, size and value of each."""
    out = bytearray(uvarint_bytes(len(fields)))
    for tag, value in fields:
        out += uvarint_bytes(tag) + uvarint_bytes(len(value)) + value
    return bytes(out)


def _partition_tagged_fields(result: FetchPartitionResult) -> bytes:
    fields = []
    if result.diverging_epoch is not None:
        value = _EPOCH_END_OFFSET.pack(*result.diverging_epoch) + NO_TAGGED_FIELDS
        fields.append((DIVERGING_EPOCH_TAG, value))
    if result.current_leader is not None:
        value = _LEADER_AND_EPOCH.pack(*result.current_leader) + NO_TAGGED_FIELDS
        fields.append((CURRENT_LEADER_TAG, value))
    return _tagged_fields(fields)


def _node_endpoints(endpoints: Sequence[NodeEndpoint]) -> bytes:
    if not endpoints:
        return NO_TAGGED_FIELDS
    value = bytearray(_array_length(len(endpoints), True))
    for node_id, host, port, rack in endpoints:
        value += _I32.pack(node_id) + _string(host, True) + _I32.pack(port)
        value += uvarint_bytes(0) if rack is None else _string(rack, True)
        value += NO_TAGGED_FIELDS
    return _tagged_fields([(NODE_ENDPOINTS_TAG, bytes(value))])


def encode_fetch_response(
    version: int,
    correlation_id: int,
    topics: Sequence[tuple[str | uuid.UUID, Sequence[FetchPartitionResult]]],
    *,
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> list[ResponsePart]:
    """The whole response as parts, size prefix first. Consecutive bytes are joined so
    the network layer makes one write per run of framing. Topics are named by name up to
    v12 and by id from v13; ``node_endpoints`` are written from v16."""
    assert FETCH_VERSION_MIN <= version <= FETCH_VERSION_MAX, version
    flexible = version >= FETCH_FIRST_FLEXIBLE_VERSION
    parts: list[ResponsePart] = []
    pending = bytearray(_I32.pack(correlation_id))
    if flexible:
        pending += NO_TAGGED_FIELDS  # response header v1
    pending += _I32.pack(throttle_time_ms)
    if version >= 7:
        pending += _I16.pack(error_code) + _I32.pack(session_id)
    pending += _array_length(len(topics), flexible)
    total = 0
    for topic, partitions in topics:
        if version >= FETCH_FIRST_TOPIC_ID_VERSION:
            assert isinstance(topic, uuid.UUID), topic
            pending += topic.bytes
        else:
            assert isinstance(topic, str), topic
            pending += _string(topic, flexible)
        pending += _array_length(len(partitions), flexible)
        for result in partitions:
            pending += _PARTITION_HEAD.pack(
                result.partition_index,
                result.error_code,
                result.high_watermark,
                result.last_stable_offset,
            )
            if version >= 5:
                pending += _I64.pack(result.log_start_offset)
            aborted = result.aborted_transactions
            if aborted is None:
                pending += uvarint_bytes(0) if flexible else _I32.pack(-1)
            else:
                pending += _array_length(len(aborted), flexible)
                for producer_id, first_offset in aborted:
                    pending += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        pending += NO_TAGGED_FIELDS
            if version >= 11:
                pending += _I32.pack(result.preferred_read_replica)
            records_size = result.records_size_bytes
            pending += uvarint_bytes(records_size + 1) if flexible else _I32.pack(records_size)
            if records_size:
                total += len(pending)
                parts.append(bytes(pending))
                pending = bytearray()
                for part in result.records:
                    if part.size_bytes:
                        parts.append(part.data if isinstance(part, RecordBytes) else part)
                        total += part.size_bytes
            if flexible:
                pending += _partition_tagged_fields(result)
        if flexible:
            pending += NO_TAGGED_FIELDS  # topic
    if flexible:
        pending += _node_endpoints(node_endpoints if version >= 16 else ())  # response
    if pending:
        total += len(pending)
        parts.append(bytes(pending))
    parts.insert(0, _I32.pack(total))
    return parts
