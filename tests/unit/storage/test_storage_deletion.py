"""A partition being deleted: its log closed without writing, its directory renamed to
Kafka's ``<topic>-<partition>.<id>-delete`` name and removed later, a cleaning in
flight cancelled."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cleaner_helpers import leftovers, overwrite, settle
from conftest import OpenLog
from storage_helpers import make_batch

from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.protocol.records.batch import Compression
from sluice.storage import cleaner
from sluice.storage.cleaner import CleaningCancelled
from sluice.storage.partition_dirs import (
    DIRECTORY_NAME_BYTES_MAX,
    DeletedDirectory,
    deletion_dir_name,
    deletion_dirs_in,
    is_deletion_dir_name,
    remove_deletion_dir,
    rename_for_deletion,
)


def test_deletion_names_are_kafkas_unique_and_never_a_partition() -> None:
    topic_partition = TopicPartition("orders", 3)
    first, second = deletion_dir_name(topic_partition), deletion_dir_name(topic_partition)
    assert first != second
    prefix, _, rest = first.partition(".")
    assert prefix == "orders-3"
    assert len(rest) == 32 + len("-delete") and rest.endswith("-delete")
    assert is_deletion_dir_name(first)
    # Live partition directories, even of topics whose names look like the suffix.
    for live in ("orders-3", "orders-delete-0", "a.b-delete-12", "x-0.delete"):
        assert not is_deletion_dir_name(live), live


def test_a_deletion_name_cuts_a_long_topic_to_the_file_name_limit() -> None:
    longest_topic = "t" * 249  # Kafka's longest topic name
    name = deletion_dir_name(TopicPartition(longest_topic, 12345))
    assert len(name.encode()) == DIRECTORY_NAME_BYTES_MAX
    assert name.endswith("-12345." + name.split(".")[-1])
    assert is_deletion_dir_name(name)


def test_closing_for_deletion_writes_nothing(open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log()
    for _ in range(5):
        log.append(make_batch(Compression.NONE), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    before = {
        name: (tmp_path / "log" / name).stat().st_size for name in os.listdir(tmp_path / "log")
    }
    still_open = log.close_for_deletion()
    assert log.closed
    # The active segment's log file stays open for reads in flight, until removal.
    assert len(still_open) == 1 and not still_open[0].closed
    still_open[0].close()
    after = {
        name: (tmp_path / "log" / name).stat().st_size for name in os.listdir(tmp_path / "log")
    }
    # No checkpoint, no producer snapshot, no trimmed index: the files are as they were.
    assert after == before
    # A reader still holding the log is told to look the partition up again.
    with pytest.raises(errors.NotLeaderOrFollower):
        log.read(0, 1024)
    log.close()  # a later close is a no-op


def test_a_closed_partition_directory_is_renamed_then_removed(
    open_log: OpenLog, tmp_path: Path
) -> None:
    log = open_log(directory=tmp_path / "orders-0")
    log.append(make_batch(Compression.NONE), leader_epoch=0)
    still_open = log.close_for_deletion()
    renamed = DeletedDirectory(
        rename_for_deletion(log.directory, TopicPartition("orders", 0)), still_open
    )
    assert not (tmp_path / "orders-0").exists()
    assert [found.path for found in deletion_dirs_in(tmp_path)] == [renamed.path]
    assert remove_deletion_dir(renamed)
    assert all(file.closed for file in still_open)
    assert deletion_dirs_in(tmp_path) == []
    assert remove_deletion_dir(renamed)  # already gone: nothing to do


@pytest.mark.parametrize("codec", [Compression.NONE])
def test_a_cancelled_cleaning_stops_and_leaves_nothing(
    compact_log: OpenLog, codec: Compression
) -> None:
    log = compact_log()
    overwrite(log, codec, batches=40, keys=5)
    settle(log)
    plan = cleaner.prepare(log, log.clock.wall_ms())
    assert plan is not None
    plan.cancel()
    with pytest.raises(CleaningCancelled):
        plan.build()
    plan.discard()
    assert log.cleaning_plan is None
    assert leftovers(log.directory) == []
