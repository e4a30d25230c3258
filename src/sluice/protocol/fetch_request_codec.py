"""Fetch requests (v4-17) checked by hand, the hot path of every consumer's and every
follower's fetch, in front of kio's native reader (see :mod:`sluice.protocol.fast_codecs`).

A Fetch request body::

    [replica_id int32, v4-14] │ max_wait_ms int32 │ min_bytes int32 │ max_bytes int32
    │ isolation_level int8 │ [session_id int32 │ session_epoch int32, v7+]
    │ topics [ topic string | topic_id uuid (v13+)
    │          partitions [ partition int32 │ [current_leader_epoch int32, v9+]
    │                       fetch_offset int64 │ [last_fetched_epoch int32, v12+]
    │                       [log_start_offset int64, v5+] │ partition_max_bytes int32 │ tags ]
    │          tags ]
    │ [forgotten_topics_data [ topic | topic_id │ partitions [int32] │ tags ], v7+]
    │ [rack_id string, v11+] │ tags: cluster_id (0, v12+), replica_state (1, v15+:
    │                                replica_id int32 │ replica_epoch int64 │ tags)

v12+ is flexible (unsigned-varint lengths and counts + 1, and the ``tags`` sections).
A partition's fields have a fixed size, so a topic's partitions are checked in one step:
a skip before v12, one strided slice (every partition's tag byte zero) from v12 on.
:func:`request_body_end` never raises on bad bytes: anything unusual (a null, a read past
the end, a tagged field other than an ordinary cluster_id or replica_state) is None, for
the general path (``bounds``, then kio) to refuse or read.
"""

from __future__ import annotations

import struct
from functools import cache

from sluice.protocol.wire_reading import (
    UUID_BYTES,
    BodyCheck,
    Unusual,
    checked_end,
    compact_count_at,
    past_compact_topic_key,
    uvarint_at,
)

FETCH_API_KEY = 1
FIRST_VERSION = 4
LAST_VERSION = 17
FIRST_SESSION_VERSION = 7
FIRST_CURRENT_LEADER_EPOCH_VERSION = 9
FIRST_RACK_ID_VERSION = 11
FIRST_FLEXIBLE_VERSION = 12
FIRST_TOPIC_ID_VERSION = 13
FIRST_REPLICA_STATE_VERSION = 15

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_CLUSTER_ID_TAG = 0
_REPLICA_STATE_TAG = 1
_REPLICA_STATE_BYTES = 4 + 8 + 1
"""replica_id, replica_epoch and an empty tagged-field section."""


def request_body_end(version: int, data: bytes, position: int) -> int | None:
    """Where the Fetch request body at ``data[position:]`` ends, every count and length
    in it checked against the bytes of ``data``; None when the body is malformed or
    unusual, for the general path to refuse or read."""
    return checked_end(_body_check(version), data, position)


def _fixed_bytes(version: int) -> int:
    """The fields before ``topics``."""
    size = 4 + 4 + 4 + 1  # max_wait, min_bytes, max_bytes, isolation_level
    if version < FIRST_REPLICA_STATE_VERSION:
        size += 4  # replica_id
    if version >= FIRST_SESSION_VERSION:
        size += 4 + 4  # session_id, session_epoch
    return size


def _partition_bytes(version: int) -> int:
    """A partition's fields, its tagged-field section not included."""
    size = 4 + 8 + 4  # partition, fetch_offset, partition_max_bytes
    if version >= 5:
        size += 8  # log_start_offset
    if version >= FIRST_CURRENT_LEADER_EPOCH_VERSION:
        size += 4
    if version >= FIRST_FLEXIBLE_VERSION:
        size += 4  # last_fetched_epoch
    return size


@cache
def _body_check(version: int) -> BodyCheck:
    assert FIRST_VERSION <= version <= LAST_VERSION, f"Fetch v{version} is not hand-checked"
    if version >= FIRST_FLEXIBLE_VERSION:
        return _flexible_check(version)
    return _legacy_check(version)


