"""Helpers for the storage contract suite: batches built with the real builder (every
codec), decoded reads, and crash images of a log directory."""

from __future__ import annotations

import random
import shutil
from collections.abc import Sequence
from pathlib import Path

from sluice.protocol.records.batch import Compression
from sluice.protocol.records.builder import (
    ConsumerRecord,
    DecodedBatch,
    RecordInput,
    build_batch,
    decode_batches,
)
from sluice.storage import PartitionLog, ReadResult

CODECS = list(Compression)


def make_batch(
    codec: Compression,
    values: Sequence[bytes] = (b"a", b"b", b"c"),
    *,
    timestamp_ms: int = 1_700_000_000_000,
    timestamps: Sequence[int] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytearray:
    """One produced batch (base offset 0, leader epoch -1, as a client sends it)."""
    records = [
        RecordInput(
            key=b"key-%d" % i,
            value=value,
            timestamp_ms=None if timestamps is None else timestamps[i],
        )
        for i, value in enumerate(values)
    ]
    return bytearray(
        build_batch(
            records,
            compression=codec,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            transactional=transactional,
            base_timestamp_ms=timestamp_ms if timestamps is None else None,
        )
    )


def values_of(size: int, count: int, seed: int = 0) -> list[bytes]:
    """``count`` random values of ``size`` bytes: incompressible, so a batch stays about
    the same size under every codec."""
    rng = random.Random(seed)
    return [rng.randbytes(size) for _ in range(count)]


def decode(result: ReadResult) -> list[DecodedBatch]:
    data = result.read_bytes()
    batches = list(decode_batches(data))
    assert sum(b.header.size_bytes for b in batches) == len(data) == result.size_bytes, (
        "a read returns whole batches only"
    )
    return batches


def read_records(
    log: PartitionLog, offset: int | None = None, *, max_offset: int | None = None
) -> list[ConsumerRecord]:
    """Every record from ``offset`` (default: log start) to the end, in order."""
    offset = log.log_start_offset if offset is None else offset
    records: list[ConsumerRecord] = []
    end = log.log_end_offset if max_offset is None else max_offset
    while offset < end:
        batches = decode(log.read(offset, 1 << 20, max_offset=max_offset))
        if not batches:
            break
        for batch in batches:
            records.extend(r for r in batch.records if r.offset >= offset)
        offset = batches[-1].header.next_offset
    return records


def crash_image(directory: Path, destination: Path) -> Path:
    """Copy a log directory as it is on disk right now, while its log is still open:
    what a machine would find after the process died (indexes preallocated, no
    snapshot or checkpoint written at close)."""
    shutil.copytree(directory, destination)
    return destination
