"""Produce requests checked and Produce responses encoded by hand (v3-13), the hot path
that the schema walk of ``bounds`` and kio's generic writer would otherwise take on
every produced batch.

A Produce request body::

    v3-8 (int16-length strings, int32-length bytes, int32 counts, -1 = null)
    transactional_id nullable string │ acks int16 │ timeout_ms int32
    │ topic_data [ name string │ partition_data [ index int32 │ records nullable bytes ] ]

    v9-13 (flexible: unsigned-varint lengths and counts + 1, 0 = null, and a tagged-field
    section closing every struct; v13 names a topic by its 16-byte id instead of its name)
    transactional_id │ acks │ timeout_ms
    │ topic_data [ name | topic_id │ partition_data [ index │ records │ tags ] │ tags ] │ tags

:func:`request_body_end` walks it in a few steps per partition, without building
anything, and says where it ends; kio's native reader then builds the request (see
:mod:`sluice.protocol.fast_codecs`). No version of the Produce request defines a tagged
field, so any tagged field at all sends the body down the general path, which skips it.

A Produce response is written from kio's ``ProduceResponse`` straight into one bytes
object, header and size prefix included, byte for byte what kio writes; a response
carrying the v10+ ``node_endpoints`` tagged field (Sluice never sends it) is left to
kio (:func:`encode_response` returns None).
"""

from __future__ import annotations

import datetime
import struct
from functools import cache
from typing import Any

from sluice.protocol.varints import uvarint_bytes
from sluice.protocol.wire_reading import (
    UUID_BYTES,
    BodyCheck,
    Unusual,
    checked_end,
    compact_count_at,
    past_compact_topic_key,
    uvarint_at,
)

PRODUCE_API_KEY = 0
FIRST_VERSION = 3
"""v0-2 bodies lack the transactional id; the general path reads them (as v3)."""
LAST_VERSION = 13
FIRST_FLEXIBLE_VERSION = 9
FIRST_TOPIC_ID_VERSION = 13
FIRST_LOG_START_OFFSET_VERSION = 5
FIRST_RECORD_ERRORS_VERSION = 8
FIRST_CURRENT_LEADER_VERSION = 10

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACKS_AND_TIMEOUT_BYTES = 2 + 4


def request_body_end(version: int, data: bytes, position: int) -> int | None:
    """Where the Produce request body at ``data[position:]`` ends, every count and length
    in it checked against the bytes of ``data``; None when the body is malformed or
    unusual (tagged fields), for the general path to refuse or read."""
    return checked_end(_body_check(version), data, position)


@cache
def _body_check(version: int) -> BodyCheck:
    assert FIRST_VERSION <= version <= LAST_VERSION, f"Produce v{version} is not hand-checked"
    if version >= FIRST_FLEXIBLE_VERSION:
        return _flexible_check(version >= FIRST_TOPIC_ID_VERSION)
    return _legacy_check


def _legacy_check(data: bytes, position: int) -> int:
    unpack_int16 = _INT16.unpack_from
    unpack_int32 = _INT32.unpack_from
    end = len(data)
    (length,) = unpack_int16(data, position)
    position += 2
    if length >= 0:
        position += length
    elif length != -1:
        raise Unusual("negative length")
    position += _ACKS_AND_TIMEOUT_BYTES
    (topic_count,) = unpack_int32(data, position)
    position += 4
    if topic_count < 0 or topic_count * (2 + 4) > end - position:
        raise Unusual("topic count")
    for _ in range(topic_count):
        (length,) = unpack_int16(data, position)
        if length < 0:
            raise Unusual("null topic name")
        position += 2 + length
        (partition_count,) = unpack_int32(data, position)
        position += 4
        if partition_count < 0 or partition_count * (4 + 4) > end - position:
            raise Unusual("partition count")
        for _ in range(partition_count):
            (length,) = unpack_int32(data, position + 4)
            position += 8
            if length >= 0:
                position += length
            elif length != -1:
                raise Unusual("negative length")
    if position > end:
        raise Unusual("past the end")
    return position


def _flexible_check(by_topic_id: bool) -> BodyCheck:
    topic_min_bytes = (UUID_BYTES if by_topic_id else 1) + 1 + 1
    partition_min_bytes = 4 + 1 + 1

    def check(data: bytes, position: int) -> int:
        length, position = uvarint_at(data, position)
        if length:
            position += length - 1
        position += _ACKS_AND_TIMEOUT_BYTES
        count, position = compact_count_at(data, position, topic_min_bytes, "topic count")
        for _ in range(count):
            position = past_compact_topic_key(data, position, by_topic_id)
            partition_count, position = compact_count_at(
                data, position, partition_min_bytes, "partition count"
            )
            for _ in range(partition_count):
                length, position = uvarint_at(data, position + 4)
                if length:
                    position += length - 1
                if data[position]:
                    raise Unusual("tagged fields")
                position += 1
            if data[position]:
                raise Unusual("tagged fields")
            position += 1
        if data[position]:
            raise Unusual("tagged fields")
        return position + 1

    return check


