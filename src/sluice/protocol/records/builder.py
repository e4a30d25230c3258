"""Whole v2 batches: build them from records, and decode them back into records.

The broker never needs this module on its hot path (it stores produced batches as they
arrive); the client, the tools, the coordinators (which write their own records) and the
tests do. A batch as built here::

    ┌──────────────── header: 61 bytes, see batch.py ────────────────┐┌─ records section ─┐
    base_offset length leader_epoch magic=2 crc attributes … records_count record record …
                                                └──── CRC-32C: attributes to the end ─────┘

    attributes = codec | timestamp type << 3 | transactional << 4 | control << 5
    record i   : offset_delta = i, timestamp_delta = timestamp_i - base_timestamp
    header     : last_offset_delta = n - 1, max_timestamp = max(timestamp_i)

When the batch is compressed, only the records section is (see compression.py).

Decoding a batch gives :class:`ConsumerRecord` s with absolute offsets and timestamps:
``base_offset + offset_delta`` and ``base_timestamp + timestamp_delta``, except in a
LogAppendTime batch, where every record carries the batch's max timestamp (the time the
broker appended it), as Kafka consumers read it.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

import crc32c

from sluice.common import errors
from sluice.protocol.records import batch as batch_format
from sluice.protocol.records.batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_BYTES,
    LOG_OVERHEAD_BYTES,
    MAGIC,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    Compression,
    TimestampType,
)
from sluice.protocol.records.compression import DECOMPRESSED_BYTES_MAX, compress, decompress
from sluice.protocol.records.record import (
    Header,
    R,
    RecordFactory,
    decode_records_into,
    encode_record_into,
    frozen_factory,
)

__all__ = [
    "CONTROL_RECORD_VERSION",
    "ConsumerRecord",
    "ControlRecordType",
    "DecodedBatch",
    "RecordInput",
    "build_batch",
    "build_control_batch",
    "decode_batch",
    "decode_batches",
    "decode_batches_made",
    "decode_control_record",
    "rebuild_batch",
]

NO_PRODUCER_EPOCH: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1
RECORDS_PER_BATCH_MAX: Final = 2**31 - 1
"""last_offset_delta is an int32; no batch can hold more records than that."""

# The header after the CRC, then the part before it (which the CRC does not cover).
_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")
_HEADER_BEFORE_CRC = struct.Struct(">qiibI")
assert _HEADER_BEFORE_CRC.size + _HEADER_AFTER_CRC.size == HEADER_BYTES


@dataclass(frozen=True, slots=True)
class RecordInput:
    """A record to put in a batch. ``timestamp_ms`` None means the batch's base
    timestamp (see :func:`build_batch`)."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[Header] = ()
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """A decoded record with its absolute offset and timestamp."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    header: BatchHeader
    records: list[ConsumerRecord]


_make_consumer_record = frozen_factory(ConsumerRecord)


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    base_timestamp_ms: int | None = None,
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """One v2 batch holding ``records`` at offsets ``base_offset``, ``base_offset + 1``…
    (or at ``base_offset + offset_deltas[i]``, increasing, with the batch covering up to
    ``base_offset + last_offset_delta``: a batch with gaps, as compaction and views
    leave).

    The base timestamp is ``base_timestamp_ms`` when given, else the first record
    timestamp that is set; records without a timestamp get the base timestamp, and with
    no timestamp anywhere every record has ``NO_TIMESTAMP`` (-1). Nothing here reads a
    clock: a producer passes its clock's time. Raises ValueError for arguments the format
    cannot represent (no records, a transactional batch without a producer id…).
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    if len(records) > RECORDS_PER_BATCH_MAX:
        raise ValueError(f"{len(records)} records do not fit in one batch")
    deltas = range(len(records)) if offset_deltas is None else offset_deltas
    if len(deltas) != len(records) or any(b <= a for a, b in itertools.pairwise(deltas)):
        raise ValueError("offset deltas must increase, one per record")
    last_delta = deltas[-1] if last_offset_delta is None else last_offset_delta
    if last_delta < deltas[-1] or deltas[0] < 0:
        raise ValueError("the offset deltas must lie within the batch")
    if transactional and producer_id < 0:
        raise ValueError("a transactional batch needs a producer id")
    if base_timestamp_ms is None:
        base_timestamp_ms = next(
            (record.timestamp_ms for record in records if record.timestamp_ms is not None),
            NO_TIMESTAMP,
        )
    max_timestamp_ms: int | None = None
    section = bytearray()
    for offset_delta, record in zip(deltas, records, strict=True):
        timestamp_ms = base_timestamp_ms if record.timestamp_ms is None else record.timestamp_ms
        if max_timestamp_ms is None or timestamp_ms > max_timestamp_ms:
            max_timestamp_ms = timestamp_ms
        encode_record_into(
            section,
            offset_delta,
            timestamp_ms - base_timestamp_ms,
            record.key,
            record.value,
            record.headers,
        )
    assert max_timestamp_ms is not None  # records is not empty
    payload = section if compression == Compression.NONE else compress(compression, section)
    attributes = (
        (int(compression) & ATTR_COMPRESSION_MASK)
        | (ATTR_TIMESTAMP_TYPE if timestamp_type == TimestampType.LOG_APPEND_TIME else 0)
        | (ATTR_TRANSACTIONAL if transactional else 0)
        | (ATTR_CONTROL if control else 0)
    )
    try:
        after_crc = _HEADER_AFTER_CRC.pack(
            attributes,
            last_delta,
            base_timestamp_ms,
            max_timestamp_ms,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    except struct.error as error:
        raise ValueError(f"batch header field out of range: {error}") from None
    crc = crc32c.crc32c(payload, crc32c.crc32c(after_crc))
    batch_length = HEADER_BYTES - LOG_OVERHEAD_BYTES + len(payload)
    try:
        before_crc = _HEADER_BEFORE_CRC.pack(
            base_offset, batch_length, partition_leader_epoch, MAGIC, crc
        )
    except struct.error as error:
        raise ValueError(f"batch header field out of range: {error}") from None
    return b"".join((before_crc, after_crc, payload))


# -- control batches (transaction markers) ---------------------------------------------

CONTROL_RECORD_VERSION: Final = 0
_CONTROL_KEY = struct.Struct(">hh")
_END_TRANSACTION_MARKER = struct.Struct(">hi")


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1


def build_control_batch(
    marker: ControlRecordType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker: a transactional control batch of one record whose key is
    (version 0, type) and value (version 0, coordinator epoch), base sequence -1."""
    return build_batch(
        [
            RecordInput(
                key=_CONTROL_KEY.pack(CONTROL_RECORD_VERSION, int(marker)),
                value=_END_TRANSACTION_MARKER.pack(CONTROL_RECORD_VERSION, coordinator_epoch),
            )
        ],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
        base_timestamp_ms=timestamp_ms,
    )


def rebuild_batch(
    header: BatchHeader, records: Sequence[ConsumerRecord], *, last_offset: int | None = None
) -> bytes:
    """The batch ``header`` describes, holding only ``records`` (some of its own, in
    order): the same offsets, producer, attributes, codec and leader epoch; a new record
    count and CRC. It still ends at the batch's last offset, unless ``last_offset``."""
    return build_batch(
        [RecordInput(r.key, r.value, r.headers, r.timestamp_ms) for r in records],
        base_offset=header.base_offset,
        compression=header.compression,
        timestamp_type=(
            TimestampType.LOG_APPEND_TIME
            if header.attributes & ATTR_TIMESTAMP_TYPE
            else TimestampType.CREATE_TIME
        ),
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        transactional=header.is_transactional,
        control=header.is_control,
        partition_leader_epoch=header.partition_leader_epoch,
        base_timestamp_ms=header.base_timestamp,
        offset_deltas=[r.offset - header.base_offset for r in records],
        last_offset_delta=(
            header.last_offset_delta if last_offset is None else last_offset - header.base_offset
        ),
    )


def decode_control_record(key: bytes | None, value: bytes | None) -> tuple[ControlRecordType, int]:
    """(marker type, coordinator epoch) of a control record. Raises CorruptMessage when
    it is not a transaction marker this broker understands."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise errors.CorruptMessage("control record key is too short")
    version, marker_type = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        # Newer versions are read as version 0, as Kafka does.
        raise errors.CorruptMessage(f"control record key version {version} is negative")
    if marker_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise errors.CorruptMessage(f"control record type {marker_type} is not a marker")
    if value is None or len(value) < _END_TRANSACTION_MARKER.size:
        raise errors.CorruptMessage("transaction marker value is too short")
    _value_version, coordinator_epoch = _END_TRANSACTION_MARKER.unpack_from(value)
    return ControlRecordType(marker_type), int(coordinator_epoch)


# -- decoding ---------------------------------------------------------------------------


def _decode_at(
    buffer: bytes, position: int, header: BatchHeader, verify_crc: bool, max_bytes: int
) -> DecodedBatch:
    records: list[ConsumerRecord] = []
    _decode_records_at(
        records, _make_consumer_record, buffer, position, header, verify_crc, max_bytes
    )
    return DecodedBatch(header, records)


def _decode_records_at(
    records: list[R],
    make: RecordFactory[R],
    buffer: bytes,
    position: int,
    header: BatchHeader,
    verify_crc: bool,
    max_bytes: int,
) -> None:
    end = position + header.size_bytes
    if verify_crc and not batch_format.crc_is_valid(memoryview(buffer)[position:end], header):
        raise errors.CorruptMessage(
            f"record batch at offset {header.base_offset}: CRC-32C does not match"
        )
    codec = header.attributes & ATTR_COMPRESSION_MASK
    fixed_timestamp = header.max_timestamp if header.attributes & ATTR_TIMESTAMP_TYPE else None
    if codec == Compression.NONE:
        data, start, section_end = buffer, position + HEADER_BYTES, end
    else:
        data = decompress(codec, memoryview(buffer)[position + HEADER_BYTES : end], max_bytes)
        start, section_end = 0, len(data)
    decode_records_into(
        records,
        make,
        data,
        header.records_count,
        offset_base=header.base_offset,
        timestamp_base=header.base_timestamp,
        fixed_timestamp=fixed_timestamp,
        start=start,
        end=section_end,
    )


def decode_batch(
    buffer: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_bytes: int = DECOMPRESSED_BYTES_MAX,
) -> DecodedBatch:
    """Decode the one whole batch at the start of ``buffer`` (bytes after it are
    ignored). Raises CorruptMessage (truncated, bad CRC, bad records, decompressed size
    over ``max_bytes``), UnsupportedForMessageFormat (magic other than 2) or
    UnsupportedCompressionType."""
    data = buffer if isinstance(buffer, bytes) else bytes(buffer)
    header = batch_format.parse_header(data)
    if header.size_bytes > len(data):
        raise errors.CorruptMessage(
            f"record batch is {header.size_bytes} bytes but only {len(data)} are here"
        )
    return _decode_at(data, 0, header, verify_crc, max_bytes)


def decode_batches(
    buffer: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_bytes: int = DECOMPRESSED_BYTES_MAX,
) -> Iterator[DecodedBatch]:
    """Decode every whole batch in ``buffer`` (a fetch response's records, a log
    segment), in order; a trailing partial batch is ignored, as fetch responses may end
    with one."""
    data = buffer if isinstance(buffer, bytes) else bytes(buffer)
    for position, header in batch_format.iter_batches(data):
        yield _decode_at(data, position, header, verify_crc, max_bytes)


def decode_batches_made(
    buffer: bytes | bytearray | memoryview,
    make_for: Callable[[BatchHeader], RecordFactory[R]],
    *,
    verify_crc: bool = True,
    max_bytes: int = DECOMPRESSED_BYTES_MAX,
) -> Iterator[tuple[BatchHeader, list[R]]]:
    """:func:`decode_batches` for a reader with its own record type: each batch's
    records are made by the factory ``make_for(header)`` returns, with no
    :class:`ConsumerRecord` in between (a consumer's records carry their topic and
    partition: made directly, a fetch decodes about a third faster)."""
    data = buffer if isinstance(buffer, bytes) else bytes(buffer)
    for position, header in batch_format.iter_batches(data):
        records: list[R] = []
        _decode_records_at(records, make_for(header), data, position, header, verify_crc, max_bytes)
        yield header, records
