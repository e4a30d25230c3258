"""Helpers shared by the cleaner's test modules: keyed batches, a whole pass, the rows a
log reads back and what a compaction must leave of them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from storage_helpers import read_records

from sluice.common.clock import ManualClock
from sluice.protocol.records.batch import Compression, TimestampType
from sluice.protocol.records.builder import ConsumerRecord, RecordInput, build_batch
from sluice.storage import CleaningStats, PartitionLog, cleaner

T0 = 1_700_000_000_000
DAY_MS = 86_400_000
Pair = tuple[bytes | None, bytes | None]
Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def keyed_batch(
    codec: Compression,
    pairs: Sequence[Pair],
    *,
    timestamp_ms: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
) -> bytearray:
    """One produced batch of (key, value) records; record i has timestamp
    ``timestamp_ms + i`` and a header naming it."""
    records = [
        RecordInput(
            key=key,
            value=value,
            headers=[("n", b"%d" % i)],
            timestamp_ms=timestamp_ms + i,
        )
        for i, (key, value) in enumerate(pairs)
    ]
    return bytearray(
        build_batch(
            records,
            compression=codec,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            transactional=transactional,
            timestamp_type=timestamp_type,
        )
    )


def append_pairs(
    log: PartitionLog,
    codec: Compression,
    pairs: Sequence[Pair],
    *,
    leader_epoch: int = 0,
    **kwargs: Any,
) -> None:
    batch = keyed_batch(codec, pairs, timestamp_ms=log.clock.wall_ms(), **kwargs)
    log.append(batch, leader_epoch=leader_epoch)


def overwrite(
    log: PartitionLog,
    codec: Compression,
    *,
    batches: int,
    keys: int,
    per_batch: int = 5,
    value_bytes: int = 30,
    tag: bytes = b"",
) -> None:
    """``batches`` batches of ``per_batch`` records; record n of the run has key
    ``k<n*7 % keys>`` and a value naming n."""
    clock = log.clock
    assert isinstance(clock, ManualClock)
    n = 0
    for _ in range(batches):
        pairs: list[Pair] = []
        for _ in range(per_batch):
            pairs.append((b"k%d" % (n * 7 % keys), (tag + b"v%d-" % n).ljust(value_bytes, b".")))
            n += 1
        append_pairs(log, codec, pairs)
        clock.advance(10)


def settle(log: PartitionLog) -> None:
    """Roll (so everything written is in inactive segments) and commit it all."""
    log.roll()
    log.update_high_watermark(log.log_end_offset)


def rows(log: PartitionLog) -> list[Row]:
    return [as_row(record) for record in read_records(log)]


def as_row(record: ConsumerRecord) -> Row:
    return (record.offset, record.timestamp_ms, record.key, record.value, record.headers)


def compacted(before: Sequence[Row], end_offset: int) -> list[Row]:
    """What one pass over [.., end_offset) must leave: the last record of each key below
    ``end_offset`` (null keys all stay), everything from ``end_offset`` on."""
    last: dict[bytes, int] = {}
    for row in before:
        if row[0] < end_offset and row[2] is not None:
            last[row[2]] = row[0]
    return [
        row for row in before if row[0] >= end_offset or row[2] is None or last[row[2]] == row[0]
    ]


def clean(log: PartitionLog, now_ms: int | None = None, **kwargs: Any) -> CleaningStats | None:
    """One whole pass: prepare, build, swap. None when there was nothing to do."""
    clock = log.clock
    plan = cleaner.prepare(log, clock.wall_ms() if now_ms is None else now_ms, **kwargs)
    if plan is None:
        return None
    stats = plan.build()
    assert log.swap_cleaned(plan)
    assert log.cleaning_plan is None
    return stats


def leftovers(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap")))
