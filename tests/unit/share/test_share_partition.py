"""The share-partition's record states: acquiring, acknowledging, locks, delivery counts,
the window, and what it persists."""

from __future__ import annotations

import random

import pytest

from sluice.common.errors import ErrorCode
from sluice.share.partition import (
    AckType,
    Acquired,
    ArchiveReason,
    LogBatch,
    SharePartition,
    SharePartitionConfig,
)
from sluice.share.state import DeliveryState, ShareState, StateBatch

LOCK_MS = 1_000


def fresh(start: int = 0, **config: int) -> SharePartition:
    return SharePartition(
        ShareState(state_epoch=1, start_offset=start),
        SharePartitionConfig(lock_duration_ms=LOCK_MS, **config),
    )


def data(first: int, last: int) -> LogBatch:
    return LogBatch(first, last, deliverable=True)


def test_new_records_are_acquired_once_and_accepted() -> None:
    share = fresh()
    got = share.acquire_new("a", 0, [data(0, 4), data(5, 9)], max_records=10)
    assert got == [Acquired(0, 9, 1)]
    assert share.acquire_new("b", 0, [data(0, 9)], max_records=10) == []
    assert share.acknowledge("a", 0, 9, [AckType.ACCEPT], 10) == (ErrorCode.none, [])
    assert (share.start_offset, share.end_offset) == (10, 10)


def test_another_member_cannot_acknowledge_what_it_does_not_hold() -> None:
    share = fresh()
    share.acquire_new("a", 0, [data(0, 2)], max_records=10)
    assert share.acknowledge("b", 0, 2, [AckType.ACCEPT], 1)[0] is ErrorCode.invalid_record_state
    # The batch is applied whole or not at all.
    assert share.acknowledge("a", 0, 3, [AckType.ACCEPT], 1)[0] is ErrorCode.invalid_record_state
    assert share.holder(0) == "a"


def test_release_makes_a_record_available_with_its_delivery_count() -> None:
    share = fresh()
    share.acquire_new("a", 0, [data(0, 2)], max_records=10)
    share.acknowledge("a", 0, 2, [AckType.ACCEPT, AckType.RELEASE, AckType.ACCEPT], 1)
    assert share.start_offset == 1
    assert share.acquire_available("b", 2, 10) == [Acquired(1, 1, 2)]


def test_expired_lock_gives_the_record_to_the_next_fetch() -> None:
    share = fresh()
    share.acquire_new("a", 0, [data(0, 0)], max_records=1)
    assert share.next_deadline_ms() == LOCK_MS
    assert share.expire_locks(LOCK_MS - 1) == [] and share.holder(0) == "a"
    share.expire_locks(LOCK_MS)
    assert share.holder(0) is None and share.has_available()
    assert share.acquire_available("b", LOCK_MS, 5) == [Acquired(0, 0, 2)]
    # The first holder's late acknowledgement is refused.
    assert share.acknowledge("a", 0, 0, [1], LOCK_MS)[0] is ErrorCode.invalid_record_state


def test_renew_extends_the_lock() -> None:
    share = fresh()
    share.acquire_new("a", 0, [data(0, 0)], max_records=1)
    share.acknowledge("a", 0, 0, [AckType.RENEW], 900)
    assert share.next_deadline_ms() == 900 + LOCK_MS
    assert share.expire_locks(LOCK_MS) == []


def test_delivery_count_limit_archives_the_record() -> None:
    share = fresh(delivery_count_limit=2)
    share.acquire_new("a", 0, [data(0, 1)], max_records=5)
    share.acknowledge("a", 1, 1, [AckType.ACCEPT], 0)
    share.expire_locks(LOCK_MS)
    assert share.acquire_available("a", LOCK_MS, 5) == [Acquired(0, 0, 2)]
    archived = share.expire_locks(2 * LOCK_MS)
    assert [(a.offset, a.delivery_count, a.reason) for a in archived] == [
        (0, 2, ArchiveReason.DELIVERY_COUNT_LIMIT)
    ]
    assert (share.start_offset, share.end_offset) == (2, 2)


def test_reject_archives_for_the_dead_letter_topic() -> None:
    share = fresh()
    share.acquire_new("a", 0, [data(0, 1)], max_records=5)
    error, archived = share.acknowledge("a", 0, 1, [AckType.REJECT, AckType.ACCEPT], 0)
    assert error is ErrorCode.none
    assert archived[0].offset == 0 and archived[0].reason is ArchiveReason.REJECTED


def test_control_batches_and_gaps_are_never_handed_out() -> None:
    share = fresh()
    batches = [data(0, 1), LogBatch(2, 2, deliverable=False), data(5, 6)]
    assert share.acquire_new("a", 0, batches, max_records=10) == [
        Acquired(0, 1, 1),
        Acquired(5, 6, 1),
    ]
    # Offsets 3-4 (a compacted gap) may be acknowledged as GAP; the rest accepted.
    assert share.acknowledge("a", 0, 6, [1, 1, 0, 0, 0, 1, 1], 1)[0] is ErrorCode.none
    assert share.start_offset == 7


def test_the_window_is_bounded_by_the_record_locks() -> None:
    share = fresh(max_record_locks=5)
    assert share.acquire_new("a", 0, [data(0, 9)], max_records=100) == [Acquired(0, 4, 1)]
    assert share.room == 0
    assert share.acquire_new("b", 0, [data(0, 9)], max_records=100) == []
    share.acknowledge("a", 0, 1, [AckType.ACCEPT], 1)
    assert share.acquire_new("b", 1, [data(0, 9)], max_records=100) == [Acquired(5, 6, 1)]


