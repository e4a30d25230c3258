"""A view's fetch: the source's batches filtered batch by batch, with real logs: whole
batches sent as stored, mixed ones rebuilt at their offsets, markers kept, and a
response never ending in a gap (a control batch stands in for the records left out)."""

from __future__ import annotations

from pathlib import Path

from sluice.broker.extensions.views import SKIPPED_CONTROL_TYPE, filter_records
from sluice.common.config import TopicConfig
from sluice.features.view_filter import parse_filter
from sluice.protocol.fetch_response import RecordBytes
from sluice.protocol.records.batch import Compression
from sluice.protocol.records.builder import RecordInput, build_batch, decode_batches
from sluice.storage import PartitionLog
from sluice.storage.segment import FileSlice

RED = parse_filter("tag = 'red'")


def append(log: PartitionLog, tags: list[str], codec: Compression = Compression.NONE) -> None:
    records = [
        RecordInput(
            b"k",
            b"%s-%d" % (tag.encode(), log.log_end_offset + i),
            [("x-sluice-tag", tag.encode())],
        )
        for i, tag in enumerate(tags)
    ]
    log.append(
        bytearray(build_batch(records, compression=codec, base_timestamp_ms=1000)), leader_epoch=0
    )


def fetched(log: PartitionLog, offset: int = 0) -> tuple[list[object], bytes]:
    parts = filter_records(log.read(offset, 1 << 20).slices, RED)
    data = b"".join(p.data if isinstance(p, RecordBytes) else p.read() for p in parts)  # type: ignore[union-attr]
    return parts, data


def test_whole_batches_go_as_stored_and_mixed_ones_are_rebuilt(tmp_path: Path) -> None:
    log = PartitionLog.create(
        tmp_path / "orders-0",
        TopicConfig(),
    )
    append(log, ["red", "red"])  # 0-1: all match
    append(log, ["blue", "red", "blue"])  # 2-4: one matches, then one left out
    append(log, ["blue"])  # 5: none
    append(log, ["red"], Compression.ZSTD)  # 6: all match, compressed
    parts, data = fetched(log)
    assert isinstance(parts[0], FileSlice) and isinstance(parts[-1], FileSlice)
    batches = list(decode_batches(data))
    values = [r.value for b in batches if not b.header.is_control for r in b.records]
    offsets = [r.offset for b in batches if not b.header.is_control for r in b.records]
    assert values == [b"red-0", b"red-1", b"red-3", b"red-6"]
    assert offsets == [0, 1, 3, 6]
    rebuilt = batches[1]
    assert (rebuilt.header.base_offset, rebuilt.header.last_offset) == (2, 3)
    assert rebuilt.header.records_count == 1


def test_a_response_never_ends_in_a_gap(tmp_path: Path) -> None:
    log = PartitionLog.create(
        tmp_path / "orders-0",
        TopicConfig(),
    )
    append(log, ["red", "blue"])  # 0-1: the last record left out
    append(log, ["blue", "blue"])  # 2-3: none
    _, data = fetched(log)
    batches = list(decode_batches(data))
    assert [r.offset for r in batches[0].records] == [0]
    skipped = batches[-1]
    assert skipped.header.is_control
    assert (skipped.header.base_offset, skipped.header.last_offset) == (1, 3)
    (record,) = skipped.records
    assert record.offset == 3  # at the last offset: clients move past it
    assert record.key == (0).to_bytes(2, "big") + SKIPPED_CONTROL_TYPE.to_bytes(2, "big")
    # From inside the skipped range nothing but the stand-in comes.
    _, only = fetched(log, 2)
    (alone,) = list(decode_batches(only))
    assert alone.header.is_control and alone.header.last_offset == 3


def test_transaction_markers_are_kept(tmp_path: Path) -> None:
    log = PartitionLog.create(
        tmp_path / "orders-0",
        TopicConfig(),
    )
    records = [RecordInput(b"k", b"v", [("x-sluice-tag", b"blue")])]
    log.append(
        bytearray(
            build_batch(
                records, producer_id=5, producer_epoch=0, base_sequence=0, transactional=True
            )
        ),
        leader_epoch=0,
    )
    log.append_marker(
        producer_id=5, producer_epoch=0, committed=False, coordinator_epoch=0, leader_epoch=0
    )
    append(log, ["red"])
    _, data = fetched(log)
    batches = list(decode_batches(data))
    assert [b.header.is_control for b in batches] == [True, False]
    assert batches[0].header.base_offset == 1
