"""Offsets committed inside a transaction (TxnOffsetCommit): pending and invisible until
the transaction's marker, dropped on an abort, UNSTABLE_OFFSET_COMMIT for a reader that
wants stable offsets, and the same state rebuilt when the partition is loaded."""

from __future__ import annotations

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.coordinator.api import Append, Effect, Record, Reply
from sluice.group.api import OffsetCommitRequest, OffsetCommitResponse, OffsetToCommit
from sluice.group.coordinator import GroupCoordinator

TP = TopicPartition("orders", 0)
GROUP = "enricher"
PRODUCER = 77


def commit_in_transaction(
    coordinator: GroupCoordinator, offset: int, log: list[tuple[int | None, Record]]
) -> None:
    request = OffsetCommitRequest(GROUP, -1, "", None, ((TP, OffsetToCommit(offset)),))
    effects: list[Effect] = coordinator.commit_transactional_offsets(0, 1, request, PRODUCER, 0)
    for effect in effects:
        if isinstance(effect, Append):
            assert effect.transaction == (PRODUCER, 0)
            log.extend((PRODUCER, record) for record in effect.records)
            coordinator.append_completed(0, effect.append_id, None)


def committed(coordinator: GroupCoordinator, *, stable: bool = False) -> tuple[int, ErrorCode]:
    (fetched,) = coordinator.fetch_offsets(GROUP, [TP], require_stable=stable).offsets
    return fetched.offset, fetched.error


def test_offsets_wait_for_the_commit_marker_and_vanish_on_an_abort() -> None:
    coordinator = GroupCoordinator()
    coordinator.load_completed(0)
    log: list[tuple[int | None, Record]] = []
    commit_in_transaction(coordinator, 10, log)
    assert committed(coordinator) == (-1, ErrorCode.none)
    assert committed(coordinator, stable=True)[1] is ErrorCode.unstable_offset_commit
    coordinator.complete_transaction(0, 2, PRODUCER, False)
    assert committed(coordinator, stable=True) == (-1, ErrorCode.none)
    commit_in_transaction(coordinator, 20, log)
    coordinator.complete_transaction(0, 3, PRODUCER, True)
    assert committed(coordinator, stable=True) == (20, ErrorCode.none)


def test_loading_replays_transactional_offsets_and_markers() -> None:
    coordinator = GroupCoordinator()
    coordinator.load_completed(0)
    log: list[tuple[int | None, Record]] = []
    commit_in_transaction(coordinator, 10, log)
    aborted_at = len(log)
    commit_in_transaction(coordinator, 20, log)
    loaded = GroupCoordinator()
    for index, (producer_id, (key, value)) in enumerate(log):
        assert producer_id is not None
        loaded.replay_transactional(producer_id, key, value)
        if index == aborted_at - 1:
            loaded.replay_marker(PRODUCER, False)
    loaded.replay_marker(PRODUCER, True)
    loaded.load_completed(0)
    assert committed(loaded, stable=True) == (20, ErrorCode.none)
    pending = GroupCoordinator()
    for producer_id, (key, value) in log:
        assert producer_id is not None
        pending.replay_transactional(producer_id, key, value)
    pending.load_completed(0)
    assert committed(pending)[0] == -1, "no marker yet: nothing committed"


TP1 = TopicPartition("orders", 1)
OTHER = 88


def commit_for(
    coordinator: GroupCoordinator,
    producer_id: int,
    offsets: dict[TopicPartition, int],
    error: ErrorCode | None = None,
) -> tuple[tuple[TopicPartition, ErrorCode], ...]:
    """TxnOffsetCommit of ``producer_id``; its append completed with ``error``."""
    request = OffsetCommitRequest(
        GROUP, -1, "", None, tuple((tp, OffsetToCommit(o)) for tp, o in offsets.items())
    )
    replies = []
    for effect in coordinator.commit_transactional_offsets(0, 1, request, producer_id, 0):
        if isinstance(effect, Append):
            assert effect.transaction == (producer_id, 0)
            replies += coordinator.append_completed(0, effect.append_id, error)
        else:
            replies.append(effect)
    (reply,) = replies
    assert isinstance(reply, Reply) and isinstance(reply.response, OffsetCommitResponse)
    return reply.response.errors


def fetched(coordinator: GroupCoordinator, *, stable: bool) -> dict[TopicPartition, object]:
    response = coordinator.fetch_offsets(GROUP, [TP, TP1], require_stable=stable)
    return {
        f.partition: f.error if f.error is not ErrorCode.none else f.offset
        for f in response.offsets
    }


