"""The leader's decisions without a log, a loop or a clock: LeaderCore driven by states,
follower fetches and plain millisecond times, as a simulator drives it."""

from __future__ import annotations

import pytest

from sluice.cluster.model import PartitionState
from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.replication.leader import LeaderCore, Transition

TP = TopicPartition("t", 0)
LAG_MS = 10_000
EPOCH = 3


def _leader(
    isr: tuple[int, ...] = (0, 1, 2),
    *,
    replicas: tuple[int, ...] = (0, 1, 2),
    epoch_start: int = 0,
    changes_isr: bool = True,
    now_ms: int = 1_000,
) -> LeaderCore:
    core = LeaderCore(
        TP,
        0,
        PartitionState(replicas=replicas, leader=0, leader_epoch=EPOCH, isr=isr, version=7),
        changes_isr=changes_isr,
    )
    core.begin_leading(now_ms, epoch_start)
    return core


def test_the_high_watermark_is_the_smallest_log_end_of_the_isr() -> None:
    core = _leader()
    assert core.high_watermark_to_set(10, 0) is None, "followers not heard from hold it"
    core.record_follower_fetch(1, 6, 10, 1_100)
    assert core.high_watermark_to_set(10, 0) is None, "follower 2 still unheard of"
    core.record_follower_fetch(2, 8, 10, 1_100)
    assert core.high_watermark_to_set(10, 0) == 6
    assert core.high_watermark_to_set(10, 6) is None, "it only moves forward"
    core.record_follower_fetch(1, 10, 10, 1_200)
    assert core.high_watermark_to_set(10, 6) == 8


def test_a_replica_outside_the_isr_does_not_hold_the_high_watermark() -> None:
    core = _leader(isr=(0, 1))
    core.record_follower_fetch(1, 9, 10, 1_100)
    assert core.high_watermark_to_set(10, 0) == 9


def test_a_single_replica_commits_at_its_log_end() -> None:
    core = _leader(isr=(0,), replicas=(0,), changes_isr=False)
    assert core.high_watermark_to_set(5, 0) == 5
    assert core.acks_all_outcome(5, EPOCH, 5, 1) is True


def test_a_follower_is_caught_up_when_it_reaches_the_log_end_or_the_previous_one() -> None:
    core = _leader(now_ms=0)
    core.record_follower_fetch(1, 10, 10, 1_000)  # reaches the log end
    assert core.followers[1].last_caught_up_ms == 1_000
    core.record_follower_fetch(1, 10, 20, 2_000)  # behind, but at the previous log end
    assert core.followers[1].last_caught_up_ms == 1_000, "caught up as of the last fetch"
    core.record_follower_fetch(1, 20, 30, 3_000)  # reaches what the end was at 2,000
    assert core.followers[1].last_caught_up_ms == 2_000
    core.record_follower_fetch(1, 21, 40, 4_000)  # behind what the end was at 3,000
    assert core.followers[1].last_caught_up_ms == 2_000


def test_a_caught_up_follower_joins_once_it_reaches_the_high_watermark_and_the_epoch() -> None:
    core = _leader(isr=(0, 1), epoch_start=5)
    core.record_follower_fetch(1, 10, 10, 1_100)
    core.record_follower_fetch(2, 4, 10, 1_100)
    assert core.join_proposal(2, 4, 10) is None, "below the high watermark"
    assert core.pending_isr is None
    core = _leader(isr=(0, 1), epoch_start=5)
    assert core.join_proposal(2, 4, 3) is None, "below the start of the leader's epoch"
    assert core.join_proposal(2, 5, 3) == (0, 1, 2)
    assert core.pending_isr == (0, 1, 2) and core.pending_from_version == 7
    assert core.maximal_isr == frozenset({0, 1, 2})
    assert core.join_proposal(2, 6, 3) is None, "already proposed"


def test_a_pending_join_counts_the_joining_follower_for_the_high_watermark() -> None:
    core = _leader(isr=(0, 1))
    core.record_follower_fetch(1, 10, 10, 1_100)
    core.record_follower_fetch(2, 8, 10, 1_100)
    assert core.high_watermark_to_set(10, 0) == 10
    assert core.join_proposal(2, 8, 8) == (0, 1, 2)
    assert core.high_watermark_to_set(10, 8) is None, "held at the joining follower's end"


def test_one_proposal_at_a_time_until_the_state_moves_or_the_proposal_fails() -> None:
    core = _leader(isr=(0, 1))
    assert core.join_proposal(2, 0, 0) == (0, 1, 2)
    assert core.isr_change_failed(from_version=6) is False, "not the pending proposal"
    assert core.pending_isr is not None
    assert core.isr_change_failed(from_version=7) is True
    assert core.pending_isr is None
    assert core.join_proposal(2, 0, 0) == (0, 1, 2)
    written = PartitionState(
        replicas=(0, 1, 2), leader=0, leader_epoch=EPOCH, isr=(0, 1, 2), version=8
    )
    assert core.update_state(written, 1_500) is Transition.STILL_LEADS
    assert core.pending_isr is None


def test_a_leader_without_an_isr_writer_proposes_nothing() -> None:
    core = _leader(isr=(0, 1), changes_isr=False)
    assert core.join_proposal(2, 10, 0) is None
    assert core.lagging_followers(LAG_MS, 1_000 + LAG_MS + 1) == frozenset({1})
    assert core.shrink_proposal(frozenset({1})) is None