# ── responses ──────────────────────────────────────────────────────────────────────────

_INT32_PACK = _INT32.pack
_INT16_PACK = _INT16.pack
_PARTITION_V3 = struct.Struct(">ihqq")
"""index, error_code, base_offset, log_append_time_ms."""
_PARTITION_V5 = struct.Struct(">ihqqq")
"""… and log_start_offset."""
_LEADER_ID_AND_EPOCH = struct.Struct(">ii")
_NO_LEADER = (-1, -1)
_CURRENT_LEADER_TAG = 0
_CURRENT_LEADER_BYTES = 4 + 4 + 1


def _instant_ms(value: datetime.datetime | None) -> int:
    """kio's encoding of a nullable ms timestamp (None is -1)."""
    return -1 if value is None else round(value.timestamp() * 1000)


def _duration_ms(value: datetime.timedelta) -> int:
    return round(value.total_seconds() * 1000)


def encode_response(correlation_id: int, response: Any) -> bytes | None:
    """The whole frame (size prefix, response header, body) of a kio ``ProduceResponse``
    v3-13, byte for byte what kio writes; None when it is not one this encoder writes."""
    version = int(response.__version__)
    if not FIRST_VERSION <= version <= LAST_VERSION:
        return None
    if version >= FIRST_FLEXIBLE_VERSION:
        if version >= FIRST_CURRENT_LEADER_VERSION and response.node_endpoints:
            return None
        body = _flexible_body(response, version)
        header = _INT32_PACK(correlation_id) + b"\x00"
    else:
        body = _legacy_body(response, version)
        header = _INT32_PACK(correlation_id)
    return _INT32_PACK(len(header) + len(body)) + header + body


def _legacy_string(value: str | None) -> bytes:
    if value is None:
        return b"\xff\xff"
    encoded = value.encode()
    return _INT16_PACK(len(encoded)) + encoded


def _compact_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    encoded = value.encode()
    return uvarint_bytes(len(encoded) + 1) + encoded


def _legacy_body(response: Any, version: int) -> bytearray:
    with_log_start = version >= FIRST_LOG_START_OFFSET_VERSION
    with_record_errors = version >= FIRST_RECORD_ERRORS_VERSION
    pack_v3 = _PARTITION_V3.pack
    pack_v5 = _PARTITION_V5.pack
    out = bytearray(_INT32_PACK(len(response.responses)))
    for topic in response.responses:
        out += _legacy_string(topic.name)
        out += _INT32_PACK(len(topic.partition_responses))
        for partition in topic.partition_responses:
            log_append_time_ms = _instant_ms(partition.log_append_time)
            if with_log_start:
                out += pack_v5(
                    partition.index,
                    partition.error_code,
                    partition.base_offset,
                    log_append_time_ms,
                    partition.log_start_offset,
                )
            else:
                out += pack_v3(
                    partition.index,
                    partition.error_code,
                    partition.base_offset,
                    log_append_time_ms,
                )
            if with_record_errors:
                out += _INT32_PACK(len(partition.record_errors))
                for record_error in partition.record_errors:
                    out += _INT32_PACK(record_error.batch_index)
                    out += _legacy_string(record_error.batch_index_error_message)
                out += _legacy_string(partition.error_message)
    out += _INT32_PACK(_duration_ms(response.throttle_time))
    return out


def _flexible_body(response: Any, version: int) -> bytearray:
    by_id = version >= FIRST_TOPIC_ID_VERSION
    with_current_leader = version >= FIRST_CURRENT_LEADER_VERSION
    pack = _PARTITION_V5.pack
    out = bytearray(uvarint_bytes(len(response.responses) + 1))
    for topic in response.responses:
        if by_id:
            out += topic.topic_id.bytes if topic.topic_id is not None else bytes(UUID_BYTES)
        else:
            out += _compact_string(topic.name)
        out += uvarint_bytes(len(topic.partition_responses) + 1)
        for partition in topic.partition_responses:
            out += pack(
                partition.index,
                partition.error_code,
                partition.base_offset,
                _instant_ms(partition.log_append_time),
                partition.log_start_offset,
            )
            out += uvarint_bytes(len(partition.record_errors) + 1)
            for record_error in partition.record_errors:
                out += _INT32_PACK(record_error.batch_index)
                out += _compact_string(record_error.batch_index_error_message)
                out += b"\x00"
            out += _compact_string(partition.error_message)
            leader = partition.current_leader if with_current_leader else None
            if leader is None or (leader.leader_id, leader.leader_epoch) == _NO_LEADER:
                out += b"\x00"
            else:
                # one tagged field: tag 0, its size, the struct and its own empty tags
                out += bytes((1, _CURRENT_LEADER_TAG, _CURRENT_LEADER_BYTES))
                out += _LEADER_ID_AND_EPOCH.pack(leader.leader_id, leader.leader_epoch)
                out += b"\x00"
        out += b"\x00"
    out += _INT32_PACK(_duration_ms(response.throttle_time))
    out += b"\x00"
    return out