def test_each_producers_offsets_wait_for_its_own_marker() -> None:
    coordinator = GroupCoordinator()
    coordinator.load_completed(0)
    commit_for(coordinator, PRODUCER, {TP: 10})
    commit_for(coordinator, OTHER, {TP: 11, TP1: 21})
    unstable = ErrorCode.unstable_offset_commit
    assert fetched(coordinator, stable=True) == {TP: unstable, TP1: unstable}
    coordinator.complete_transaction(0, 2, PRODUCER, False)
    assert fetched(coordinator, stable=True) == {TP: unstable, TP1: unstable}, "OTHER's"
    assert fetched(coordinator, stable=False) == {TP: -1, TP1: -1}
    coordinator.complete_transaction(0, 3, OTHER, True)
    assert fetched(coordinator, stable=True) == {TP: 11, TP1: 21}
    # A marker for a producer with nothing pending changes nothing, and an aborted
    # transaction's offsets do not come back with a later commit marker.
    coordinator.complete_transaction(0, 4, PRODUCER, True)
    assert fetched(coordinator, stable=True) == {TP: 11, TP1: 21}


def test_unstable_is_per_partition_and_only_for_readers_that_ask() -> None:
    coordinator = GroupCoordinator()
    coordinator.load_completed(0)
    plain = OffsetCommitRequest(GROUP, -1, "", None, ((TP1, OffsetToCommit(5)),))
    for effect in coordinator.commit_offsets(0, 1, plain):
        if isinstance(effect, Append):
            assert effect.transaction is None
            coordinator.append_completed(0, effect.append_id, None)
    commit_for(coordinator, PRODUCER, {TP: 10})
    assert fetched(coordinator, stable=True) == {TP: ErrorCode.unstable_offset_commit, TP1: 5}
    assert fetched(coordinator, stable=False) == {TP: -1, TP1: 5}
    coordinator.complete_transaction(0, 2, PRODUCER, True)
    assert fetched(coordinator, stable=True) == {TP: 10, TP1: 5}


def test_a_transactional_commit_that_was_not_written_leaves_nothing_pending() -> None:
    coordinator = GroupCoordinator()
    coordinator.load_completed(0)
    errors = commit_for(coordinator, PRODUCER, {TP: 10}, ErrorCode.not_leader_or_follower)
    assert errors == ((TP, ErrorCode.not_coordinator),)
    assert fetched(coordinator, stable=True) == {TP: -1, TP1: -1}
    coordinator.complete_transaction(0, 2, PRODUCER, True)
    assert fetched(coordinator, stable=True) == {TP: -1, TP1: -1}


def plain_commit(coordinator: GroupCoordinator, offset: int) -> list[Record]:
    """An OffsetCommit of a simple consumer (no generation), written at once."""
    request = OffsetCommitRequest(GROUP, -1, "", None, ((TP, OffsetToCommit(offset)),))
    written: list[Record] = []
    for effect in coordinator.commit_offsets(0, 9, request):
        if isinstance(effect, Append):
            written.extend(effect.records)
            coordinator.append_completed(0, effect.append_id, None)
    return written


def test_a_commit_written_after_a_transactions_offset_wins_over_it() -> None:
    """Kafka keeps the offset whose record is later in the log: a plain commit after a
    TxnOffsetCommit (before the marker) is not overwritten when the marker lands, while
    one written before it is."""
    coordinator = GroupCoordinator()
    coordinator.load_completed(0)
    log: list[tuple[int | None, Record]] = []
    commit_in_transaction(coordinator, 10, log)
    log.extend((None, record) for record in plain_commit(coordinator, 30))
    coordinator.complete_transaction(0, 2, PRODUCER, True)
    assert committed(coordinator) == (30, ErrorCode.none)
    # Loading the same log gives the same answer.
    loaded = GroupCoordinator()
    for producer_id, (key, value) in log:
        if producer_id is None:
            loaded.replay(key, value)
        else:
            loaded.replay_transactional(producer_id, key, value)
    loaded.replay_marker(PRODUCER, True)
    loaded.load_completed(0)
    assert committed(loaded) == (30, ErrorCode.none)
    # The other order: the transaction's offset is the later record, and wins.
    plain_commit(coordinator, 40)
    commit_in_transaction(coordinator, 50, log)
    coordinator.complete_transaction(0, 3, PRODUCER, True)
    assert committed(coordinator) == (50, ErrorCode.none)
