"""Delayed delivery on the wire and in the log: the headers, parked and fired batches.

A producer asks for a record to be delivered later with a header (``x-sluice-deliver-at``
or ``x-sluice-delay-ms``), or its topic delays every record (``sluice.delivery.delay.ms``).
The broker turns a produced batch holding any such record into a *parked batch*: a
control batch of Sluice's own control type, with the producer's id, epoch, sequence and
record count, so idempotence and transactions see the batch the producer sent. Each of
its control records is::

    key   : version int16 = 0 | type int16 = PARKED_CONTROL_TYPE   (Kafka's control key)
    value : version int16 = 0 | due_ms int64 | flags int8 (1: cancel)
            | schedule id: int16 length (-1: none) + UTF-8
            | moved_from int64 (-1: none; else the offset of the parked record this
              one replaces, parked again at the log end before retention deletes it)
            | timestamp_ms int64 | key: int32 length (-1: null) + bytes
            | value: int32 length (-1: null) + bytes
            | header count int32, each: int16 length + UTF-8 key, int32 length (-1) + value

Clients skip control batches whatever their type, as they skip transaction markers.
When records are due, the leader appends a *fired batch*: an ordinary batch of producer
:data:`FIRED_PRODUCER_ID` (never handed to a client) whose records are the originals,
each with a last header :data:`DELAYED_FROM_HEADER` naming its parked offset, so every
replica can tell from a batch header alone that records fired, and which.

Nothing here reads a clock or does I/O: callers pass the time.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from sluice.common import errors
from sluice.protocol.records.batch import NO_SEQUENCE, BatchHeader, TimestampType
from sluice.protocol.records.builder import (
    CONTROL_RECORD_VERSION,
    ConsumerRecord,
    RecordInput,
    build_batch,
)
from sluice.protocol.records.record import Header

DELIVER_AT_HEADER: Final = "x-sluice-deliver-at"
DELAY_MS_HEADER: Final = "x-sluice-delay-ms"
SCHEDULE_ID_HEADER: Final = "x-sluice-schedule-id"
CANCEL_HEADER: Final = "x-sluice-cancel"
DELAYED_FROM_HEADER: Final = "x-sluice-delayed-from"
"""Added to every fired record: the decimal offset at which it was parked."""

PARKED_CONTROL_TYPE: Final = 0x534C
"""Sluice's control record type ("SL"), far above Kafka's (0–6 so far)."""

FIRED_PRODUCER_ID: Final = 2**63 - 1
"""The producer id of fired batches: the largest int64, which the producer-id allocator
(counting up from 0 in blocks) never reaches."""

SCHEDULE_ID_BYTES_MAX: Final = 1024

_CONTROL_KEY = struct.Struct(">hh")
_PARKED_HEAD = struct.Struct(">hqb")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MOVED_TIME_KEY = struct.Struct(">qqi")
"""moved_from, timestamp_ms and the key's length, read in one go."""
_FLAG_CANCEL = 1
PARKED_KEY: Final = _CONTROL_KEY.pack(CONTROL_RECORD_VERSION, PARKED_CONTROL_TYPE)


@dataclass(frozen=True, slots=True)
class Delivery:
    """When one produced record is to be delivered, from its headers and topic."""

    due_ms: int
    schedule_id: str | None = None
    cancel: bool = False


@dataclass(frozen=True, slots=True)
class ParkedRecord:
    """One record waiting in a parked batch (its offset is the control record's)."""

    offset: int
    due_ms: int
    schedule_id: str | None
    cancel: bool
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    moved_from: int | None = None


_ISO_ZONE = re.compile(r"(Z|[+-]\d\d:?\d\d)$")