def _legacy_check(version: int) -> BodyCheck:
    fixed_bytes = _fixed_bytes(version)
    partition_bytes = _partition_bytes(version)
    with_forgotten = version >= FIRST_SESSION_VERSION
    with_rack = version >= FIRST_RACK_ID_VERSION

    def topics(data: bytes, position: int, end: int, element_bytes: int) -> int:
        """An array of (topic name, array of ``element_bytes``-sized elements)."""
        (count,) = _INT32.unpack_from(data, position)
        position += 4
        if count < 0 or count * (2 + 4) > end - position:
            raise Unusual("topic count")
        for _ in range(count):
            (length,) = _INT16.unpack_from(data, position)
            if length < 0:
                raise Unusual("null topic name")
            position += 2 + length
            (elements,) = _INT32.unpack_from(data, position)
            position += 4
            if elements < 0 or elements * element_bytes > end - position:
                raise Unusual("element count")
            position += elements * element_bytes
        return position

    def check(data: bytes, position: int) -> int:
        end = len(data)
        position = topics(data, position + fixed_bytes, end, partition_bytes)
        if with_forgotten:
            position = topics(data, position, end, 4)
        if with_rack:
            (length,) = _INT16.unpack_from(data, position)
            if length < 0:
                raise Unusual("null rack id")
            position += 2 + length
        if position > end:
            raise Unusual("past the end")
        return position

    return check


def _flexible_check(version: int) -> BodyCheck:
    fixed_bytes = _fixed_bytes(version)
    partition_stride = _partition_bytes(version) + 1  # and its empty tagged fields
    by_topic_id = version >= FIRST_TOPIC_ID_VERSION
    topic_min_bytes = (UUID_BYTES if by_topic_id else 1) + 1 + 1
    with_replica_state = version >= FIRST_REPLICA_STATE_VERSION

    def check(data: bytes, position: int) -> int:
        end = len(data)
        count, position = compact_count_at(
            data, position + fixed_bytes, topic_min_bytes, "topic count"
        )
        for _ in range(count):
            position = past_compact_topic_key(data, position, by_topic_id)
            partitions, position = uvarint_at(data, position)
            if not partitions:
                raise Unusual("null partitions")
            stop = position + (partitions - 1) * partition_stride
            if stop > end:
                raise Unusual("partitions past the end")
            tags = data[position + partition_stride - 1 : stop : partition_stride]
            if tags.count(0) != partitions - 1:
                raise Unusual("partition tagged fields")
            if data[stop]:
                raise Unusual("topic tagged fields")
            position = stop + 1
        count, position = compact_count_at(data, position, topic_min_bytes, "forgotten topic count")
        for _ in range(count):
            position = past_compact_topic_key(data, position, by_topic_id)
            partitions, position = uvarint_at(data, position)
            if not partitions:
                raise Unusual("null forgotten partitions")
            position += (partitions - 1) * 4
            if data[position]:
                raise Unusual("forgotten topic tagged fields")
            position += 1
        length, position = uvarint_at(data, position)  # rack_id
        if not length:
            raise Unusual("null rack id")
        position += length - 1
        if data[position]:
            position = _request_tags(data, position, end, with_replica_state)
        else:
            position += 1
        if position > end:
            raise Unusual("past the end")
        return position

    return check


def _request_tags(data: bytes, position: int, end: int, with_replica_state: bool) -> int:
    """The request's own tagged fields when there are some: a cluster_id or (v15+) a
    replica_state as followers send it, each filling exactly its declared size."""
    count, position = uvarint_at(data, position)
    for _ in range(count):
        tag, position = uvarint_at(data, position)
        size, position = uvarint_at(data, position)
        field_end = position + size
        if field_end > end:
            raise Unusual("tagged field past the end")
        if tag == _CLUSTER_ID_TAG:
            length, position = uvarint_at(data, position)
            if not length or position + length - 1 != field_end:
                raise Unusual("cluster_id")
        elif tag == _REPLICA_STATE_TAG and with_replica_state:
            if size != _REPLICA_STATE_BYTES or data[field_end - 1]:
                raise Unusual("replica_state")
        else:
            raise Unusual(f"tag {tag}")
        position = field_end
    return position
