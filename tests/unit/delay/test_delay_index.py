"""The on-disk delay index (storage.delay_index): readiness, replacement, transactions,
truncation undoing exactly what the truncated batches did, purging, reopening."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.protocol.records.delayed import ParkedRecord
from sluice.storage.delay_index import (
    FILE_NAME,
    DelayIndex,
    DelayIndexError,
    DueRecord,
    ParkedRow,
    row_of,
)


def parked(
    offset: int, due_ms: int, schedule_id: str | None = None, cancel: bool = False
) -> ParkedRow:
    return row_of(ParkedRecord(offset, due_ms, schedule_id, cancel, 0, b"k", b"v", ()))


def index_at(tmp_path: Path) -> DelayIndex:
    index = DelayIndex.open(tmp_path, create=True)
    assert index is not None
    return index


def due(index: DelayIndex, up_to_ms: int = 10**15) -> list[int]:
    return [record.offset for record in index.due(up_to_ms=up_to_ms, limit=1000)]


def test_no_index_until_asked_to_create(tmp_path: Path) -> None:
    assert DelayIndex.open(tmp_path, create=False) is None
    assert not (tmp_path / FILE_NAME).exists()


def test_ready_records_come_by_due_time_then_offset(tmp_path: Path) -> None:
    index = index_at(tmp_path)
    with index.batch():
        index.apply_parked(
            [parked(0, 300), parked(1, 100), parked(2, 300), parked(3, 200)],
            producer_id=-1,
            transactional=False,
        )
    assert due(index) == [1, 3, 0, 2]
    assert due(index, up_to_ms=200) == [1, 3]
    assert index.due(up_to_ms=10**15, after=(300, 0), limit=10) == [DueRecord(300, 2)]
    assert index.due(up_to_ms=10**15, limit=2) == [DueRecord(100, 1), DueRecord(200, 3)]
    counts = index.counts()
    assert (counts.pending, counts.fired, counts.next_due_ms) == (4, 0, 100)


def test_fired_records_are_no_longer_due_and_are_counted(tmp_path: Path) -> None:
    index = index_at(tmp_path)
    index.apply_parked([parked(0, 1), parked(1, 2)], producer_id=-1, transactional=False)
    index.apply_fired(5, [1])
    assert due(index) == [0]
    assert (index.counts().pending, index.counts().fired) == (1, 1)
    assert not index.is_ready(1) and index.is_ready(0)


def test_a_schedule_id_replaces_and_a_cancel_removes(tmp_path: Path) -> None:
    index = index_at(tmp_path)
    index.apply_parked(
        [parked(0, 100, "job"), parked(1, 50, "other")], producer_id=-1, transactional=False
    )
    index.apply_parked([parked(2, 500, "job")], producer_id=-1, transactional=False)
    assert due(index) == [1, 2]
    index.apply_parked([parked(3, 0, "job", cancel=True)], producer_id=-1, transactional=False)
    assert due(index) == [1]
    assert index.counts().pending == 1


def test_transactional_rows_wait_for_their_marker(tmp_path: Path) -> None:
    index = index_at(tmp_path)
    index.apply_parked([parked(0, 10, "job")], producer_id=-1, transactional=False)
    index.apply_parked([parked(1, 20, "job"), parked(2, 30)], producer_id=7, transactional=True)
    index.apply_parked([parked(3, 40)], producer_id=8, transactional=True)
    assert due(index) == [0]
    assert index.counts().pending == 4
    index.apply_marker(7, committed=True, marker_offset=4)
    assert due(index) == [1, 2]  # the commit replaced row 0 (same schedule id)
    index.apply_marker(8, committed=False, marker_offset=5)
    assert due(index) == [1, 2]
    assert index.counts().pending == 2


def test_truncation_undoes_exactly_the_truncated_batches(tmp_path: Path) -> None:
    index = index_at(tmp_path)
    index.apply_parked([parked(0, 10, "job"), parked(1, 20)], producer_id=-1, transactional=False)
    index.apply_parked([parked(2, 30)], producer_id=7, transactional=True)
    index.set_applied(3)
    before = due(index)
    # Batches at 3 (a replacement), 4 (a firing) and 5 (the marker) are cut away.
    index.apply_parked([parked(3, 5, "job")], producer_id=-1, transactional=False)
    index.apply_fired(4, [1])
    index.apply_marker(7, committed=True, marker_offset=5)
    index.set_applied(6)
    assert due(index) == [3, 2]
    index.truncate(3)
    assert due(index) == before == [0, 1]
    assert index.applied == 3
    assert index.counts().pending == 3  # the transaction's row waits again


def test_purge_drops_finished_rows_below_the_offset_and_keeps_the_fired_count(
    tmp_path: Path,
) -> None:
    index = index_at(tmp_path)
    index.apply_parked([parked(i, i) for i in range(4)], producer_id=-1, transactional=False)
    index.apply_fired(4, [0, 1])
    index.apply_fired(6, [2])
    assert index.purge(below=5) == 2
    assert (index.counts().pending, index.counts().fired) == (1, 3)
    assert due(index) == [3]
    # A truncation above the purge point still undoes the later firing.
    index.truncate(6)
    assert due(index) == [2, 3]


def test_reopening_keeps_rows_and_the_applied_offset(tmp_path: Path) -> None:
    index = index_at(tmp_path)
    with index.batch():
        index.apply_parked([parked(0, 7)], producer_id=-1, transactional=False)
        index.set_applied(1)
    index.close()
    again = DelayIndex.open(tmp_path, create=False)
    assert again is not None
    assert again.applied == 1 and due(again) == [0]
    again.close()


def test_a_damaged_file_is_reported_for_a_rebuild(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_bytes(b"this is not a database" * 100)
    with pytest.raises(DelayIndexError):
        DelayIndex.open(tmp_path, create=False)
    DelayIndex.delete(tmp_path)
    assert DelayIndex.open(tmp_path, create=False) is None


def test_a_failed_batch_rolls_back(tmp_path: Path) -> None:
    index = index_at(tmp_path)
    with pytest.raises(RuntimeError), index.batch():
        index.apply_parked([parked(0, 7)], producer_id=-1, transactional=False)
        raise RuntimeError("the append failed")
    assert due(index) == []


def test_within_one_batch_the_later_record_of_a_schedule_id_wins(tmp_path: Path) -> None:
    index = index_at(tmp_path)
    index.apply_parked(
        [parked(0, 5, "s"), parked(1, 9, "s"), parked(2, 7)], producer_id=-1, transactional=False
    )
    assert due(index) == [2, 1]