def parse_deliver_at(text: str) -> int:
    """Epoch milliseconds of an ``x-sluice-deliver-at`` value: an integer of epoch
    milliseconds, or an ISO-8601 date and time (no zone: UTC). Raises ValueError."""
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    when = datetime.fromisoformat(text)
    if when.tzinfo is None and not _ISO_ZONE.search(text):
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def delivery_of(
    headers: Sequence[Header], *, now_ms: int, topic_delay_ms: int = 0
) -> Delivery | None:
    """The delivery a record asks for; None for a record to append now.

    A deliver-at header wins over a delay header, which wins over the topic's delay; a
    time not after ``now_ms`` means now (None), unless the record names a schedule id,
    which replaces or cancels a pending record whenever it is due. Raises InvalidRecord
    naming the header for a value that is not a time."""
    deliver_at: str | None = None
    delay_ms: str | None = None
    schedule_id: str | None = None
    cancel = False
    for name, value in headers:
        if name == DELIVER_AT_HEADER:
            deliver_at = _text(name, value)
        elif name == DELAY_MS_HEADER:
            delay_ms = _text(name, value)
        elif name == SCHEDULE_ID_HEADER:
            schedule_id = _text(name, value)
            if len(schedule_id.encode()) > SCHEDULE_ID_BYTES_MAX:
                raise errors.InvalidRecord(
                    f"header {name} is longer than {SCHEDULE_ID_BYTES_MAX} bytes"
                )
        elif name == CANCEL_HEADER:
            cancel = True
    if cancel and schedule_id is None:
        raise errors.InvalidRecord(
            f"header {CANCEL_HEADER} needs {SCHEDULE_ID_HEADER}: it names what to cancel"
        )
    if deliver_at is not None:
        try:
            due_ms = parse_deliver_at(deliver_at)
        except (ValueError, OverflowError, OSError):
            raise errors.InvalidRecord(
                f"header {DELIVER_AT_HEADER}={deliver_at!r} is neither epoch milliseconds "
                "nor an ISO-8601 time such as 2026-01-01T12:00:00Z"
            ) from None
    elif delay_ms is not None:
        try:
            delay = int(delay_ms)
        except ValueError:
            raise errors.InvalidRecord(
                f"header {DELAY_MS_HEADER}={delay_ms!r} is not a whole number of milliseconds"
            ) from None
        due_ms = now_ms + max(delay, 0)
    else:
        due_ms = now_ms + max(topic_delay_ms, 0)
    if not -(2**63) <= due_ms < 2**63:
        raise errors.InvalidRecord(f"delivery time {due_ms} is out of range")
    if due_ms <= now_ms and schedule_id is None:
        return None
    return Delivery(max(due_ms, now_ms), schedule_id, cancel)


def _text(name: str, value: bytes | None) -> str:
    if value is None:
        raise errors.InvalidRecord(f"header {name} has no value")
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise errors.InvalidRecord(f"header {name} is not UTF-8") from None


# -- parked batches -------------------------------------------------------------------


def encode_parked_value(
    delivery: Delivery, record: ConsumerRecord, *, moved_from: int | None = None
) -> bytes:
    parts = [
        _PARKED_HEAD.pack(0, delivery.due_ms, _FLAG_CANCEL if delivery.cancel else 0),
        _short_string(delivery.schedule_id),
        _I64.pack(-1 if moved_from is None else moved_from),
        _I64.pack(record.timestamp_ms),
        _long_bytes(record.key),
        _long_bytes(record.value),
        _I32.pack(len(record.headers)),
    ]
    for name, value in record.headers:
        parts.append(_short_string(name))
        parts.append(_long_bytes(value))
    return b"".join(parts)


def build_parked_batch(
    produced: BatchHeader,
    records: Sequence[ConsumerRecord],
    deliveries: Sequence[Delivery],
) -> bytes:
    """The parked batch for a produced batch: the same producer id, epoch, base sequence,
    record count and transactional flag, one control record per produced record.
    ``deliveries[i]`` is record i's (records to deliver now are due now)."""
    assert len(records) == len(deliveries) == produced.records_count
    return build_batch(
        [
            RecordInput(
                key=PARKED_KEY,
                value=encode_parked_value(delivery, record),
                timestamp_ms=record.timestamp_ms,
            )
            for record, delivery in zip(records, deliveries, strict=True)
        ],
        producer_id=produced.producer_id,
        producer_epoch=produced.producer_epoch,
        base_sequence=produced.base_sequence,
        transactional=produced.is_transactional,
        control=True,
    )


def is_parked_key(key: bytes | None) -> bool:
    return key is not None and len(key) >= _CONTROL_KEY.size and key[2:4] == PARKED_KEY[2:4]


