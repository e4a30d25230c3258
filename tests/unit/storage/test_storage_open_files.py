"""Open files of a log: inactive segments open lazily and an LRU closes idle ones; a new
log is one empty file; damage in a rolled segment is skipped at whole batches and logged
once."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import OpenLog
from storage_helpers import decode, make_batch

from sluice.common.clock import ManualClock
from sluice.common.config import TopicConfig
from sluice.protocol.records.batch import Compression
from sluice.storage import PartitionLog
from sluice.storage.segment import OPEN_SEGMENT_FILES


@pytest.fixture
def lru_capacity() -> Iterator[int]:
    saved = OPEN_SEGMENT_FILES.capacity
    OPEN_SEGMENT_FILES.capacity = 3
    try:
        yield 3
    finally:
        OPEN_SEGMENT_FILES.capacity = saved


def fill(log: PartitionLog, batches: int) -> None:
    for i in range(batches):
        log.append(make_batch(Compression.NONE, [b"v%03d" % i * 40]), leader_epoch=0)
    log.flush()


def open_inactive(log: PartitionLog) -> int:
    return sum(segment.is_open for segment in log.segments[:-1])


def test_inactive_segments_open_lazily_and_at_most_capacity_stay_open(
    open_log: OpenLog, lru_capacity: int
) -> None:
    log = open_log(segment_bytes=300)
    fill(log, 40)
    assert len(log.segments) > 10
    log.close()
    reopened = open_log(recover=False, segment_bytes=300)
    assert open_inactive(reopened) == 0, "opening a log opens only its active segment"
    offset = 0
    while offset < reopened.log_end_offset:
        batches = decode(reopened.read(offset, 1 << 20))
        assert batches and batches[0].header.base_offset == offset
        offset = batches[-1].header.next_offset
    assert offset == 40
    assert open_inactive(reopened) <= lru_capacity


def test_a_new_log_is_one_empty_file_and_closes_without_writing(tmp_path: Path) -> None:
    directory = tmp_path / "new-0"
    log = PartitionLog.create(directory, TopicConfig(), ManualClock())
    assert sorted(os.listdir(directory)) == ["00000000000000000000.log"]
    log.close()
    assert sorted(os.listdir(directory)) == ["00000000000000000000.log"]
    reopened = PartitionLog.open(directory, TopicConfig(), ManualClock(), recover=False)
    reopened.append(make_batch(Compression.NONE), leader_epoch=0)
    assert reopened.log_end_offset == 3
    reopened.close()


@pytest.mark.parametrize("damage", ["torn_tail", "bad_magic"])
def test_damage_in_a_rolled_segment_is_skipped_and_logged_once(
    open_log: OpenLog, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    log = open_log(segment_bytes=600)
    fill(log, 20)
    segments = [(s.log_path, s.base_offset) for s in log.segments]
    assert len(segments) >= 4
    log.close()
    damaged, damaged_base = segments[1]
    next_base = segments[2][1]
    batches = [b for b in decode_file(damaged)]
    last_position, last_size = batches[-1]
    if damage == "torn_tail":
        os.truncate(damaged, last_position + last_size // 2)
    else:
        with damaged.open("r+b") as file:
            file.seek(last_position + 16)
            file.write(b"\x07")
    reopened = open_log(recover=False, segment_bytes=600)
    caplog.set_level(logging.ERROR)
    for _ in range(2):
        offsets = []
        offset = 0
        while offset < reopened.log_end_offset:
            read = decode(reopened.read(offset, 1 << 20))
            assert read, f"nothing read at {offset}"
            offsets += [b.header.base_offset for b in read]
            offset = read[-1].header.next_offset
        lost = next_base - 1
        assert lost not in offsets and lost > damaged_base
        assert offsets == [o for o in range(20) if o != lost]
    damage_logs = [r for r in caplog.records if "damaged at position" in r.getMessage()]
    assert len(damage_logs) == 1
    assert damaged.name in damage_logs[0].getMessage()
    assert f"position {last_position}" in damage_logs[0].getMessage()


def decode_file(path: Path) -> list[tuple[int, int]]:
    """(position, size) of each batch in a segment file."""
    data = path.read_bytes()
    found = []
    position = 0
    while position + 12 <= len(data):
        size = 12 + int.from_bytes(data[position + 8 : position + 12], "big")
        found.append((position, size))
        position += size
    return found
