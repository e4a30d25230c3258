"""Checkpoint files and the leader-epoch cache on their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.common import errors
from sluice.storage.checkpoint import (
    read_offsets_checkpoint,
    read_pairs_checkpoint,
    write_file_atomically,
    write_offsets_checkpoint,
    write_pairs_checkpoint,
)
from sluice.storage.leader_epoch import LeaderEpochCache


def test_atomic_write_replaces_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "x.checkpoint"
    write_file_atomically(path, b"one")
    write_file_atomically(path, b"two")
    assert path.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["x.checkpoint"]


def test_offsets_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "partition.checkpoint"
    assert read_offsets_checkpoint(path) is None
    write_offsets_checkpoint(path, {"log_start_offset": 3, "high_watermark": 10})
    assert path.read_text() == "0\nlog_start_offset 3\nhigh_watermark 10\n"
    assert read_offsets_checkpoint(path) == {"log_start_offset": 3, "high_watermark": 10}


@pytest.mark.parametrize(
    "text",
    ["", "1\nhigh_watermark 3\n", "0\nhigh_watermark\n", "0\nhigh_watermark x\n", "\xff"],
)
def test_malformed_offsets_checkpoint(tmp_path: Path, text: str) -> None:
    path = tmp_path / "partition.checkpoint"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(errors.KafkaStorageError):
        read_offsets_checkpoint(path)


def test_pairs_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_pairs_checkpoint(path, [(0, 0), (3, 1500)])
    assert path.read_text() == "0\n2\n0 0\n3 1500\n"
    assert read_pairs_checkpoint(path) == [(0, 0), (3, 1500)]
    path.write_text("0\n3\n0 0\n3 1500\n")
    with pytest.raises(errors.KafkaStorageError, match="says 3 entries"):
        read_pairs_checkpoint(path)


def test_leader_epoch_cache(tmp_path: Path) -> None:
    log_end_offset = 50
    cache = LeaderEpochCache(tmp_path, lambda: log_end_offset)
    assert cache.end_offset_for_epoch(0) == (-1, -1)
    assert cache.assign(1, 0)
    assert not cache.assign(1, 5)
    assert not cache.assign(0, 7)
    assert cache.assign(4, 10)
    assert cache.assign(6, 30)
    assert cache.entries == [(1, 0), (4, 10), (6, 30)]
    assert cache.end_offset_for_epoch(0) == (0, 0)
    assert cache.end_offset_for_epoch(1) == (1, 10)
    assert cache.end_offset_for_epoch(5) == (4, 30)
    assert cache.end_offset_for_epoch(6) == (6, 50)
    assert cache.end_offset_for_epoch(7) == (-1, -1)
    assert cache.epoch_for_offset(29) == 4
    cache.flush()
    assert LeaderEpochCache.load(tmp_path, lambda: 0).entries == cache.entries
    # A newer epoch starting before existing entries replaces them.
    assert cache.assign(8, 20)
    assert cache.entries == [(1, 0), (4, 10), (8, 20)]
    cache.truncate_from_end(20)
    assert cache.entries == [(1, 0), (4, 10)]
    cache.truncate_from_start(12)
    assert cache.entries == [(4, 12)]
    cache.truncate_from_start(5)
    assert cache.entries == [(4, 12)]


def test_leader_epoch_checkpoint_out_of_order(tmp_path: Path) -> None:
    write_pairs_checkpoint(tmp_path / "leader-epoch-checkpoint", [(3, 10), (2, 20)])
    with pytest.raises(errors.KafkaStorageError, match="out of order"):
        LeaderEpochCache.load(tmp_path, lambda: 0)
