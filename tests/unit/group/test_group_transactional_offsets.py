"""Offsets committed inside a transaction (TxnOffsetCommit): pending and invisible until
the transaction's marker, dropped on an abort, UNSTABLE_OFFSET_COMMIT for a reader that
wants stable offsets, and the same state rebuilt when the partition is loaded."""

from __future__ import annotations

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.coordinator.api import Append, Effect, Record
from sluice.group.api import OffsetCommitRequest, OffsetToCommit
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