def decode_parked(record: ConsumerRecord) -> ParkedRecord:
    """A parked record back from its control record. Raises CorruptMessage.

    One flat pass with ``unpack_from`` (firing decodes every due record)."""
    data = record.value
    if not is_parked_key(record.key) or data is None:
        raise errors.CorruptMessage(f"record at offset {record.offset} is not a parked record")
    try:
        _version, due_ms, flags = _PARKED_HEAD.unpack_from(data, 0)
        at = _PARKED_HEAD.size
        (length,) = _I16.unpack_from(data, at)
        at += 2
        schedule_id = None
        if length >= 0:
            schedule_id = data[at : at + length].decode()
            at += length
        moved_from, timestamp_ms, length = _MOVED_TIME_KEY.unpack_from(data, at)
        at += _MOVED_TIME_KEY.size
        key = None
        if length >= 0:
            key = data[at : at + length]
            at += length
        (length,) = _I32.unpack_from(data, at)
        at += 4
        value = None
        if length >= 0:
            value = data[at : at + length]
            at += length
        (count,) = _I32.unpack_from(data, at)
        at += 4
        if not 0 <= count <= len(data):
            raise ValueError(f"header count {count}")
        headers = []
        for _ in range(count):
            (length,) = _I16.unpack_from(data, at)
            at += 2
            if length < 0:
                raise ValueError("null header key")
            name = data[at : at + length].decode()
            at += length
            (length,) = _I32.unpack_from(data, at)
            at += 4
            header_value = None
            if length >= 0:
                header_value = data[at : at + length]
                at += length
            headers.append((name, header_value))
        if at > len(data):
            raise ValueError("value is truncated")
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise errors.CorruptMessage(f"parked record at offset {record.offset}: {e}") from None
    return ParkedRecord(
        record.offset,
        due_ms,
        schedule_id,
        bool(flags & _FLAG_CANCEL),
        timestamp_ms,
        key,
        value,
        tuple(headers),
        None if moved_from < 0 else moved_from,
    )


def build_moved_batch(parked: Sequence[ParkedRecord]) -> bytes:
    """A parked batch holding ``parked`` again (same due time, schedule id and record),
    each naming the offset it replaces: how a parked record outlives its segment."""
    return build_batch(
        [
            RecordInput(
                key=PARKED_KEY,
                value=encode_parked_value(
                    Delivery(record.due_ms, record.schedule_id),
                    ConsumerRecord(
                        record.offset, record.timestamp_ms, record.key, record.value, record.headers
                    ),
                    moved_from=record.offset,
                ),
                timestamp_ms=record.timestamp_ms,
            )
            for record in parked
        ],
        control=True,
    )


# -- fired batches --------------------------------------------------------------------


def build_fired_batch(parked: Iterable[ParkedRecord], *, timestamp_type: TimestampType) -> bytes:
    """One fired batch holding ``parked`` (not cancels) in order, each with its origin
    header. Not compressed: every replica reads the origin offsets back from it."""
    return build_batch(
        [
            RecordInput(
                key=record.key,
                value=record.value,
                headers=(*record.headers, (DELAYED_FROM_HEADER, b"%d" % record.offset)),
                timestamp_ms=record.timestamp_ms,
            )
            for record in parked
        ],
        producer_id=FIRED_PRODUCER_ID,
        producer_epoch=0,
        base_sequence=NO_SEQUENCE,
        timestamp_type=timestamp_type,
    )


def fired_origins(records: Iterable[ConsumerRecord]) -> list[int]:
    """The parked offsets a fired batch's records came from (its records decoded)."""
    origins = []
    for record in records:
        if not record.headers or record.headers[-1][0] != DELAYED_FROM_HEADER:
            raise errors.CorruptMessage(f"fired record at offset {record.offset} has no origin")
        value = record.headers[-1][1]
        try:
            origins.append(int(value or b""))
        except ValueError:
            raise errors.CorruptMessage(
                f"fired record at offset {record.offset}: bad origin {value!r}"
            ) from None
    return origins


# -- encoding helpers -----------------------------------------------------------------


def _short_string(text: str | None) -> bytes:
    if text is None:
        return _I16.pack(-1)
    data = text.encode()
    return _I16.pack(len(data)) + data


def _long_bytes(data: bytes | None) -> bytes:
    if data is None:
        return _I32.pack(-1)
    return _I32.pack(len(data)) + data
