"""The log cleaner and transactions: a transaction not decided yet is never cleaned,
committed records are compacted like any others, aborted ones go, and markers go once
no data of their transaction is left and their delete horizon has passed, with the
aborted-transaction index following them through a crash at any step of the swap.
Real files, a manual clock, every codec."""

from __future__ import annotations

from collections.abc import Sequence

from cleaner_helpers import Pair, Row, append_pairs, as_row, clean, compacted, overwrite, settle
from conftest import OpenLog
from storage_helpers import decode

from sluice.common.clock import ManualClock
from sluice.protocol.records.batch import Compression
from sluice.storage import PartitionLog, cleaner
from sluice.storage.cleaner import read_cleaner_checkpoint

P1, P2 = 9001, 9002


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
