"""The log cleaner (compaction): what survives a pass, what never moves (offsets, the
active segment, young records, producer state, leader epochs), tombstones and their
delete horizon, the offset-map limit, throttling, and the crash-safe swap. Real files,
a manual clock, and every codec wherever batches are rewritten. Transactions have
their own module, ``test_storage_cleaner_transactions``."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cleaner_helpers import (
    DAY_MS,
    T0,
    Pair,
    Row,
    append_pairs,
    as_row,
    clean,
    compacted,
    keyed_batch,
    leftovers,
    overwrite,
    rows,
    settle,
)
from conftest import OpenLog
from storage_helpers import crash_image, decode, read_records

from sluice.common import errors
from sluice.common.clock import ManualClock
from sluice.common.config import TopicConfig
from sluice.protocol.records.batch import (
    ATTR_DELETE_HORIZON,
    Compression,
    TimestampType,
    parse_header,
)
from sluice.protocol.records.builder import (
    RecordInput,
    build_batch,
)
from sluice.storage import PartitionLog, cleaner
from sluice.storage.cleaner import (
    CLEANER_CHECKPOINT_NAME,
    CleanerCheckpoint,
    Throttler,
    read_cleaner_checkpoint,
)

# -- what survives ----------------------------------------------------------------------


def test_the_latest_value_of_each_key_wins_and_offsets_never_change(
    compact_log: Callable[..., PartitionLog], codec: Compression
) -> None:
    log = compact_log()
    overwrite(log, codec, batches=40, keys=12)
    settle(log)
    overwrite(log, codec, batches=2, keys=12, tag=b"active-")  # stays in the active segment
    log.update_high_watermark(log.log_end_offset)
    before = rows(log)
    end = log.segments[-1].base_offset
    size_before = log.size_bytes()

    assert cleaner.needs_cleaning(log, log.clock.wall_ms())
    stats = clean(log)

    assert stats is not None and stats.map_end_offset == end and stats.keys == 12
    after = rows(log)
    assert after == compacted(before, end)
    below = [r[2] for r in after if r[0] < end]
    assert len(below) == len(set(below)) == 12, "one record per key below the cleaned end"
    assert log.size_bytes() < size_before
    assert log.log_end_offset == before[-1][0] + 1
    # Reading from every original offset returns exactly the survivors from there on.
    for offset in range(0, end, 3):
        assert rows_from(log, offset) == [r for r in after if r[0] >= offset]
    # Every segment still covers the same offsets: base offsets did not move.
    assert log.segments[0].base_offset == 0
    for segment, following in zip(log.segments, log.segments[1:], strict=False):
        assert segment.next_offset <= following.base_offset
    assert read_cleaner_checkpoint(log.directory) == CleanerCheckpoint(end, -1)
    assert not cleaner.needs_cleaning(log, log.clock.wall_ms())
    assert leftovers(log.directory) == []
    # ListOffsets by time: an offset from which the first record read is the first
    # survivor at or after the time.
    for timestamp_ms in sorted({r[1] for r in before})[::7]:
        expected = next(r for r in after if r[1] >= timestamp_ms)
        found = log.offset_for_timestamp(timestamp_ms)
        assert found is not None and found[0] <= expected[0]
        assert rows_from(log, found[0])[0] == expected


def rows_from(log: PartitionLog, offset: int) -> list[Row]:
    return [as_row(record) for record in read_records(log, offset)]


def test_a_pass_that_removes_nothing_rewrites_nothing(
    compact_log: Callable[..., PartitionLog], codec: Compression
) -> None:
    log = compact_log()
    overwrite(log, codec, batches=30, keys=10_000)  # every key once
    settle(log)
    before = rows(log)
    files = [(s.log_path.name, s.log_path.stat().st_ino) for s in log.segments]
    stats = clean(log)
    assert stats is not None and stats.records_removed == 0 and stats.segments_written == 0
    assert stats.bytes_written == 0
    assert [(s.log_path.name, s.log_path.stat().st_ino) for s in log.segments] == files
    assert rows(log) == before
    assert read_cleaner_checkpoint(log.directory).first_dirty_offset == log.log_end_offset


def test_a_second_pass_over_a_clean_log_keeps_every_record(
    compact_log: Callable[..., PartitionLog], codec: Compression
) -> None:
    log = compact_log()
    overwrite(log, codec, batches=30, keys=50)
    settle(log)
    clean(log)
    after = rows(log)
    (log.directory / CLEANER_CHECKPOINT_NAME).unlink()  # pretend it was lost: all dirty
    stats = clean(log)
    assert stats is not None and stats.records_removed == 0
    assert rows(log) == after


def test_records_with_a_null_key_are_kept(
    compact_log: Callable[..., PartitionLog], codec: Compression
) -> None:
    log = compact_log()
    for i in range(12):
        append_pairs(log, codec, [(None, b"anonymous-%d" % i), (b"k", b"keyed-%d" % i)])
    settle(log)
    before = rows(log)
    clean(log)
    after = rows(log)
    assert [r[3] for r in after if r[2] is None] == [b"anonymous-%d" % i for i in range(12)]
    assert [r[3] for r in after if r[2] is not None] == [b"keyed-11"]
    assert after == compacted(before, log.segments[-1].base_offset)


def test_timestamps_headers_and_log_append_time_survive_a_rewrite(
    compact_log: Callable[..., PartitionLog], clock: ManualClock, codec: Compression
) -> None:
    log = compact_log(message_timestamp_type="LogAppendTime")
    for i in range(10):
        pairs: list[Pair] = [(b"a", b"a%d" % i), (b"b%d" % i, b"b")]
        append_pairs(log, codec, pairs, timestamp_type=TimestampType.LOG_APPEND_TIME)
        clock.advance(1000)
    settle(log)
    before = rows(log)
    clean(log)
    after = rows(log)
    assert after == compacted(before, log.segments[-1].base_offset)
    assert len(after) == 11


# -- tombstones ---------------------------------------------------------------------------


def test_tombstones_stay_for_delete_retention_then_go(
    compact_log: Callable[..., PartitionLog], clock: ManualClock, codec: Compression
) -> None:
    log = compact_log(delete_retention_ms=DAY_MS)
    append_pairs(log, codec, [(b"gone", b"v1"), (b"kept", b"v1"), (b"gone", b"v2")])
    append_pairs(log, codec, [(b"gone", None), (b"other", b"x")])
    append_pairs(log, codec, [(b"kept", b"v2")])
    settle(log)
    first_pass_ms = clock.wall_ms()

    clean(log)
    after_first = rows(log)
    assert [(r[2], r[3]) for r in after_first] == [
        (b"gone", None),
        (b"other", b"x"),
        (b"kept", b"v2"),
    ], "the tombstone survives the first pass; the values it deletes do not"
    tombstone = next(r for r in after_first if r[3] is None)
    assert tombstone[1] == T0 + 0, "its timestamp reads the same after the rewrite"
    horizon = first_pass_ms + DAY_MS
    assert read_cleaner_checkpoint(log.directory).tombstone_horizon_ms == horizon
    assert any(
        header.attributes & ATTR_DELETE_HORIZON and header.base_timestamp == horizon
        for segment in log.segments
        for _, header in segment.iter_batches()
    ), "the batch holding it carries its delete horizon"

    clock.advance(DAY_MS - 1)
    assert not cleaner.needs_cleaning(log, clock.wall_ms())
    assert clean(log) is None, "nothing dirty and no tombstone due"
    clock.advance(1)
    assert cleaner.needs_cleaning(log, clock.wall_ms()), "the horizon passed"
    stats = clean(log)
    assert stats is not None and stats.tombstones_removed == 1
    assert [(r[2], r[3]) for r in rows(log)] == [(b"other", b"x"), (b"kept", b"v2")]
    assert read_cleaner_checkpoint(log.directory).tombstone_horizon_ms == -1
    assert not cleaner.needs_cleaning(log, clock.wall_ms())


def test_a_value_written_after_a_tombstone_replaces_it(
    compact_log: Callable[..., PartitionLog], clock: ManualClock, codec: Compression
) -> None:
    log = compact_log(delete_retention_ms=1000)
    append_pairs(log, codec, [(b"k", b"v1"), (b"k", None)])
    settle(log)
    clean(log)
    clock.advance(5000)
    append_pairs(log, codec, [(b"k", b"v2")])
    settle(log)
    clean(log)
    assert [(r[2], r[3]) for r in rows(log)] == [(b"k", b"v2")]


# -- what is never touched ---------------------------------------------------------------


def test_the_active_segment_and_data_above_the_high_watermark_are_untouched(
    compact_log: Callable[..., PartitionLog], codec: Compression
) -> None:
    log = compact_log()
    overwrite(log, codec, batches=30, keys=5)
    settle(log)
    committed_end = log.log_end_offset
    overwrite(log, codec, batches=30, keys=5, tag=b"uncommitted-")  # rolls several segments
    log.update_high_watermark(committed_end)
    active = log.segments[-1]
    active_bytes = active.log_path.read_bytes()
    above = [s.log_path.read_bytes() for s in log.segments if s.base_offset >= committed_end]
    before = rows(log)

    clean(log)

    assert log.segments[-1] is active and active.log_path.read_bytes() == active_bytes
    assert [s.log_path.read_bytes() for s in log.segments if s.base_offset >= committed_end] == (
        above
    )
    assert rows(log) == compacted(before, committed_end)
    assert read_cleaner_checkpoint(log.directory).first_dirty_offset == committed_end


def test_nothing_to_clean_in_a_delete_policy_log_or_a_lone_active_segment(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log()
    overwrite(log, codec, batches=20, keys=3)
    settle(log)
    assert not cleaner.needs_cleaning(log, log.clock.wall_ms())
    assert cleaner.prepare(log, log.clock.wall_ms()) is None
    compacted_log = open_log(open_log_dir(log) / "compact", cleanup_policy="compact")
    overwrite(compacted_log, codec, batches=2, keys=3)
    compacted_log.update_high_watermark(compacted_log.log_end_offset)
    assert not cleaner.needs_cleaning(compacted_log, compacted_log.clock.wall_ms())
    assert cleaner.prepare(compacted_log, compacted_log.clock.wall_ms()) is None


def open_log_dir(log: PartitionLog) -> Path:
    return log.directory.parent


def test_min_compaction_lag_keeps_young_segments(
    compact_log: Callable[..., PartitionLog], clock: ManualClock, codec: Compression
) -> None:
    lag_ms = 60_000
    log = compact_log(min_compaction_lag_ms=lag_ms)
    overwrite(log, codec, batches=20, keys=4)
    log.roll()
    old_end = log.log_end_offset
    clock.advance(2 * lag_ms)
    overwrite(log, codec, batches=20, keys=4, tag=b"young-")
    settle(log)
    before = rows(log)

    clean(log)
    after = rows(log)
    assert after == compacted(before, old_end), "only segments at least the lag old"
    assert [r for r in after if r[0] >= old_end] == [r for r in before if r[0] >= old_end]

    youngest = log.segments[-2]
    youngest_bytes = youngest.log_path.read_bytes()
    clock.advance(youngest.max_timestamp_ms + lag_ms - 1 - clock.wall_ms())
    clean(log)  # may clean young segments that came of age, never the youngest
    assert log.segments[-2] is youngest and youngest.log_path.read_bytes() == youngest_bytes
    clock.advance(1)
    assert cleaner.needs_cleaning(log, clock.wall_ms())
    clean(log)
    assert rows(log) == compacted(before, log.segments[-1].base_offset)


def test_compact_delete_also_applies_retention(
    compact_log: Callable[..., PartitionLog], clock: ManualClock, codec: Compression
) -> None:
    log = compact_log(cleanup_policy="compact,delete", retention_ms=3_600_000)
    overwrite(log, codec, batches=20, keys=4, tag=b"old-")
    log.roll()
    expired_end = log.log_end_offset
    clock.advance(2 * 3_600_000)
    overwrite(log, codec, batches=20, keys=4, tag=b"new-")
    settle(log)
    before = rows(log)

    assert log.apply_retention() > 0
    assert log.log_start_offset == expired_end
    clean(log)
    after = rows(log)
    kept = [r for r in before if r[0] >= expired_end]
    assert after == compacted(kept, log.segments[-1].base_offset)
    assert all(r[3] is not None and r[3].startswith(b"new-") for r in after)


# -- plans voided by the log changing --------------------------------------------------------


def test_a_plan_is_abandoned_when_retention_deletes_its_segments(
    compact_log: Callable[..., PartitionLog], clock: ManualClock, codec: Compression
) -> None:
    log = compact_log(cleanup_policy="compact,delete", retention_ms=3_600_000)
    overwrite(log, codec, batches=20, keys=4)
    log.roll()
    clock.advance(2 * 3_600_000)
    overwrite(log, codec, batches=3, keys=4)
    settle(log)
    plan = cleaner.prepare(log, clock.wall_ms())
    assert plan is not None
    plan.build()
    assert leftovers(log.directory)
    assert log.apply_retention() > 0
    before = rows(log)

    assert not log.swap_cleaned(plan)
    assert plan.finished and log.cleaning_plan is None
    assert leftovers(log.directory) == []
    assert rows(log) == before
    assert read_cleaner_checkpoint(log.directory) == CleanerCheckpoint()
    clean(log)  # a fresh plan works
    assert rows(log) == compacted(before, log.segments[-1].base_offset)


@pytest.mark.parametrize("change", ["truncate", "truncate_fully", "close", "not_built"])
def test_a_plan_is_abandoned_when_the_log_changes_under_it(
    compact_log: Callable[..., PartitionLog], codec: Compression, change: str
) -> None:
    log = compact_log()
    overwrite(log, codec, batches=30, keys=4)
    settle(log)
    plan = cleaner.prepare(log, log.clock.wall_ms())
    assert plan is not None
    if change != "not_built":
        plan.build()
    if change == "truncate":
        log.truncate_to(log.segments[2].base_offset + 1)
        assert read_cleaner_checkpoint(log.directory).first_dirty_offset == 0
    elif change == "truncate_fully":
        log.truncate_fully_and_start_at(1000)
    elif change == "close":
        log.close()
    before = None if log.closed else rows(log)

    assert not log.swap_cleaned(plan)
    assert plan.finished and log.cleaning_plan is None
    assert leftovers(log.directory) == []
    if before is not None:
        assert rows(log) == before


def test_one_plan_at_a_time(compact_log: Callable[..., PartitionLog], codec: Compression) -> None:
    log = compact_log()
    overwrite(log, codec, batches=30, keys=4)
    settle(log)
    plan = cleaner.prepare(log, log.clock.wall_ms())
    assert plan is not None and log.cleaning_plan is plan
    assert not cleaner.needs_cleaning(log, log.clock.wall_ms())
    with pytest.raises(AssertionError):
        cleaner.prepare(log, log.clock.wall_ms())
    plan.discard()
    plan.discard()  # idempotent
    assert log.cleaning_plan is None
    assert cleaner.needs_cleaning(log, log.clock.wall_ms())


def test_truncation_below_the_cleaned_offset_makes_it_dirty_again(
    compact_log: Callable[..., PartitionLog], codec: Compression
) -> None:
    log = compact_log()
    overwrite(log, codec, batches=30, keys=4)
    settle(log)
    clean(log)
    end = read_cleaner_checkpoint(log.directory).first_dirty_offset
    assert end > 0
    cut = log.segments[1].base_offset
    log.truncate_to(cut)
    assert read_cleaner_checkpoint(log.directory).first_dirty_offset == cut


def test_a_corrupt_segment_fails_the_build_and_leaves_the_log_alone(
    compact_log: Callable[..., PartitionLog], codec: Compression
) -> None:
    log = compact_log()
    overwrite(log, codec, batches=30, keys=4)
    settle(log)
    victim = log.segments[1].log_path
    plan = cleaner.prepare(log, log.clock.wall_ms())
    assert plan is not None
    with victim.open("r+b") as file:  # flip a byte in the records of the first batch
        file.seek(70)
        byte = file.read(1)
        file.seek(70)
        file.write(bytes([byte[0] ^ 0xFF]))
    files = [s.log_path.read_bytes() for s in log.segments]
    with pytest.raises(errors.KafkaStorageError, match="CRC"):
        plan.build()
    assert not log.swap_cleaned(plan)
    assert leftovers(log.directory) == []
    assert [s.log_path.read_bytes() for s in log.segments] == files
    assert log.cleaning_plan is None


# -- producers and leader epochs ---------------------------------------------------------------


def test_producer_state_and_leader_epochs_survive(
    compact_log: Callable[..., PartitionLog], codec: Compression, tmp_path: Path
) -> None:
    log = compact_log()
    producer_id, epoch = 42, 3
    for sequence in range(20):
        log.append(
            keyed_batch(
                codec,
                [(b"k%d" % (sequence % 3), b"from-producer-%d" % sequence)],
                timestamp_ms=T0 + sequence,
                producer_id=producer_id,
                producer_epoch=epoch,
                base_sequence=sequence,
            ),
            leader_epoch=sequence // 5,
        )
    last_batch = keyed_batch(
        codec,
        [(b"k0", b"superseded")],
        timestamp_ms=T0 + 20,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=20,
    )
    last = log.append(bytearray(last_batch), leader_epoch=4)
    # Plain records overwrite everything the producer wrote.
    plain: list[Pair] = [(b"k0", b"plain"), (b"k1", b"plain"), (b"k2", b"plain")]
    append_pairs(log, codec, plain, leader_epoch=4)
    settle(log)
    epochs = log.leader_epoch_cache.entries
    for_epoch = [log.end_offset_for_epoch(e) for e in range(6)]
    clean(log)
    assert [r[3] for r in rows(log)] == [b"plain"] * 3
    # The producer's last batch stays, emptied, so its sequence survives a replay.
    kept = [
        header
        for segment in log.segments
        for _, header in segment.iter_batches()
        if header.producer_id == producer_id
    ]
    assert all(h.records_count == 0 for h in kept)
    assert (kept[-1].base_offset, kept[-1].base_sequence) == (last.base_offset, 20)
    log.close()
    for snapshot in log.directory.glob("*.snapshot"):
        snapshot.unlink()

    for recover in (True, False):
        copy = shutil.copytree(log.directory, tmp_path / f"reopened-{recover}")
        reopened = PartitionLog.open(copy, log.config, log.clock, recover=recover)
        try:
            assert reopened.leader_epoch_cache.entries == epochs
            assert [reopened.end_offset_for_epoch(e) for e in range(6)] == for_epoch
            duplicate = reopened.append(bytearray(last_batch), leader_epoch=5)
            assert duplicate.duplicate and duplicate.base_offset == last.base_offset
            with pytest.raises(errors.OutOfOrderSequenceNumber):
                reopened.append(
                    keyed_batch(
                        codec,
                        [(b"k", b"gap")],
                        timestamp_ms=T0,
                        producer_id=producer_id,
                        producer_epoch=epoch,
                        base_sequence=23,
                    ),
                    leader_epoch=5,
                )
            follows = reopened.append(
                keyed_batch(
                    codec,
                    [(b"k", b"next")],
                    timestamp_ms=T0,
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    base_sequence=21,
                ),
                leader_epoch=5,
            )
            assert not follows.duplicate
        finally:
            reopened.close()


# -- limits: the offset map, grouping, throttling ----------------------------------------------


def test_a_window_of_segments_per_plan_still_cleans_correctly(
    compact_log: Callable[..., PartitionLog], codec: Compression
) -> None:
    log = compact_log()
    overwrite(log, codec, batches=80, keys=9)
    settle(log)
    before = rows(log)
    assert len(log.segments) > 6
    passes = 0
    while clean(log, plan_segments_max=2) is not None:
        passes += 1
        after = rows(log)
        assert set(after) <= set(before)
        cleaned_end = read_cleaner_checkpoint(log.directory).first_dirty_offset
        latest = {r[2]: r for r in before if r[0] < cleaned_end}
        assert set(latest.values()) <= set(after), "no latest value is ever lost"
    assert passes > 2
    end = log.segments[-1].base_offset
    assert read_cleaner_checkpoint(log.directory).first_dirty_offset == end
    (log.directory / CLEANER_CHECKPOINT_NAME).unlink()  # one full pass finishes the job
    clean(log)
    assert rows(log) == compacted(before, end)


def test_a_small_offset_map_cleans_in_several_passes(
    compact_log: Callable[..., PartitionLog], codec: Compression
) -> None:
    log = compact_log()
    overwrite(log, codec, batches=60, keys=40)
    settle(log)
    before = rows(log)
    end = log.segments[-1].base_offset
    map_ends = []
    while (stats := clean(log, offset_map_keys_max=25)) is not None:
        assert stats.keys <= 25
        map_ends.append(stats.map_end_offset)
        assert rows(log) == compacted(before, stats.map_end_offset), "each pass is a compaction"
    assert len(map_ends) > 2 and map_ends == sorted(map_ends) and map_ends[-1] == end
    assert rows(log) == compacted(before, end)


def test_small_cleaned_segments_are_merged_up_to_segment_bytes(
    compact_log: Callable[..., PartitionLog], codec: Compression
) -> None:
    log = compact_log()
    overwrite(log, codec, batches=60, keys=3)
    settle(log)
    before = rows(log)
    clean(log)
    segments_after_first = len(log.segments)
    (log.directory / CLEANER_CHECKPOINT_NAME).unlink()  # make it go over them again
    clean(log)
    assert len(log.segments) < segments_after_first
    assert all(s.size_bytes <= log.config.segment_bytes for s in log.segments)
    assert rows(log) == compacted(before, log.segments[-1].base_offset)
    for segment in log.segments[:-1]:  # indexes of merged segments were built and trimmed
        assert segment.translate_offset(segment.base_offset) is not None
    log.close()
    reopened = PartitionLog.open(log.directory, log.config, log.clock, recover=True)
    try:
        assert rows(reopened) == compacted(before, reopened.segments[-1].base_offset)
    finally:
        reopened.close()


def test_build_keeps_to_its_io_budget_without_sleeping(
    compact_log: Callable[..., PartitionLog], codec: Compression
) -> None:
    log = compact_log()
    overwrite(log, codec, batches=80, keys=10, value_bytes=200)
    settle(log)
    plan = cleaner.prepare(log, log.clock.wall_ms())
    assert plan is not None
    clock = ManualClock()
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(int(seconds * 1000) + 1)

    budget = 1000.0
    started = time.monotonic()
    stats = plan.build(budget, clock=clock, sleep=sleep)
    assert time.monotonic() - started < 5, "the injected sleep is used, not time.sleep"
    assert log.swap_cleaned(plan)
    moved = stats.bytes_read + stats.bytes_written
    assert moved > 10 * budget
    assert stats.elapsed_s == pytest.approx(sum(slept), abs=len(slept) / 1000 + 0.01)
    burst_s = cleaner.THROTTLE_BURST_SECONDS
    assert moved / budget - burst_s - len(slept) * 0.002 <= stats.throttled_s <= moved / budget
    assert stats.throttled_s == pytest.approx(sum(slept))


def test_throttler_refills_while_idle_up_to_its_burst() -> None:
    clock = ManualClock()
    slept: list[float] = []
    throttler = Throttler(1000, clock=clock, sleep=slept.append)
    throttler.consume(100)  # within the initial burst (0.1 s of 1000 B/s)
    assert slept == []
    throttler.consume(100)
    assert slept == [pytest.approx(0.1)]
    clock.advance(60_000)  # idle: refills to the burst only
    slept.clear()
    throttler.consume(300)
    assert slept == [pytest.approx(0.2)]
    unlimited = Throttler(None, clock=clock, sleep=slept.append)
    unlimited.consume(10**12)
    assert unlimited.consumed_bytes == 10**12 and len(slept) == 1


def test_needs_cleaning_follows_the_dirty_ratio(
    compact_log: Callable[..., PartitionLog], codec: Compression
) -> None:
    log = compact_log()
    overwrite(log, codec, batches=60, keys=200, value_bytes=60)  # few overwrites
    settle(log)
    now = log.clock.wall_ms()
    assert cleaner.cleanable_range(log, now).dirty_ratio == 1.0
    clean(log)
    assert cleaner.cleanable_range(log, now).dirty_ratio == 0.0
    overwrite(log, codec, batches=4, keys=200, value_bytes=60, tag=b"more-")
    settle(log)
    span = cleaner.cleanable_range(log, now)
    assert 0 < span.dirty_ratio < 0.5
    assert not cleaner.needs_cleaning(log, now)
    assert cleaner.needs_cleaning(log, now, min_cleanable_dirty_ratio=span.dirty_ratio)


# -- crash safety ---------------------------------------------------------------------------


def test_a_crash_at_any_step_leaves_all_old_or_all_new_segments(
    compact_log: Callable[..., PartitionLog],
    codec: Compression,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Copy the directory (what a crash would leave) before every rename and unlink of
    the build and the swap, and after; every copy must reopen, with and without
    recovery, to exactly the old records or exactly the new ones, and once new, new."""
    log = compact_log(segment_bytes=1500)
    overwrite(log, codec, batches=20, keys=6)
    settle(log)
    append_pairs(log, codec, [(b"k1", b"in the active segment")])
    log.update_high_watermark(log.log_end_offset)
    log.flush()
    old = rows(log)
    images: list[Path] = []

    def image() -> None:
        images.append(crash_image(log.directory, tmp_path / f"crash-{len(images):03d}"))

    plan = cleaner.prepare(log, log.clock.wall_ms())
    assert plan is not None
    # During the build: the token bucket's sleep is a moment between reads and writes
    # (the clock stands still, so it sleeps before each; a few images are plenty).
    plan.build(2000, clock=ManualClock(), sleep=lambda _: image() if len(images) < 4 else None)
    building = len(images)
    image()

    def before(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            image()
            return call(*args, **kwargs)

        return wrapper

    for name in ("rename", "replace", "unlink"):
        monkeypatch.setattr(os, name, before(getattr(os, name)))
    assert log.swap_cleaned(plan)
    monkeypatch.undo()
    image()
    new = rows(log)
    assert new != old and new == compacted(old, log.segments[-1].base_offset)
    assert building > 0 and len(images) > building + 10
    assert len(plan.outputs) >= 2, "several segments swap in together"
    states = [set(os.listdir(path)) for path in images]
    assert any(  # mid-commit: some .swap already, a .log.cleaned still (roll back)
        any(n.endswith(".swap") for n in names) and any(n.endswith(".log.cleaned") for n in names)
        for names in states
    )
    assert any(  # mid-install: committed, .log.swap left (complete)
        any(n.endswith(".log.swap") for n in names)
        and not any(n.endswith(".cleaned") for n in names)
        and any(n.endswith(".deleted") for n in names)
        for names in states
    )

    outcomes: list[bool] = []
    for path in images:
        for recover in (False, True):  # the last opening may use the image itself
            copy = path if recover else shutil.copytree(path, path.with_name(f"{path.name}-0"))
            reopened = PartitionLog.open(copy, log.config, log.clock, recover=recover)
            try:
                got = rows(reopened)
                assert got in (old, new), f"{path.name} recover={recover}"
                assert leftovers(copy) == []
                outcomes.append(got == new)
                reopened.append(
                    keyed_batch(codec, [(b"z", b"after")], timestamp_ms=T0), leader_epoch=0
                )
                assert rows(reopened)[-1][3] == b"after"
            finally:
                reopened.close()
    assert outcomes[0] is False and outcomes[-1] is True
    assert outcomes == sorted(outcomes), "never back to old once new"
    assert not any(outcomes[: 2 * (building + 1)]), "nothing is visible before the commit"


# -- volume ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_million_overwrites_of_four_thousand_keys(open_log: OpenLog) -> None:
    keys, total, per_batch = 4096, 1_000_000, 1000
    log = open_log(cleanup_policy="compact", segment_bytes=1 << 20, segment_index_bytes=1 << 20)
    for start in range(0, total, per_batch):
        records = [
            RecordInput(key=b"key-%05d" % (n % keys), value=b"value-%07d" % n)
            for n in range(start, start + per_batch)
        ]
        log.append(bytearray(build_batch(records, base_timestamp_ms=T0)), leader_epoch=0)
    settle(log)
    size_before = log.size_bytes()

    started = time.monotonic()
    stats = clean(log)
    elapsed = time.monotonic() - started

    assert stats is not None and stats.keys == keys
    survivors = read_records(log)
    assert [(r.offset, r.key, r.value) for r in survivors] == [
        (n, b"key-%05d" % (n % keys), b"value-%07d" % n) for n in range(total - keys, total)
    ]
    # What is left: the batches holding the survivors (one of them rebuilt without its
    # older records), and one empty batch ending each other cleaned segment.
    cleaned = log.segments[:-1]
    headers = [header for segment in cleaned for _, header in segment.iter_batches()]
    empty = [h for h in headers if h.records_count == 0]
    full = [h for h in headers if h.records_count]
    assert len(empty) == len(cleaned) - 1
    assert [h.records_count for h in full] == [96, 1000, 1000, 1000, 1000]
    record_bytes = sum(len(decode_one(log, h.base_offset)) for h in full)
    assert log.size_bytes() == len(empty) * 61 + record_bytes
    assert log.size_bytes() < size_before / 100
    print(
        f"\ncleaned {size_before / 1e6:.1f} MB ({total} records) in {elapsed:.2f} s: "
        f"{size_before / 1e6 / elapsed:.1f} MB/s, {total / elapsed / 1e6:.2f} M records/s"
    )


def decode_one(log: PartitionLog, offset: int) -> bytes:
    result = log.read(offset, 1, min_one_batch=True)
    (batch,) = decode(result)
    assert batch.header.base_offset == offset
    data = result.read_bytes()
    assert parse_header(data).size_bytes == len(data)
    return data


def test_a_hundred_thousand_overwrites_compact_exactly(
    open_log: OpenLog, config: TopicConfig
) -> None:
    """The million-record test's shape, small enough for every run."""
    keys, total, per_batch = 512, 100_000, 500
    log = open_log(cleanup_policy="compact", segment_bytes=256 * 1024)
    for start in range(0, total, per_batch):
        records = [
            RecordInput(key=b"key-%05d" % (n % keys), value=b"value-%07d" % n)
            for n in range(start, start + per_batch)
        ]
        log.append(bytearray(build_batch(records, base_timestamp_ms=T0)), leader_epoch=0)
    settle(log)
    stats = clean(log)
    assert stats is not None and stats.records_removed == total - keys
    assert [(r.offset, r.value) for r in read_records(log)] == [
        (n, b"value-%07d" % n) for n in range(total - keys, total)
    ]
