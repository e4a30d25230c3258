"""A member's way to its target (Kafka's CurrentAssignmentBuilder), rule by rule:
revoke first keeping the epoch, then move to the target epoch taking only partitions
nobody else owns, the rest once released; UNKNOWN states fence."""

from __future__ import annotations

import uuid

import pytest

from sluice.group.consumer_group import MemberState
from sluice.group.consumer_reconciliation import CurrentAssignment, MemberFenced, reconcile

A = uuid.UUID(int=1)
B = uuid.UUID(int=2)


def current(
    epoch: int,
    state: MemberState = MemberState.STABLE,
    assigned: dict[uuid.UUID, frozenset[int]] | None = None,
    pending: dict[uuid.UUID, frozenset[int]] | None = None,
    previous: int = 0,
) -> CurrentAssignment:
    return CurrentAssignment(epoch, previous, state, assigned or {}, pending or {})


def nobody_else(topic_id: uuid.UUID, partition: int) -> bool:
    return False


def test_a_stable_member_at_the_target_epoch_is_left_alone() -> None:
    state = current(3, assigned={A: frozenset({0})})
    assert reconcile(state, 3, {A: frozenset({1})}, None, nobody_else) is state


def test_a_member_behind_with_only_new_partitions_moves_to_the_target_epoch() -> None:
    result = reconcile(
        current(2, assigned={A: frozenset({0})}), 3, {A: frozenset({0, 1})}, None, nobody_else
    )
    assert result == current(3, assigned={A: frozenset({0, 1})}, previous=2)


def test_a_member_with_partitions_to_give_up_revokes_first_keeping_its_epoch() -> None:
    state = current(2, assigned={A: frozenset({0, 1}), B: frozenset({0})}, previous=1)
    result = reconcile(state, 3, {A: frozenset({1, 2})}, None, nobody_else)
    assert result == current(
        2,
        MemberState.UNREVOKED_PARTITIONS,
        assigned={A: frozenset({1})},
        pending={A: frozenset({0}), B: frozenset({0})},
        previous=1,
    )
    # Still owned according to its heartbeat (or it said nothing): it waits.
    for owned in (None, {A: frozenset({0, 1})}):
        assert reconcile(result, 3, {A: frozenset({1, 2})}, owned, nobody_else) is result
    # Revoked: epoch 3, and partition 2 (free) comes along.
    done = reconcile(result, 3, {A: frozenset({1, 2})}, {A: frozenset({1})}, nobody_else)
    assert done == current(3, assigned={A: frozenset({1, 2})}, previous=2)


def test_partitions_another_member_owns_wait_until_released() -> None:
    owner = {(A, 1): "other"}

    def owned_by_another(topic_id: uuid.UUID, partition: int) -> bool:
        return (topic_id, partition) in owner

    state = current(2, assigned={A: frozenset({0})})
    result = reconcile(state, 3, {A: frozenset({0, 1, 2})}, None, owned_by_another)
    assert result == current(
        3, MemberState.UNRELEASED_PARTITIONS, assigned={A: frozenset({0, 2})}, previous=2
    )
    assert reconcile(result, 3, {A: frozenset({0, 1, 2})}, None, owned_by_another) == result
    owner.clear()
    released = reconcile(result, 3, {A: frozenset({0, 1, 2})}, None, owned_by_another)
    assert released == current(3, assigned={A: frozenset({0, 1, 2})}, previous=2)


def test_an_unknown_state_fences_the_member() -> None:
    with pytest.raises(MemberFenced):
        reconcile(current(3, MemberState.UNKNOWN), 3, {}, None, nobody_else)