def test_max_records_cuts_inside_a_batch_so_members_share_it() -> None:
    share = fresh()
    got = share.acquire_new("a", 0, [data(0, 9)], max_records=3)
    assert got == [Acquired(0, 2, 1)]
    assert share.acquire_new("b", 0, [data(0, 9)], 100) == [Acquired(3, 9, 1)]


def test_whole_batches_may_exceed_max_records_to_end_on_a_batch_boundary() -> None:
    """Kafka's batch_optimized acquire mode: a batch once started is taken whole."""
    share = fresh()
    batches = [data(0, 9), data(10, 19)]
    got = share.acquire_new("a", 0, batches, max_records=3, whole_batches=True)
    assert got == [Acquired(0, 9, 1)]
    got = share.acquire_new("b", 0, batches, max_records=10, whole_batches=True)
    assert got == [Acquired(10, 19, 1)]


def test_whole_batches_may_exceed_the_window_by_the_last_batch_only() -> None:
    share = fresh(max_record_locks=5)
    batches = [data(0, 3), data(4, 9), data(10, 12)]
    got = share.acquire_new("a", 0, batches, max_records=100, whole_batches=True)
    assert got == [Acquired(0, 9, 1)]
    assert share.room < 0
    assert share.acquire_new("b", 0, batches, max_records=100, whole_batches=True) == []


def test_whole_batches_hand_out_a_released_batch_whole_again() -> None:
    share = fresh()
    share.acquire_new("a", 0, [data(0, 4), data(5, 9)], max_records=10, whole_batches=True)
    share.acknowledge("a", 0, 9, [AckType.RELEASE], 1)
    got = share.acquire_available("b", 2, 2, whole_batches=True)
    assert got == [Acquired(0, 4, 2)]
    assert share.acquire_available("c", 2, 2) == [Acquired(5, 6, 2)]


def test_snapshot_round_trips_and_a_new_leader_redelivers_what_was_acquired() -> None:
    share = fresh(start=10)
    share.acquire_new("a", 0, [data(10, 19)], max_records=100)
    share.acknowledge("a", 12, 13, [AckType.ACCEPT], 1)
    share.acknowledge("a", 15, 15, [AckType.RELEASE], 1)
    state = share.snapshot(leader_epoch=3)
    assert state.start_offset == 10 and state.leader_epoch == 3
    assert state.batches == (
        StateBatch(10, 11, DeliveryState.AVAILABLE, 1),
        StateBatch(12, 13, DeliveryState.ACKNOWLEDGED, 0),
        StateBatch(14, 19, DeliveryState.AVAILABLE, 1),
    )
    reloaded = SharePartition(state, share.config)
    assert (reloaded.start_offset, reloaded.end_offset) == (10, 20)
    got = reloaded.acquire_available("b", 5, 100)
    assert got == [Acquired(10, 11, 2), Acquired(14, 19, 2)]  # never 12-13: accepted


def test_skip_to_finishes_records_deleted_from_the_log() -> None:
    share = fresh()
    share.acquire_new("a", 0, [data(0, 9)], max_records=100)
    share.skip_to(5)
    assert share.start_offset == 5 and share.holder(4) is None and share.holder(5) == "a"


def test_release_member_frees_only_its_records() -> None:
    share = fresh()
    share.acquire_new("a", 0, [data(0, 1)], max_records=2)
    share.acquire_new("b", 0, [data(2, 3)], max_records=2)
    share.release_member("a")
    assert share.holder(0) is None and share.holder(2) == "b"


@pytest.mark.parametrize("seed", range(20))
def test_random_operations_never_give_one_offset_to_two_members(seed: int) -> None:
    """Any mix of fetches, acknowledgements and expiries: an offset is held by at most
    one member, finished offsets never come back, and the window stays bounded."""
    rng = random.Random(seed)
    print(f"seed {seed}")
    share = fresh(max_record_locks=20, delivery_count_limit=3)
    members = ["a", "b", "c"]
    held: dict[str, set[int]] = {m: set() for m in members}
    finished: set[int] = set()
    now = 0
    log_end = 0
    for _ in range(400):
        now += rng.randrange(0, 400)
        member = rng.choice(members)
        action = rng.random()
        if action < 0.2:
            log_end += rng.randrange(1, 8)
        elif action < 0.5:
            got = share.acquire_available(member, now, rng.randrange(1, 6))
            batches = [data(share.end_offset, log_end - 1)] if log_end > share.end_offset else []
            got += share.acquire_new(member, now, batches, rng.randrange(1, 6))
            for r in got:
                for offset in range(r.first_offset, r.last_offset + 1):
                    assert offset not in finished
                    for other in members:
                        held[other].discard(offset)  # an expired lock moved on
                    held[member].add(offset)
        elif action < 0.8 and held[member]:
            offset = rng.choice(sorted(held[member]))
            kind = rng.choice([AckType.ACCEPT, AckType.RELEASE, AckType.REJECT])
            error, archived = share.acknowledge(member, offset, offset, [kind], now)
            if share.holder(offset) is None and error is ErrorCode.none:
                held[member].discard(offset)
                if kind is not AckType.RELEASE:
                    finished.add(offset)
            finished.update(a.offset for a in archived)
        else:
            finished.update(a.offset for a in share.expire_locks(now))
        for offset in range(share.start_offset, share.end_offset):
            holder = share.holder(offset)
            assert holder is None or offset in held[holder]
        assert share.end_offset - share.start_offset <= 20
        assert all(
            o >= share.start_offset or o in finished
            for m in members
            for o in held[m]
            if share.holder(o)
        )
