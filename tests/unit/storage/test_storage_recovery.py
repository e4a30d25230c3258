"""Recovery is a main code path, tested as such: torn tails, corrupted bytes, broken or
missing indexes and checkpoints, leftovers of a crash. Crashes are simulated by copying
the directory of a log that is still open (what the disk holds if the process dies
now), then damaging the copy. Every test runs once per codec."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
from conftest import OpenLog
from storage_helpers import crash_image, decode, make_batch, read_records, values_of

from sluice.common.clock import ManualClock
from sluice.common.config import TopicConfig
from sluice.protocol.records.batch import Compression
from sluice.storage import LogSegment, PartitionLog
from sluice.storage.checkpoint import read_pairs_checkpoint
from sluice.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_NAME


def fill(log: PartitionLog, codec: Compression, batches: int, *, value_bytes: int = 120) -> None:
    """Append batches of two records; batch n of the log has timestamp start + n and
    leader epoch n // 4."""
    for _ in range(batches):
        n = log.log_end_offset // 2
        batch = make_batch(
            codec, values_of(value_bytes, 2, seed=n), timestamp_ms=1_700_000_000_000 + n
        )
        log.append(batch, leader_epoch=n // 4)


def batch_positions(log: PartitionLog) -> list[tuple[Path, int, int, int]]:
    """(segment file, position, size, base offset) of every batch in the log."""
    found = []
    for segment in log.segments:
        for position, header in segment.iter_batches():
            found.append((segment.log_path, position, header.size_bytes, header.base_offset))
    return found


def open_copy(directory: Path, config: TopicConfig, clock: ManualClock) -> PartitionLog:
    """Open a crash image as the broker does without a clean-shutdown marker."""
    return PartitionLog.open(directory, config, clock, recover=True)


def test_segment_recovery_at_every_byte_of_the_last_batch(
    open_log: OpenLog, codec: Compression, tmp_path: Path
) -> None:
    """Cut the file inside the last batch at every byte: recovery keeps exactly the
    batches before it."""
    log = open_log(segment_bytes=1 << 20)
    fill(log, codec, 4, value_bytes=40)
    log.append(make_batch(codec, [b"last"]), leader_epoch=9)
    path, position, size, base_offset = batch_positions(log)[-1]
    log.close()
    data = path.read_bytes()
    copy = tmp_path / "copy"
    copy.mkdir()
    for cut in range(position, position + size):
        (copy / path.name).write_bytes(data[:cut])
        segment = LogSegment.open(
            copy,
            0,
            index_interval_bytes=64,
            index_capacity_bytes=4096,
            active=True,
            trusted=False,
            now_ms=0,
        )
        report = segment.recover()
        assert (report.next_offset, report.valid_bytes, report.batches) == (
            base_offset,
            position,
            4,
        ), f"cut at {cut}"
        assert report.truncated_bytes == cut - position
        assert (report.problem is None) == (cut == position)
        segment.close()
        assert (copy / path.name).stat().st_size == position


def test_torn_tail_of_a_crashed_log(
    open_log: OpenLog,
    codec: Compression,
    clock: ManualClock,
    tmp_path: Path,
) -> None:
    """The whole log, crashed with its last batch torn at telling places (in the
    12-byte head, at the end of the 61-byte header, the last byte): everything before
    the torn batch survives, offsets and epochs included."""
    log = open_log(segment_bytes=1024)
    fill(log, codec, 10, value_bytes=40)
    log.append(make_batch(codec, [b"last"]), leader_epoch=9)
    assert len(log.segments) > 1
    path, position, size, base_offset = batch_positions(log)[-1]
    kept = log.read(0, 1 << 20, max_offset=base_offset).read_bytes()
    image = crash_image(log.directory, tmp_path / "image")
    for cut in sorted(
        {
            position,
            position + 1,
            position + 11,
            position + 12,
            position + 60,
            position + 61,
            position + size - 1,
        }
    ):
        copy = tmp_path / "copy"
        shutil.copytree(image, copy)
        os.truncate(copy / path.name, cut)
        recovered = open_copy(copy, log.config, clock)
        assert recovered.log_end_offset == base_offset, f"cut at {cut}"
        assert recovered.read(0, 1 << 20).read_bytes() == kept, f"cut at {cut}"
        assert (copy / path.name).stat().st_size == position
        assert recovered.leader_epoch_cache.latest_epoch == 2
        recovered.close()
        shutil.rmtree(copy)
    # Uncut, the last batch survives.
    recovered = open_copy(image, log.config, clock)
    assert recovered.log_end_offset == base_offset + 1
    assert recovered.leader_epoch_cache.latest_epoch == 9
    recovered.close()


def test_recovery_logs_what_it_dropped(
    open_log: OpenLog,
    codec: Compression,
    clock: ManualClock,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = open_log()
    fill(log, codec, 3)
    path, position, size, _ = batch_positions(log)[-1]
    image = crash_image(log.directory, tmp_path / "image")
    os.truncate(image / path.name, position + size - 5)
    with caplog.at_level(logging.WARNING, logger="sluice.storage"):
        recovered = open_copy(image, log.config, clock)
    assert recovered.log_end_offset == 4
    (message,) = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]
    assert f"truncated {size - 5} bytes" in message
    assert f"torn batch at {position}" in message
    recovered.close()


@pytest.mark.parametrize(
    ("field", "offset_in_batch"),
    [
        ("crc", 18),
        ("attributes", 22),
        ("records", -3),
        ("magic", 16),
        ("length (too large)", 8),
        ("length (too small)", 11),
    ],
)
def test_a_corrupted_batch_truncates_the_log_from_there(
    open_log: OpenLog,
    codec: Compression,
    clock: ManualClock,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    field: str,
    offset_in_batch: int,
) -> None:
    log = open_log(segment_bytes=1024)
    fill(log, codec, 16)
    batches = batch_positions(log)
    segment_files = [s.log_path.name for s in log.segments]
    assert len(segment_files) >= 3
    # A batch in the middle of the second segment.
    in_second = [b for b in batches if b[0].name == segment_files[1]]
    path, position, size, base_offset = in_second[len(in_second) // 2]
    kept = log.read(0, 1 << 20, max_offset=base_offset).read_bytes()
    image = crash_image(log.directory, tmp_path / "image")
    with open(image / path.name, "r+b") as file:
        where = position + (offset_in_batch if offset_in_batch >= 0 else size + offset_in_batch)
        file.seek(where)
        byte = file.read(1)[0]
        file.seek(where)
        file.write(bytes([byte ^ (0x01 if field == "length (too small)" else 0x40)]))
    with caplog.at_level(logging.WARNING, logger="sluice.storage"):
        recovered = open_copy(image, log.config, clock)
    assert recovered.log_end_offset == base_offset
    assert recovered.read(0, 1 << 20).read_bytes() == kept
    assert [s.log_path.name for s in recovered.segments] == segment_files[:2]
    assert not list(image.glob(f"{segment_files[2]}*"))
    messages = " | ".join(r.getMessage() for r in caplog.records)
    assert f"at {position}" in messages and "deleting" in messages
    # The recovered log takes appends where it ends, and survives a clean restart.
    recovered.append(make_batch(codec, [b"after"]), leader_epoch=9)
    recovered.close()
    again = PartitionLog.open(image, log.config, clock, recover=False)
    assert [r.value for r in read_records(again)][-1] == b"after"
    again.close()


def test_segments_below_the_recovery_point_are_not_rescanned(
    open_log: OpenLog, codec: Compression, clock: ManualClock, tmp_path: Path
) -> None:
    log = open_log(segment_bytes=1024)
    fill(log, codec, 12)
    log.flush()
    flushed_end = log.log_end_offset
    fill(log, codec, 6)
    first_path, first_position, _, _ = batch_positions(log)[0]
    last_path, last_position, last_size, last_offset = batch_positions(log)[-1]
    image = crash_image(log.directory, tmp_path / "image")
    with open(image / first_path.name, "r+b") as file:  # below the recovery point
        file.seek(first_position + 40)
        file.write(b"\xff")
    os.truncate(image / last_path.name, last_position + last_size - 1)
    recovered = open_copy(image, log.config, clock)
    assert recovered.log_end_offset == last_offset
    assert flushed_end < last_offset
    assert recovered.recovery_point == last_offset
    recovered.close()


def test_a_torn_tail_after_a_claimed_clean_shutdown_is_still_recovered(
    open_log: OpenLog, codec: Compression, clock: ManualClock
) -> None:
    log = open_log()
    fill(log, codec, 4)
    end = log.log_end_offset
    path = log.segments[-1].log_path
    log.close()
    with open(path, "ab") as file:
        file.write(b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x01")
    reopened = open_log(recover=False)
    assert reopened.log_end_offset == end
    assert path.stat().st_size == sum(
        b.header.size_bytes for b in decode(reopened.read(0, 1 << 20))
    )


def test_a_crashed_log_reopens_and_continues(
    open_log: OpenLog, codec: Compression, clock: ManualClock, tmp_path: Path
) -> None:
    log = open_log(segment_bytes=1024)
    fill(log, codec, 10)
    log.update_high_watermark(log.log_end_offset)
    log.flush()
    fill(log, codec, 3)
    image = crash_image(log.directory, tmp_path / "image")
    expected = log.read(0, 1 << 20).read_bytes()
    recovered = open_copy(image, log.config, clock)
    assert recovered.read(0, 1 << 20).read_bytes() == expected
    assert recovered.high_watermark == 20
    fill(recovered, codec, 3)
    assert [r.offset for r in read_records(recovered)] == list(range(32))
    second_image = crash_image(image, tmp_path / "second")
    again = open_copy(second_image, log.config, clock)
    assert [r.offset for r in read_records(again)] == list(range(32))
    again.close()
    recovered.close()


# -- indexes ---------------------------------------------------------------------------


def every_read(log: PartitionLog) -> list[bytes]:
    """A read from every offset with a small budget, and a timestamp lookup for every
    batch: exercises every index entry."""
    reads = [log.read(o, 300).read_bytes() for o in range(log.log_start_offset, log.log_end_offset)]
    reads += [repr(log.offset_for_timestamp(1_700_000_000_000 + i)).encode() for i in range(-1, 30)]
    return reads


@pytest.mark.parametrize("damage", ["missing", "garbage", "zeros", "odd size", "shifted entry"])
def test_bad_index_files_are_rebuilt(
    open_log: OpenLog,
    codec: Compression,
    tmp_path: Path,
    damage: str,
) -> None:
    log = open_log(segment_bytes=2048, index_interval_bytes=64)
    fill(log, codec, 24)
    expected = every_read(log)
    log.close()
    directory = tmp_path / "log"
    for index in [*directory.glob("*.index"), *directory.glob("*.timeindex")]:
        size = index.stat().st_size
        if damage == "missing":
            index.unlink()
        elif damage == "garbage":
            index.write_bytes(bytes(range(7, 7 + size)) if size else b"")
        elif damage == "zeros":
            index.write_bytes(bytes(size))
        elif damage == "odd size":
            index.write_bytes(index.read_bytes()[:-3])
        elif damage == "shifted entry" and index.suffix == ".index" and size >= 16:
            data = bytearray(index.read_bytes())
            data[-1] = (data[-1] + 1) % 256  # the last entry's position is off by one
            index.write_bytes(bytes(data))
    reopened = open_log(recover=False)
    assert every_read(reopened) == expected
    reopened.close()
    for log_file in directory.glob("*.log"):
        assert log_file.with_suffix(".index").exists()
        assert log_file.with_suffix(".timeindex").exists()


# -- checkpoints and leftovers -----------------------------------------------------------


def test_an_unclean_open_without_any_checkpoint_rebuilds_everything(
    open_log: OpenLog, codec: Compression, clock: ManualClock, tmp_path: Path
) -> None:
    log = open_log(segment_bytes=1024)
    fill(log, codec, 12)
    epochs = log.leader_epoch_cache.entries
    image = crash_image(log.directory, tmp_path / "image")
    for name in ("partition.checkpoint", "leader-epoch-checkpoint"):
        (image / name).unlink(missing_ok=True)
    for snapshot in image.glob("*.snapshot"):
        snapshot.unlink()
    recovered = open_copy(image, log.config, clock)
    assert recovered.log_end_offset == log.log_end_offset
    assert recovered.leader_epoch_cache.entries == epochs
    recovered.close()


def test_malformed_checkpoints_fall_back_to_recovery(
    open_log: OpenLog, codec: Compression, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(segment_bytes=1024)
    fill(log, codec, 12)
    epochs = log.leader_epoch_cache.entries
    end = log.log_end_offset
    log.close()
    (log.directory / "partition.checkpoint").write_text("0\nlog_start_offset banana\n")
    (log.directory / "leader-epoch-checkpoint").write_text("0\n5\n0 0\n")
    with caplog.at_level(logging.WARNING, logger="sluice.storage"):
        reopened = open_log(recover=False)
    assert reopened.log_end_offset == end
    assert reopened.leader_epoch_cache.entries == epochs
    assert "partition checkpoint" in caplog.text and "leader-epoch" in caplog.text


def test_leftovers_of_a_crash_are_removed(open_log: OpenLog, codec: Compression) -> None:
    log = open_log()
    fill(log, codec, 2)
    log.close()
    directory = log.directory
    leftovers = [
        "partition.checkpoint.tmp",
        "00000000000000000000.log.deleted",
        "00000000000000000000.index.deleted",
        "00000000000000099999.index",
        "00000000000000099999.timeindex",
    ]
    for name in leftovers:
        (directory / name).write_bytes(b"junk")
    reopened = open_log(recover=False)
    assert not [name for name in leftovers if (directory / name).exists()]
    assert reopened.log_end_offset == 4


def test_a_follower_writes_new_epochs_with_its_next_flush_and_a_crash_before_recovers_them(
    open_log: OpenLog, clock: ManualClock, tmp_path: Path
) -> None:
    """A follower's append of a new leader epoch writes no checkpoint on the appending
    thread (once per partition at every leader change): the next flush writes it
    before the recovery point it relies on, and a crash before that flush rebuilds the
    epochs from the batch headers above the recovery point."""
    leader = open_log(tmp_path / "leader", segment_bytes=1024)
    fill(leader, Compression.NONE, 12)
    follower = open_log(tmp_path / "follower", segment_bytes=1024)
    follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())
    assert follower.log_end_offset == leader.log_end_offset
    epochs_path = follower.directory / LEADER_EPOCH_CHECKPOINT_NAME
    assert not epochs_path.exists()

    image = crash_image(follower.directory, tmp_path / "image")
    recovered = open_copy(image, follower.config, clock)
    assert recovered.leader_epoch_cache.entries == leader.leader_epoch_cache.entries
    recovered.close()

    follower.flush()
    assert read_pairs_checkpoint(epochs_path) == leader.leader_epoch_cache.entries


@pytest.mark.parametrize("batch_count", [1, 2, 3])
def test_a_clean_reopen_trusts_the_indexes_of_a_segment_with_few_batches(
    open_log: OpenLog,
    codec: Compression,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    batch_count: int,
) -> None:
    """A segment holds no index entry when no batch starts index.interval.bytes past
    the last entry, however large the batches: a single batch larger than the interval,
    or a few whose starts all lie within it. Its indexes are right as written at close,
    and a clean reopen must not rebuild them (nor warn, which reads like corruption)."""
    interval = 4096
    log = open_log(segment_bytes=1 << 20, index_interval_bytes=interval)
    value_bytes = interval // batch_count + 200  # together they pass the interval
    for i in range(batch_count):
        log.append(make_batch(codec, values_of(value_bytes, 1, seed=i)), leader_epoch=0)
    assert log.segments[0].size_bytes > interval
    expected = every_read(log)
    log.close()
    index_file = tmp_path / "log" / "00000000000000000000.index"
    written = index_file.stat().st_mtime_ns, index_file.stat().st_size
    with caplog.at_level(logging.INFO, logger="sluice.storage"):
        reopened = open_log(recover=False, segment_bytes=1 << 20, index_interval_bytes=interval)
        assert every_read(reopened) == expected
    assert "index" not in caplog.text
    assert (index_file.stat().st_mtime_ns, index_file.stat().st_size) == written


def test_an_index_sparser_than_index_interval_bytes_is_rebuilt_without_alarm(
    open_log: OpenLog, codec: Compression, caplog: pytest.LogCaptureFixture
) -> None:
    """index.interval.bytes lowered between two runs: the index written under the old
    value is right but sparse; it is rebuilt under the new one, said at INFO (not
    damage), and reads stay the same."""
    log = open_log(segment_bytes=1 << 20, index_interval_bytes=4096)
    fill(log, codec, 10)  # about 3 KiB: no entry under 4096, several under 128
    assert log.segments[0]._indexes()[0].entries == 0
    expected = every_read(log)
    log.close()
    with caplog.at_level(logging.INFO, logger="sluice.storage"):
        reopened = open_log(recover=False, segment_bytes=1 << 20, index_interval_bytes=128)
        assert every_read(reopened) == expected
    (record,) = [r for r in caplog.records if "index" in r.getMessage()]
    assert record.levelno == logging.INFO
    assert "index.interval.bytes=128" in record.getMessage()
    assert reopened.segments[0]._indexes()[0].entries > 1
