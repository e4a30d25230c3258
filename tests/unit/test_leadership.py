"""Elections and reassignments as Kafka's controller decides them
(``sluice.cluster.leadership``), including the cluster cases a single node never meets."""

from __future__ import annotations

import dataclasses

import pytest

from sluice.cluster.leadership import ElectionType, completed, elect, election_type, reassigned
from sluice.cluster.model import PartitionState
from sluice.common import errors
from sluice.common.errors import ErrorCode

PREFERRED = ElectionType.PREFERRED
UNCLEAN = ElectionType.UNCLEAN


def state(
    replicas: tuple[int, ...], leader: int, isr: tuple[int, ...], epoch: int = 4
) -> PartitionState:
    return PartitionState(replicas, leader, epoch, isr)


def test_single_node_never_needs_an_election() -> None:
    only = state((0,), 0, (0,))
    for kind in ElectionType:
        outcome = elect(only, kind, {0})
        assert outcome.state is None
        assert outcome.error_code is ErrorCode.election_not_needed
        assert outcome.error_message == "Leader election not needed for topic partition."


def test_preferred_election_moves_leadership_back_to_the_first_replica() -> None:
    outcome = elect(state((1, 2, 3), 2, (1, 2, 3)), PREFERRED, {1, 2, 3})
    assert outcome.error_code is ErrorCode.none
    assert outcome.state == state((1, 2, 3), 1, (1, 2, 3), epoch=5)


def test_preferred_election_needs_the_preferred_replica_live_and_in_sync() -> None:
    out_of_sync = elect(state((1, 2), 2, (2,)), PREFERRED, {1, 2})
    dead = elect(state((1, 2), 2, (1, 2)), PREFERRED, {2})
    for outcome in (out_of_sync, dead):
        assert outcome.state is None
        assert outcome.error_code is ErrorCode.preferred_leader_not_available


def test_unclean_election_is_needed_only_without_a_live_leader() -> None:
    assert elect(state((1, 2), 2, (2,)), UNCLEAN, {1, 2}).error_code is (
        ErrorCode.election_not_needed
    )
    in_sync = elect(state((1, 2, 3), 1, (1, 3)), UNCLEAN, {2, 3})
    assert in_sync.state == state((1, 2, 3), 3, (1, 3), epoch=5)
    out_of_sync = elect(state((1, 2), 1, (1,)), UNCLEAN, {2})
    assert out_of_sync.state == state((1, 2), 2, (2,), epoch=5)
    nobody = elect(state((1, 2), 1, (1,)), UNCLEAN, {7})
    assert nobody.state is None
    assert nobody.error_code is ErrorCode.eligible_leaders_not_available


def test_unknown_election_types_are_invalid_requests() -> None:
    assert election_type(1) is UNCLEAN
    with pytest.raises(errors.InvalidRequest, match="Unknown election type 2"):
        election_type(2)


def test_reassigning_to_the_current_replicas_changes_nothing() -> None:
    assert reassigned((0,), state((0,), 0, (0,)), {0}) is None


def test_reordering_the_replicas_changes_only_the_preferred_leader() -> None:
    current = state((1, 2), 1, (1, 2))
    assert reassigned((2, 1), current, {1, 2}) == state((2, 1), 1, (1, 2))


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ((), "empty replica list"),
        ((0, 9, 8), "includes broker 8, but no such broker is registered"),
        ((0, 0), "includes the broker 0 more than once"),
    ],
)
def test_invalid_targets(target: tuple[int, ...], message: str) -> None:
    with pytest.raises(errors.KafkaError, match=message) as raised:
        reassigned(target, state((0,), 0, (0,)), {0})
    assert raised.value.code is ErrorCode.invalid_replica_assignment


def test_replication_factor_changes_can_be_forbidden() -> None:
    current = state((1,), 1, (1,))
    with pytest.raises(errors.InvalidReplicationFactor, match="changed from 1 to 2"):
        reassigned((1, 2), current, {1, 2}, allow_replication_factor_change=False)


def test_moving_a_replica_adds_it_first_and_removes_the_old_once_it_is_in_sync() -> None:
    current = state((1, 2, 3), 1, (1, 2, 3))
    moving = reassigned((4, 2, 3), current, {1, 2, 3, 4})
    assert moving is not None
    assert moving.replicas == (4, 2, 3, 1)
    assert (moving.adding_replicas, moving.removing_replicas) == ((4,), (1,))
    assert (moving.leader, moving.isr) == (1, (1, 2, 3))  # nothing moves yet
    assert completed(moving, {1, 2, 3, 4}) is None  # 4 has not caught up
    caught_up = dataclasses.replace(moving, isr=(1, 2, 3, 4))
    done = completed(caught_up, {1, 2, 3, 4})
    assert done is not None
    assert (done.replicas, done.isr, done.adding_replicas, done.removing_replicas) == (
        (4, 2, 3),
        (2, 3, 4),
        (),
        (),
    )
    # The removed leader hands over to the first in-sync replica of the target.
    assert (done.leader, done.leader_epoch) == (4, current.leader_epoch + 1)


def test_dropping_a_replica_completes_at_once() -> None:
    done = reassigned((1, 2), state((1, 2, 3), 1, (1, 2, 3)), {1, 2, 3})
    assert done is not None
    assert (done.replicas, done.isr, done.reassigning) == ((1, 2), (1, 2), False)


def test_cancelling_goes_back_to_the_original_replicas() -> None:
    moving = reassigned((4, 5), state((1, 2), 1, (1, 2)), {1, 2, 4, 5})
    assert moving is not None and moving.reassigning
    cancelled = reassigned(None, dataclasses.replace(moving, isr=(1, 2, 4)), {1, 2, 4, 5})
    assert cancelled is not None
    assert (cancelled.replicas, cancelled.isr, cancelled.reassigning) == ((1, 2), (1, 2), False)


def test_a_new_target_replaces_the_reassignment_in_progress() -> None:
    moving = reassigned((4,), state((1,), 1, (1,)), {1, 4, 5})
    assert moving is not None
    again = reassigned((5,), moving, {1, 4, 5})
    assert again is not None
    assert (again.replicas, again.adding_replicas, again.removing_replicas) == ((5, 1), (5,), (1,))


def test_cancelling_with_nothing_in_progress() -> None:
    with pytest.raises(errors.KafkaError) as raised:
        reassigned(None, state((0,), 0, (0,)), {0})
    assert raised.value.code is ErrorCode.no_reassignment_in_progress
