"""Delayed-delivery headers, parked and fired batches (protocol.records.delayed)."""

from __future__ import annotations

import dataclasses

import pytest

from sluice.common import errors
from sluice.protocol.records.batch import NO_SEQUENCE, TimestampType, parse_header
from sluice.protocol.records.builder import (
    ConsumerRecord,
    RecordInput,
    build_batch,
    decode_batch,
)
from sluice.protocol.records.delayed import (
    DELAYED_FROM_HEADER,
    FIRED_PRODUCER_ID,
    PARKED_CONTROL_TYPE,
    Delivery,
    build_fired_batch,
    build_parked_batch,
    decode_parked,
    delivery_of,
    fired_origins,
    parse_deliver_at,
)

NOW = 1_800_000_000_000


def test_deliver_at_reads_epoch_millis_and_iso_8601() -> None:
    assert parse_deliver_at("1800000000123") == 1_800_000_000_123
    assert parse_deliver_at("2026-01-01T00:00:00Z") == 1_767_225_600_000
    # An ISO time without a zone is UTC; with one, its offset counts.
    assert parse_deliver_at("1970-01-01T00:00:01") == 1000
    assert parse_deliver_at("1970-01-01T01:00:01+01:00") == 1000
    assert parse_deliver_at("1970-01-01T00:00:01.250Z") == 1250


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([], None),
        ([("x-sluice-delay-ms", b"0")], None),
        ([("x-sluice-delay-ms", b"-5")], None),
        ([("x-sluice-delay-ms", b"250")], Delivery(NOW + 250)),
        ([("x-sluice-deliver-at", str(NOW + 60_000).encode())], Delivery(NOW + 60_000)),
        ([("x-sluice-deliver-at", str(NOW - 1).encode())], None),
        # deliver-at wins over delay-ms, whatever the order
        (
            [("x-sluice-delay-ms", b"5"), ("x-sluice-deliver-at", str(NOW + 9).encode())],
            Delivery(NOW + 9),
        ),
        (
            [("x-sluice-delay-ms", b"5"), ("x-sluice-schedule-id", b"job-1")],
            Delivery(NOW + 5, "job-1"),
        ),
        # a schedule id is parked even when due now: it replaces a pending record
        ([("x-sluice-schedule-id", b"job-1")], Delivery(NOW, "job-1")),
        (
            [("x-sluice-schedule-id", b"job-1"), ("x-sluice-cancel", None)],
            Delivery(NOW, "job-1", cancel=True),
        ),
        ([("other", b"x")], None),
    ],
)
def test_delivery_of_headers(headers: list[tuple[str, bytes | None]], expected: object) -> None:
    assert delivery_of(headers, now_ms=NOW) == expected


def test_topic_delay_applies_unless_a_header_says_otherwise() -> None:
    assert delivery_of([], now_ms=NOW, topic_delay_ms=1000) == Delivery(NOW + 1000)
    assert delivery_of([("x-sluice-delay-ms", b"0")], now_ms=NOW, topic_delay_ms=1000) is None


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ([("x-sluice-deliver-at", b"tomorrow")], "x-sluice-deliver-at='tomorrow'"),
        ([("x-sluice-delay-ms", b"1.5s")], "x-sluice-delay-ms='1.5s'"),
        ([("x-sluice-delay-ms", None)], "has no value"),
        ([("x-sluice-delay-ms", b"\xff")], "not UTF-8"),
        ([("x-sluice-cancel", b"1")], "needs x-sluice-schedule-id"),
        ([("x-sluice-schedule-id", b"x" * 1025)], "longer than 1024"),
        ([("x-sluice-delay-ms", str(2**63).encode())], "out of range"),
    ],
)
def test_bad_headers_are_refused_naming_the_header(
    headers: list[tuple[str, bytes | None]], message: str
) -> None:
    with pytest.raises(errors.InvalidRecord, match=message.replace("(", r"\(")):
        delivery_of(headers, now_ms=NOW)


def _records() -> list[ConsumerRecord]:
    return [
        ConsumerRecord(0, NOW - 5, b"k0", b"v0", (("h", b"1"), ("x-sluice-delay-ms", b"9"))),
        ConsumerRecord(1, NOW - 4, None, None, ()),
        ConsumerRecord(2, NOW - 3, b"", b"\x00" * 300, (("n", None),)),
    ]


def test_parked_batch_keeps_the_producers_fields_and_every_record() -> None:
    produced = parse_header(
        build_batch(
            [RecordInput(b"k", b"v")] * 3,
            producer_id=42,
            producer_epoch=3,
            base_sequence=17,
            transactional=True,
        )
    )
    deliveries = [Delivery(NOW + 9), Delivery(NOW), Delivery(NOW + 1, "s", cancel=True)]
    parked = decode_batch(build_parked_batch(produced, _records(), deliveries))
    header = parked.header
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 17)
    assert header.records_count == 3 and header.last_sequence == 19
    for record, original, delivery in zip(parked.records, _records(), deliveries, strict=True):
        assert record.key == (0).to_bytes(2, "big") + PARKED_CONTROL_TYPE.to_bytes(2, "big")
        back = decode_parked(record)
        assert (back.due_ms, back.schedule_id, back.cancel) == (
            delivery.due_ms,
            delivery.schedule_id,
            delivery.cancel,
        )
        assert (back.timestamp_ms, back.key, back.value, back.headers) == (
            original.timestamp_ms,
            original.key,
            original.value,
            original.headers,
        )
        assert back.offset == record.offset


def test_a_damaged_parked_record_is_corrupt_not_a_crash() -> None:
    produced = parse_header(build_batch([RecordInput(b"k", b"v")]))
    record = decode_batch(build_parked_batch(produced, _records()[:1], [Delivery(NOW)])).records[0]
    assert record.value is not None
    for cut in range(len(record.value)):
        damaged = ConsumerRecord(0, NOW, record.key, record.value[:cut])
        with pytest.raises(errors.CorruptMessage):
            decode_parked(damaged)
    with pytest.raises(errors.CorruptMessage, match="not a parked record"):
        decode_parked(ConsumerRecord(0, NOW, b"\x00\x00\x00\x01", b""))


def test_fired_batch_carries_the_originals_and_their_parked_offsets() -> None:
    produced = parse_header(build_batch([RecordInput(b"k", b"v")] * 3))
    parked = [
        decode_parked(r)
        for r in decode_batch(build_parked_batch(produced, _records(), [Delivery(NOW)] * 3)).records
    ]
    shifted = [dataclasses.replace(p, offset=p.offset + 100) for p in parked]
    fired = decode_batch(build_fired_batch(shifted, timestamp_type=TimestampType.CREATE_TIME))
    assert fired.header.producer_id == FIRED_PRODUCER_ID
    assert fired.header.base_sequence == NO_SEQUENCE and not fired.header.is_control
    assert fired_origins(fired.records) == [100, 101, 102]
    for record, original in zip(fired.records, _records(), strict=True):
        assert (record.key, record.value, record.timestamp_ms) == (
            original.key,
            original.value,
            original.timestamp_ms,
        )
        assert record.headers[:-1] == original.headers
        assert record.headers[-1][0] == DELAYED_FROM_HEADER
