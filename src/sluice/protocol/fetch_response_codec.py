"""Fetch response bodies (v4-17) checked by hand in front of kio's native reader, for the
follower side of replication: a follower decodes a Fetch response from its leader for
every round, naming every partition it follows (see :mod:`sluice.protocol.fast_codecs`).

A Fetch response body::

    throttle_time_ms int32 │ [error_code int16 │ session_id int32, v7+]
    │ responses [ topic string | topic_id uuid (v13+)
    │             partitions [ partition_index int32 │ error_code int16
    │                          high_watermark int64 │ last_stable_offset int64
    │                          [log_start_offset int64, v5+]
    │                          aborted_transactions nullable [ producer_id int64
    │                                                         first_offset int64 │ tags ]
    │                          [preferred_read_replica int32, v11+]
    │                          records nullable bytes │ tags ]
    │             tags ]
    │ tags

v12+ is flexible (unsigned-varint lengths and counts + 1, and the ``tags`` sections).
:func:`response_body_end` never raises on bad bytes: anything unusual, any tagged field
included (a diverging epoch, a current leader, node endpoints: rare answers), is None,
for the general path (``bounds``, then kio) to read or refuse.
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
FIRST_LOG_START_OFFSET_VERSION = 5
FIRST_SESSION_VERSION = 7
FIRST_PREFERRED_READ_REPLICA_VERSION = 11
FIRST_FLEXIBLE_VERSION = 12
FIRST_TOPIC_ID_VERSION = 13

_ABORTED_TRANSACTION_BYTES = 8 + 8
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def response_body_end(version: int, data: bytes, position: int) -> int | None:
    """Where the Fetch response body at ``data[position:]`` ends, every count and length
    in it checked against the bytes of ``data``; None when the body is malformed or
    unusual, for the general path to refuse or read."""
    return checked_end(_body_check(version), data, position)


def _partition_prefix_bytes(version: int) -> int:
    """partition_index, error_code, high_watermark, last_stable_offset[, log_start_offset]."""
    size = 4 + 2 + 8 + 8
    if version >= FIRST_LOG_START_OFFSET_VERSION:
        size += 8
    return size


@cache
def _body_check(version: int) -> BodyCheck:
    assert FIRST_VERSION <= version <= LAST_VERSION, f"Fetch v{version} is not hand-checked"
    if version >= FIRST_FLEXIBLE_VERSION:
        return _flexible_check(version)
    return _legacy_check(version)


def _legacy_check(version: int) -> BodyCheck:
    fixed_bytes = 4 + (2 + 4 if version >= FIRST_SESSION_VERSION else 0)
    prefix_bytes = _partition_prefix_bytes(version)
    replica_bytes = 4 if version >= FIRST_PREFERRED_READ_REPLICA_VERSION else 0
    partition_min_bytes = prefix_bytes + 4 + replica_bytes + 4

    def check(data: bytes, position: int) -> int:
        unpack_int32 = _INT32.unpack_from
        end = len(data)
        position += fixed_bytes
        (topics,) = unpack_int32(data, position)
        position += 4
        if topics < 0 or topics * (2 + 4) > end - position:
            raise Unusual("topic count")
        for _ in range(topics):
            (length,) = _INT16.unpack_from(data, position)
            if length < 0:
                raise Unusual("null topic name")
            position += 2 + length
            (partitions,) = unpack_int32(data, position)
            position += 4
            if partitions < 0 or partitions * partition_min_bytes > end - position:
                raise Unusual("partition count")
            for _ in range(partitions):
                (aborted,) = unpack_int32(data, position + prefix_bytes)
                position += prefix_bytes + 4
                if aborted >= 0:
                    position += aborted * _ABORTED_TRANSACTION_BYTES
                elif aborted != -1:
                    raise Unusual("negative count")
                (length,) = unpack_int32(data, position + replica_bytes)
                position += replica_bytes + 4
                if length >= 0:
                    position += length
                elif length != -1:
                    raise Unusual("negative length")
        if position > end:
            raise Unusual("past the end")
        return position

    return check


def _flexible_check(version: int) -> BodyCheck:
    fixed_bytes = 4 + 2 + 4
    prefix_bytes = _partition_prefix_bytes(version)
    by_topic_id = version >= FIRST_TOPIC_ID_VERSION
    topic_min_bytes = (UUID_BYTES if by_topic_id else 1) + 1 + 1
    partition_min_bytes = prefix_bytes + 1 + 4 + 1 + 1
    aborted_stride = _ABORTED_TRANSACTION_BYTES + 1  # and its empty tagged fields

    def check(data: bytes, position: int) -> int:
        end = len(data)
        topics, position = compact_count_at(
            data, position + fixed_bytes, topic_min_bytes, "topic count"
        )
        for _ in range(topics):
            position = past_compact_topic_key(data, position, by_topic_id)
            partitions, position = compact_count_at(
                data, position, partition_min_bytes, "partition count"
            )
            for _ in range(partitions):
                aborted, position = uvarint_at(data, position + prefix_bytes)
                if aborted > 1:
                    stop = position + (aborted - 1) * aborted_stride
                    if stop > end:
                        raise Unusual("aborted transactions past the end")
                    tags = data[position + aborted_stride - 1 : stop : aborted_stride]
                    if tags.count(0) != aborted - 1:
                        raise Unusual("aborted transaction tagged fields")
                    position = stop
                length, position = uvarint_at(data, position + 4)  # after the read replica
                if length:
                    position += length - 1
                if data[position]:
                    raise Unusual("partition tagged fields")
                position += 1
            if data[position]:
                raise Unusual("topic tagged fields")
            position += 1
        if data[position]:
            raise Unusual("response tagged fields")
        return position + 1

    return check
