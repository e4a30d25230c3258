"""A log on the simulated disk: offsets and epochs as the broker's log keeps them,
truncation by epoch, and what a crash keeps with and without the page cache."""

from __future__ import annotations

from sluice.sim.disk import SimLog, SimRecord


def _records(epoch: int, *values: str) -> list[SimRecord]:
    return [SimRecord(epoch, 1, i, value) for i, value in enumerate(values)]


def test_appends_take_offsets_and_epochs_start_where_their_first_record_lands() -> None:
    log = SimLog("t-0")
    log.begin_leader_epoch(1)
    assert log.append(_records(1, "a", "b")) == 0
    assert log.append(_records(2, "c")) == 2  # a follower appending a newer leader's record
    assert log.log_end_offset == 3 and log.latest_epoch == 2
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (2, 3)
    assert [r.value for r in log.read(1, 10)] == ["b", "c"]
    assert [r.value for r in log.read(0, 10, end=1)] == ["a"]


def test_truncation_drops_the_tail_its_epochs_and_caps_the_high_watermark() -> None:
    log = SimLog("t-0")
    log.append(_records(1, "a", "b"))
    log.append(_records(2, "c", "d"))
    log.update_high_watermark(4)
    log.truncate_to(2)
    assert log.log_end_offset == 2 and log.high_watermark == 2
    assert log.latest_epoch == 1 and log.end_offset_for_epoch(2) == (-1, -1)


def test_the_high_watermark_never_passes_the_log_end() -> None:
    log = SimLog("t-0")
    log.append(_records(1, "a"))
    log.update_high_watermark(5)
    assert log.high_watermark == 1


def test_a_process_crash_keeps_the_page_cache_a_machine_crash_keeps_what_was_synced() -> None:
    log = SimLog("t-0")
    log.begin_leader_epoch(1)
    log.append(_records(1, "a", "b"))
    log.update_high_watermark(2)
    log.flush()
    log.begin_leader_epoch(3)
    log.append(_records(3, "c"))
    log.update_high_watermark(3)
    assert log.unflushed == 1

    log.crash(lose_unflushed=False)
    assert log.log_end_offset == 3 and log.high_watermark == 2, "the checkpointed one"

    log.crash(lose_unflushed=True)
    assert [r.value for r in log.records] == ["a", "b"]
    assert log.latest_epoch == 1, "epoch 3 began after the last record kept"
    assert log.high_watermark == 2
