"""Transactions in one partition log: open transactions hold the last stable offset,
markers close them, ABORT markers land in the segment's aborted-transaction index, and
all of it survives clean and unclean restarts, truncation and follower copies. Log-level
tests run once per codec."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import OpenLog
from storage_helpers import crash_image, make_batch

from sluice.common import errors
from sluice.protocol.records.batch import Compression
from sluice.storage import PartitionLog
from sluice.storage.transaction_index import AbortedTransaction

P1, P2 = 7001, 7002


class Producer:
    """A transactional producer's batches: sequences and epoch kept here."""

    def __init__(self, log: PartitionLog, codec: Compression, producer_id: int) -> None:
        self.log, self.codec, self.producer_id = log, codec, producer_id
        self.epoch = 0
        self.sequence = 0

    def send(self, count: int = 2, *, transactional: bool = True) -> tuple[int, int]:
        batch = make_batch(
            self.codec,
            [b"v%d" % (self.sequence + i) for i in range(count)],
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=self.sequence,
            transactional=transactional,
        )
        result = self.log.append(batch, leader_epoch=0)
        self.sequence += count
        return result.base_offset, result.last_offset

    def end(self, *, committed: bool, coordinator_epoch: int = 0) -> int:
        return self.log.append_marker(
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            committed=committed,
            coordinator_epoch=coordinator_epoch,
            leader_epoch=0,
        ).base_offset


def settle(log: PartitionLog) -> None:
    log.update_high_watermark(log.log_end_offset)


def test_an_open_transaction_holds_the_last_stable_offset(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log()
    plain = Producer(log, codec, P2)
    plain.send(transactional=False)  # 0-1
    one = Producer(log, codec, P1)
    assert one.send() == (2, 3)
    settle(log)
    assert (log.high_watermark, log.last_stable_offset) == (4, 2)
    plain.send(transactional=False)  # 4-5: readable uncommitted, not committed
    settle(log)
    assert log.last_stable_offset == 2
    marker = one.end(committed=True)
    assert marker == 6
    assert log.last_stable_offset == 2, "the marker is not below the high watermark yet"
    settle(log)
    assert log.last_stable_offset == log.high_watermark == 7
    assert log.aborted_transactions(0, 7) == []


def test_an_abort_is_indexed_and_listed_for_the_range_it_overlaps(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log()
    one, two = Producer(log, codec, P1), Producer(log, codec, P2)
    one.send()  # 0-1
    two.send()  # 2-3
    assert one.end(committed=False) == 4
    settle(log)
    assert log.last_stable_offset == 2, "producer two's transaction is still open"
    assert log.aborted_transactions(0, 10) == [AbortedTransaction(P1, 0, 4, 2)]
    assert two.end(committed=True) == 5
    settle(log)
    assert log.last_stable_offset == 6
    assert log.aborted_transactions(5, 10) == [], "the abort ended before offset 5"
    assert log.aborted_transactions(4, 10) == [AbortedTransaction(P1, 0, 4, 2)]


def test_a_plain_batch_inside_an_open_transaction_is_refused(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log()
    one = Producer(log, codec, P1)
    one.send()
    with pytest.raises(errors.KafkaError) as raised:
        one.send(transactional=False)
    assert raised.value.code is errors.ErrorCode.invalid_txn_state


def test_markers_from_an_old_epoch_or_an_old_coordinator_are_refused(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log()
    one = Producer(log, codec, P1)
    one.send()
    one.end(committed=True, coordinator_epoch=3)
    with pytest.raises(errors.KafkaError) as raised:
        one.end(committed=True, coordinator_epoch=2)
    assert raised.value.code is errors.ErrorCode.transaction_coordinator_fenced
    one.epoch, one.sequence = 1, 0
    one.send()
    one.epoch = 0
    with pytest.raises(errors.InvalidProducerEpoch):
        one.end(committed=False, coordinator_epoch=3)


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "crash"])
def test_transactions_survive_a_restart(
    open_log: OpenLog, codec: Compression, tmp_path: Path, clean: bool
) -> None:
    log = open_log(segment_bytes=400)
    one, two = Producer(log, codec, P1), Producer(log, codec, P2)
    for _ in range(3):  # aborts spread over several segments
        one.send(4)
        one.end(committed=False)
        two.send(4)
        two.end(committed=True)
    one.send(2)  # left open
    settle(log)
    expected_aborts = log.aborted_transactions(0, log.log_end_offset)
    assert [a.producer_id for a in expected_aborts] == [P1] * 3
    assert len(log.segments) > 2
    lso = log.last_stable_offset
    if clean:
        log.close()
        directory = log.directory
    else:
        directory = crash_image(log.directory, tmp_path / "crashed")
    reopened = open_log(directory)
    reopened.update_high_watermark(reopened.log_end_offset)
    assert reopened.aborted_transactions(0, reopened.log_end_offset) == expected_aborts
    assert reopened.last_stable_offset == lso
    again = Producer(reopened, codec, P1)
    again.sequence = one.sequence
    marker = again.end(committed=False)
    settle(reopened)
    assert reopened.aborted_transactions(marker, marker + 1)[0].first_offset == lso


def test_truncating_away_a_marker_reopens_its_transaction(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log()
    one = Producer(log, codec, P1)
    one.send()  # 0-1
    marker = one.end(committed=False)  # 2
    settle(log)
    assert log.aborted_transactions(0, 3) != []
    log.truncate_to(marker)
    assert log.aborted_transactions(0, 3) == []
    settle(log)
    assert log.last_stable_offset == 0


def test_a_follower_copy_has_the_same_transactions(
    open_log: OpenLog, codec: Compression, tmp_path: Path
) -> None:
    leader = open_log(tmp_path / "leader")
    one, two = Producer(leader, codec, P1), Producer(leader, codec, P2)
    one.send()
    two.send()
    one.end(committed=False)
    settle(leader)
    follower = open_log(tmp_path / "follower")
    follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())
    settle(follower)
    assert follower.aborted_transactions(0, 10) == leader.aborted_transactions(0, 10)
    assert follower.last_stable_offset == leader.last_stable_offset == 2