def test_a_follower_not_caught_up_for_the_lag_time_leaves() -> None:
    core = _leader(now_ms=0)
    core.record_follower_fetch(1, 10, 10, 5_000)
    assert core.lagging_followers(LAG_MS, LAG_MS) == frozenset(), "exactly the lag: stays"
    assert core.lagging_followers(LAG_MS, LAG_MS + 1) == frozenset({2})
    assert core.shrink_proposal(frozenset({2})) == (0, 1)
    assert core.lagging_followers(LAG_MS, 10 * LAG_MS) == frozenset(), "one change at a time"
    assert core.maximal_isr == frozenset({0, 1, 2}), "still counted until written"


def test_states_lead_keep_follow_or_are_ignored() -> None:
    core = _leader(isr=(0, 1))
    core.record_follower_fetch(1, 10, 10, 1_100)
    older = PartitionState(replicas=(0, 1, 2), leader=0, leader_epoch=EPOCH, isr=(0,), version=6)
    assert core.update_state(older, 1_200) is Transition.IGNORED
    assert core.state.version == 7
    grown = PartitionState(
        replicas=(0, 1, 2, 3), leader=0, leader_epoch=EPOCH, isr=(0, 1), version=8
    )
    assert core.update_state(grown, 1_300) is Transition.STILL_LEADS
    assert core.followers[1].log_end_offset == 10, "what the leader knew is kept"
    assert set(core.followers) == {1, 2, 3}
    moved = PartitionState(
        replicas=(0, 1, 2, 3), leader=1, leader_epoch=EPOCH + 1, isr=(1,), version=9
    )
    assert core.update_state(moved, 1_400) is Transition.FOLLOWS
    assert core.followers == {} and core.high_watermark_to_set(10, 0) is None
    back = PartitionState(
        replicas=(0, 1, 2, 3), leader=0, leader_epoch=EPOCH + 2, isr=(0,), version=10
    )
    assert core.update_state(back, 1_500) is Transition.LEADS
    core.begin_leading(1_500, 10)
    assert core.followers[1].log_end_offset == -1, "a new epoch forgets the followers' ends"


def test_acks_all_settles_as_kafka_settles_it() -> None:
    core = _leader()
    assert core.acks_all_outcome(5, EPOCH, 4, 2) is False
    assert core.acks_all_outcome(5, EPOCH, 5, 2) is True
    assert isinstance(core.acks_all_outcome(5, EPOCH - 1, 5, 2), errors.NotLeaderOrFollower)
    assert isinstance(
        core.acks_all_outcome(5, EPOCH, 5, 2, detached=True), errors.NotLeaderOrFollower
    )
    assert isinstance(core.acks_all_outcome(5, EPOCH, 5, 4), errors.NotEnoughReplicasAfterAppend)


@pytest.mark.parametrize(
    ("believed", "error"),
    [
        (EPOCH - 1, errors.ErrorCode.fenced_leader_epoch),
        (EPOCH + 1, errors.ErrorCode.unknown_leader_epoch),
    ],
)
def test_a_client_with_another_epoch_is_refused(believed: int, error: errors.ErrorCode) -> None:
    core = _leader()
    core.check_leader(EPOCH)
    core.check_leader()
    with pytest.raises(errors.KafkaError) as raised:
        core.check_leader(believed)
    assert raised.value.code == error
    with pytest.raises(errors.NotLeaderOrFollower):
        core.check_leader(detached=True)


def test_a_fetch_from_a_broker_that_is_not_a_replica_is_refused() -> None:
    core = _leader()
    with pytest.raises(errors.NotLeaderOrFollower):
        core.record_follower_fetch(7, 0, 10, 1_100)


def test_a_state_written_before_this_broker_registered_is_not_led() -> None:
    """It is about the broker's previous run, which may have lost a tail: leading it at
    that epoch would make the followers truncate to the shorter log."""
    before = PartitionState(
        replicas=(0, 1, 2), leader=0, leader_epoch=EPOCH, isr=(0, 1, 2), version=7, written_at=40
    )
    core = LeaderCore(TP, 0, before, changes_isr=True, registered_at=50)
    assert not core.is_leader and core.named_leader_of_a_previous_run
    assert core.high_watermark_to_set(10, 0) is None
    with pytest.raises(errors.NotLeaderOrFollower):
        core.check_leader()
    # The controller's next decision, written after the registration: leads again.
    decided = PartitionState(
        replicas=(0, 1, 2), leader=0, leader_epoch=EPOCH + 1, isr=(0,), version=8, written_at=60
    )
    assert core.update_state(decided, 1_000) is Transition.LEADS
    assert core.is_leader and not core.named_leader_of_a_previous_run


def test_registering_anew_ends_the_leadership_of_states_written_before() -> None:
    state = PartitionState(
        replicas=(0, 1), leader=0, leader_epoch=EPOCH, isr=(0, 1), version=7, written_at=40
    )
    core = LeaderCore(TP, 0, state, changes_isr=True, registered_at=30)
    assert core.is_leader
    core.registered(45)
    assert not core.is_leader


def test_a_store_that_does_not_order_writes_and_registrations_changes_nothing() -> None:
    state = PartitionState(replicas=(0,), leader=0, leader_epoch=EPOCH, isr=(0,), version=7)
    assert LeaderCore(TP, 0, state, changes_isr=False, registered_at=50).is_leader
    ordered = PartitionState(
        replicas=(0,), leader=0, leader_epoch=EPOCH, isr=(0,), version=7, written_at=40
    )
    assert LeaderCore(TP, 0, ordered, changes_isr=False).is_leader
