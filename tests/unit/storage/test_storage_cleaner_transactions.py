"""The log cleaner and transactions: a transaction not decided yet is never cleaned,
committed records are compacted like any others, aborted ones go, and markers go once
no data of their transaction is left and their delete horizon has passed, with the
aborted-transaction index following them through a crash at any step of the swap.
Real files, a manual clock, every codec."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from cleaner_helpers import (
    DAY_MS,
    Pair,
    Row,
    append_pairs,
    as_row,
    clean,
    compacted,
    leftovers,
    overwrite,
    settle,
)
from conftest import OpenLog
from storage_helpers import crash_image, decode, values_of

from sluice.common.clock import ManualClock
from sluice.protocol.records.batch import ATTR_DELETE_HORIZON, BatchHeader, Compression
from sluice.storage import PartitionLog, cleaner
from sluice.storage.cleaner import CLEANER_CHECKPOINT_NAME, read_cleaner_checkpoint

P1, P2, P3 = 9001, 9002, 9003


class Producer:
    """A transactional producer writing into one log: its sequence is kept here."""

    def __init__(self, log: PartitionLog, codec: Compression, producer_id: int) -> None:
        self.log, self.codec, self.producer_id = log, codec, producer_id
        self.sequence = 0

    def send(self, pairs: Sequence[Pair]) -> int:
        """Append one transactional batch; its base offset."""
        base = self.log.log_end_offset
        append_pairs(
            self.log,
            self.codec,
            pairs,
            producer_id=self.producer_id,
            producer_epoch=0,
            base_sequence=self.sequence,
            transactional=True,
        )
        self.sequence += len(pairs)
        return base

    def end(self, *, commit: bool) -> int:
        """Append the marker; its offset."""
        return self.log.append_marker(
            producer_id=self.producer_id,
            producer_epoch=0,
            committed=commit,
            coordinator_epoch=0,
            leader_epoch=0,
        ).base_offset


def data_rows(log: PartitionLog) -> list[Row]:
    """Every record of a data batch, as a read_uncommitted consumer sees them."""
    found: list[Row] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        batches = decode(log.read(offset, 1 << 20))
        if not batches:
            break
        for batch in batches:
            if not batch.header.is_control:
                found.extend(as_row(r) for r in batch.records if r.offset >= offset)
        offset = batches[-1].header.next_offset
    return found


def segment_bytes(log: PartitionLog, from_offset: int) -> list[bytes]:
    """The bytes of every segment holding an offset at or after ``from_offset``."""
    segments = log.segments
    return [
        s.log_path.read_bytes()
        for i, s in enumerate(segments)
        if i + 1 == len(segments) or segments[i + 1].base_offset > from_offset
    ]


def test_an_open_transaction_is_not_cleaned_until_it_is_decided(
    compact_log: OpenLog, clock: ManualClock, codec: Compression
) -> None:
    log = compact_log(segment_bytes=600)
    overwrite(log, codec, batches=8, keys=3, tag=b"before-")
    producer = Producer(log, codec, P1)
    first = producer.send([(b"txn-key", b"open")])
    overwrite(log, codec, batches=12, keys=3, tag=b"during-")  # rolls past the transaction
    settle(log)
    assert log.last_stable_offset == first < log.segments[-2].base_offset
    untouched = segment_bytes(log, first)
    before = data_rows(log)

    clean(log)
    assert segment_bytes(log, first) == untouched, "nothing at or after the open transaction"
    boundary = max(s.base_offset for s in log.segments if s.base_offset <= first)
    assert read_cleaner_checkpoint(log.directory).first_dirty_offset == boundary
    assert data_rows(log) == compacted(before, boundary)
    assert not cleaner.needs_cleaning(log, clock.wall_ms(), min_cleanable_dirty_ratio=0.01)

    producer.end(commit=True)
    settle(log)
    before = data_rows(log)
    assert cleaner.needs_cleaning(log, clock.wall_ms())
    clean(log)
    end = log.segments[-1].base_offset
    assert read_cleaner_checkpoint(log.directory).first_dirty_offset == end
    assert data_rows(log) == compacted(before, end), "decided: cleaned like the rest"


def committed_rows(log: PartitionLog) -> list[Row]:
    """What a read_committed consumer reads from the log start: records below the last
    stable offset, without those of the aborted transactions the log lists."""
    stable = log.last_stable_offset
    aborted = log.aborted_transactions(log.log_start_offset, stable)
    found: list[Row] = []
    offset = log.log_start_offset
    while offset < stable:
        batches = decode(log.read(offset, 1 << 20, max_offset=stable))
        if not batches:
            break
        for batch in batches:
            header = batch.header
            if header.is_control:
                continue
            if header.is_transactional and any(
                a.producer_id == header.producer_id
                and a.first_offset <= header.base_offset <= a.last_offset
                for a in aborted
            ):
                continue
            found.extend(as_row(r) for r in batch.records if offset <= r.offset < stable)
        offset = batches[-1].header.next_offset
    return found


def markers(log: PartitionLog) -> list[BatchHeader]:
    return [
        header
        for segment in log.segments
        for _, header in segment.iter_batches()
        if header.is_control
    ]


def test_committed_records_are_compacted_like_any_and_aborted_ones_go(
    compact_log: OpenLog, codec: Compression
) -> None:
    log = compact_log(segment_bytes=600)
    committer, aborter = Producer(log, codec, P1), Producer(log, codec, P2)
    append_pairs(log, codec, [(b"k", b"plain-1"), (b"other", b"plain-1")])
    committer.send([(b"k", b"committed"), (b"other", b"committed")])
    aborter.send([(b"k", b"aborted"), (b"third", b"aborted")])
    committer.end(commit=True)
    aborter.end(commit=False)
    append_pairs(log, codec, [(b"other", b"plain-2")])
    overwrite(log, codec, batches=6, keys=3)
    settle(log)
    append_pairs(log, codec, [(b"z", b"in the active segment")])
    log.update_high_watermark(log.log_end_offset)
    before = committed_rows(log)
    assert b"aborted" in [row[3] for row in data_rows(log)]
    end = log.segments[-1].base_offset

    stats = clean(log)

    assert stats is not None and stats.map_end_offset == end
    after = committed_rows(log)
    assert after == compacted(before, end), "read_committed: a compaction of what it read"
    assert data_rows(log) == after, "read_uncommitted: the aborted records are gone too"
    latest = {row[2]: row[3] for row in after}
    assert latest[b"k"] == b"committed", "a committed value shadows an older plain one"
    assert latest[b"other"] == b"plain-2", "and is shadowed by a newer one"
    assert b"third" not in latest, "an aborted value never shadows nor survives"


def test_a_marker_goes_after_its_data_and_the_delete_horizon(
    compact_log: OpenLog, clock: ManualClock, codec: Compression, tmp_path: Path
) -> None:
    log = compact_log(segment_bytes=600, delete_retention_ms=DAY_MS)
    shadowed, aborted, kept = (Producer(log, codec, p) for p in (P1, P2, P3))
    shadowed.send([(b"k", b"committed, then overwritten")])
    shadowed_marker = shadowed.end(commit=True)
    aborted.send([(b"a", b"aborted")])
    aborted_marker = aborted.end(commit=False)
    kept.send([(b"kept", b"committed and latest")])
    kept_marker = kept.end(commit=True)
    append_pairs(log, codec, [(b"k", b"plain")])
    overwrite(log, codec, batches=4, keys=3)
    settle(log)
    append_pairs(log, codec, [(b"z", b"in the active segment")])
    log.update_high_watermark(log.log_end_offset)
    assert [e.last_offset for e in log.aborted_transactions(0, log.log_end_offset)] == [
        aborted_marker
    ]
    first_pass_ms = clock.wall_ms()

    stats = clean(log)
    assert stats is not None and stats.markers_removed == 0
    horizon = first_pass_ms + DAY_MS
    by_offset = {h.base_offset: h for h in markers(log)}
    assert sorted(by_offset) == [shadowed_marker, aborted_marker, kept_marker]
    for offset in (shadowed_marker, aborted_marker):
        header = by_offset[offset]
        assert header.attributes & ATTR_DELETE_HORIZON and header.base_timestamp == horizon
    assert not by_offset[kept_marker].attributes & ATTR_DELETE_HORIZON, "its data is left"
    assert read_cleaner_checkpoint(log.directory).tombstone_horizon_ms == horizon
    assert [e.last_offset for e in log.aborted_transactions(0, log.log_end_offset)] == [
        aborted_marker
    ], "the entry stays while its marker does"
    committed_after_first = committed_rows(log)

    clock.advance(DAY_MS - 1)
    assert clean(log) is None, "nothing dirty and no horizon due"
    clock.advance(1)
    assert cleaner.needs_cleaning(log, clock.wall_ms())
    stats = clean(log)
    assert stats is not None and stats.markers_removed == 2
    assert [h.base_offset for h in markers(log)] == [kept_marker]
    assert log.aborted_transactions(0, log.log_end_offset) == []
    assert committed_rows(log) == committed_after_first
    assert read_cleaner_checkpoint(log.directory).tombstone_horizon_ms == -1
    high_watermark = log.high_watermark

    # No transaction reopens when the producer state is replayed from the log start.
    log.close()
    for snapshot in log.directory.glob("*.snapshot"):
        snapshot.unlink()
    for recover in (True, False):
        copy = shutil.copytree(log.directory, tmp_path / f"reopened-{recover}")
        reopened = PartitionLog.open(copy, log.config, log.clock, recover=recover)
        try:
            reopened.update_high_watermark(high_watermark)
            assert reopened.last_stable_offset == high_watermark
            assert committed_rows(reopened) == committed_after_first
        finally:
            reopened.close()


def test_a_removed_marker_reopens_nothing_after_a_truncation(
    compact_log: OpenLog, clock: ManualClock, codec: Compression
) -> None:
    """A producer-state snapshot taken inside a transaction whose marker is removed
    would reopen it on a replay from there; a truncation replays from the newest
    snapshot left below its offset."""
    log = compact_log(delete_retention_ms=DAY_MS)
    producer = Producer(log, codec, P1)
    append_pairs(log, codec, [(b"x", b"plain")])
    log.roll()
    producer.send([(b"k", b"committed, then overwritten")])
    log.roll()  # a snapshot with the transaction open
    marker = producer.end(commit=True)
    append_pairs(log, codec, [(b"k", b"plain")])
    log.roll()
    append_pairs(log, codec, [(b"y", b"plain")])
    settle(log)
    append_pairs(log, codec, [(b"z", b"in the active segment")])
    log.update_high_watermark(log.log_end_offset)
    assert marker in log.producer_state.snapshot_offsets()

    clean(log)
    clock.advance(DAY_MS)
    stats = clean(log)
    assert stats is not None and stats.markers_removed == 1 and markers(log) == []

    log.truncate_to(marker + 1)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.high_watermark == log.log_end_offset
    assert not log.producer_state.open_transactions


@pytest.mark.parametrize("pass_", ["data goes", "markers go"])
def test_the_aborted_transaction_index_survives_a_crash_at_any_step(
    compact_log: OpenLog,
    clock: ManualClock,
    codec: Compression,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pass_: str,
) -> None:
    """The aborted-transaction index of rewritten segments cannot be rebuilt from them:
    a cleaned segment carries the entries whose markers it keeps (``.txnindex.cleaned``
    → ``.swap`` → in place; an empty one when none is left). An image of the directory
    taken before every rename and unlink of the swap reopens, before and after
    recovery, with exactly the entries of the markers it holds: in the first pass the
    aborted data goes and every entry stays; in a pass after the delete horizon the
    markers and their entries go together."""
    log = compact_log(segment_bytes=1500, delete_retention_ms=DAY_MS)
    for producer_id in (P1, P2):
        Producer(log, codec, producer_id).send([(b"k1", b"aborted %d" % producer_id)])
        Producer(log, codec, producer_id).end(commit=False)
        overwrite(log, codec, batches=10, keys=6)
    settle(log)
    append_pairs(log, codec, [(b"k1", b"in the active segment")])
    log.update_high_watermark(log.log_end_offset)
    aborted = log.aborted_transactions(0, log.log_end_offset)
    assert [entry.producer_id for entry in aborted] == [P1, P2]
    if pass_ == "markers go":
        clean(log)
        clock.advance(DAY_MS)
    log.flush()
    images: list[Path] = []

    def before(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            images.append(crash_image(log.directory, tmp_path / f"crash-{len(images):03d}"))
            return call(*args, **kwargs)

        return wrapper

    plan = cleaner.prepare(log, clock.wall_ms())
    assert plan is not None
    stats = plan.build()
    for name in ("rename", "replace", "unlink"):
        monkeypatch.setattr(os, name, before(getattr(os, name)))
    assert log.swap_cleaned(plan)
    monkeypatch.undo()
    images.append(crash_image(log.directory, tmp_path / "crash-after"))
    swapped_indexes = [
        (path / n).stat().st_size
        for path in images
        for n in os.listdir(path)
        if n.endswith(".txnindex.swap")
    ]
    if pass_ == "markers go":
        assert stats.markers_removed == 2 and markers(log) == []
        assert log.aborted_transactions(0, log.log_end_offset) == []
        assert swapped_indexes and not any(swapped_indexes), "written empty"
    else:
        assert stats.markers_removed == 0 and len(markers(log)) == 2
        assert log.aborted_transactions(0, log.log_end_offset) == aborted
        assert swapped_indexes and all(swapped_indexes)
    outcomes: list[bool] = []
    for path in images:
        for recover in (False, True):
            copy = path if recover else shutil.copytree(path, path.with_name(f"{path.name}-0"))
            reopened = PartitionLog.open(copy, log.config, log.clock, recover=recover)
            try:
                reopened.update_high_watermark(reopened.log_end_offset)
                held = {h.base_offset for h in markers(reopened)}
                found = reopened.aborted_transactions(0, reopened.log_end_offset)
                assert found == [e for e in aborted if e.last_offset in held], (
                    f"{path.name} recover={recover}"
                )
                assert reopened.last_stable_offset == reopened.high_watermark
                assert leftovers(copy) == []
                outcomes.append(not held)
            finally:
                reopened.close()
    if pass_ == "markers go":
        assert outcomes[0] is False and outcomes[-1] is True
        assert outcomes == sorted(outcomes), "never back to old once new"


def test_a_window_further_on_keeps_markers_as_they_are(
    compact_log: OpenLog, clock: ManualClock, codec: Compression
) -> None:
    """A pass over a window of segments that does not start at the log start cannot
    know that nothing of a transaction is left below it: its markers stay untouched
    until a pass from the start."""
    log = compact_log(delete_retention_ms=DAY_MS)
    for i, value in enumerate(values_of(1200, 4)):  # segments too large to be merged
        append_pairs(log, codec, [(b"pad-%d" % i, value)])
        log.roll()
    producer = Producer(log, codec, P1)
    producer.send([(b"x", b"committed, then overwritten")])
    marker = producer.end(commit=True)
    append_pairs(log, codec, [(b"x", b"latest")])
    settle(log)
    append_pairs(log, codec, [(b"z", b"in the active segment")])
    log.update_high_watermark(log.log_end_offset)
    original = next(h for h in markers(log) if h.base_offset == marker)

    passes = 0
    while clean(log, plan_segments_max=2) is not None:
        passes += 1
        assert markers(log) == [original], "no horizon set by a window"
    assert passes >= 2 and [row[3] for row in data_rows(log) if row[2] == b"x"] == [b"latest"]
    (log.directory / CLEANER_CHECKPOINT_NAME).unlink()  # all dirty: a pass from the start
    clean(log)
    (header,) = markers(log)
    assert header.attributes & ATTR_DELETE_HORIZON


def test_a_committed_tombstone_deletes_its_key_then_its_marker_goes(
    compact_log: OpenLog, clock: ManualClock, codec: Compression
) -> None:
    log = compact_log(delete_retention_ms=DAY_MS)
    append_pairs(log, codec, [(b"k", b"plain"), (b"other", b"plain")])
    producer = Producer(log, codec, P1)
    producer.send([(b"k", None)])
    marker = producer.end(commit=True)
    settle(log)
    append_pairs(log, codec, [(b"z", b"in the active segment")])
    log.update_high_watermark(log.log_end_offset)

    def pairs(log: PartitionLog) -> list[tuple[bytes | None, bytes | None]]:
        """(key, value) read_committed, below the active segment."""
        return [(r[2], r[3]) for r in committed_rows(log) if r[2] != b"z"]

    clean(log)
    assert pairs(log) == [(b"other", b"plain"), (b"k", None)]
    (header,) = markers(log)
    assert header.base_offset == marker and not header.attributes & ATTR_DELETE_HORIZON, (
        "the tombstone, its transaction's data, is still there"
    )
    clock.advance(DAY_MS)
    stats = clean(log)
    assert stats is not None and stats.tombstones_removed == 1 and stats.markers_removed == 0
    assert pairs(log) == [(b"other", b"plain")]
    (header,) = markers(log)
    assert header.attributes & ATTR_DELETE_HORIZON
    clock.advance(DAY_MS)
    stats = clean(log)
    assert stats is not None and stats.markers_removed == 1 and markers(log) == []
    assert pairs(log) == [(b"other", b"plain")]
    assert log.last_stable_offset == log.high_watermark
