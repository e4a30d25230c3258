"""How a consumer group member moves towards its target assignment (Kafka's
``CurrentAssignmentBuilder``), as a pure function.

A member never holds a partition another member still owns. So when its target
changes, a member first revokes what it must give up, keeping its epoch; only when its
heartbeat no longer lists those partitions does it move to the assignment epoch, and
then takes the new partitions nobody owns any more; those still owned elsewhere come
with later heartbeats, once their owners have revoked them::

    STABLE at the assignment epoch ─────────────────────────────▶ unchanged
    STABLE behind it, or UNRELEASED_PARTITIONS ─────────────────▶ next step
    UNREVOKED_PARTITIONS, the heartbeat still owns some of them ─▶ unchanged (waits)
    UNREVOKED_PARTITIONS, they are all revoked ─────────────────▶ next step
    UNKNOWN (a state from a newer version) ─────────────────────▶ fenced

    next step:  keep     = assigned ∩ target
                revoking = assigned − target
                new      = target − assigned, those free now taken, the rest unreleased
                revoking ≠ ∅  → UNREVOKED_PARTITIONS, epoch unchanged, assigned = keep
                unreleased ≠ ∅ → UNRELEASED_PARTITIONS at the target epoch
                otherwise      → STABLE at the target epoch
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sluice.group.consumer_group import Assignment, MemberState


@dataclass(frozen=True)
class CurrentAssignment:
    """A member's epochs, state and partitions, as its current assignment record has them."""

    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: Mapping[uuid.UUID, frozenset[int]]
    pending_revocation: Mapping[uuid.UUID, frozenset[int]]


class MemberFenced(Exception):
    """The member is in a state this version cannot reconcile; it must rejoin."""


def reconcile(
    current: CurrentAssignment,
    target_epoch: int,
    target: Assignment,
    owned_in_heartbeat: Assignment | None,
    owned_by_another: Callable[[uuid.UUID, int], bool],
) -> CurrentAssignment:
    """The member's next current assignment (``current`` itself when nothing changes).

    ``owned_in_heartbeat``: the partitions the member says it owns, or None when its
    heartbeat did not say. ``owned_by_another``: whether another member owns a partition
    (assigned or still revoking)."""
    if current.state is MemberState.UNKNOWN:
        raise MemberFenced("The member is in an unknown state.")
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if owned_in_heartbeat is None or _still_owns_any(
            owned_in_heartbeat, current.pending_revocation
        ):
            return current
        return _next_step(current, target_epoch, target, owned_by_another)
    if current.state is MemberState.STABLE and current.member_epoch == target_epoch:
        return current
    return _next_step(current, target_epoch, target, owned_by_another)


def _still_owns_any(owned: Assignment, revoking: Assignment) -> bool:
    return any(
        owned.get(topic_id, frozenset()) & partitions for topic_id, partitions in revoking.items()
    )


def _next_step(
    current: CurrentAssignment,
    target_epoch: int,
    target: Assignment,
    owned_by_another: Callable[[uuid.UUID, int], bool],
) -> CurrentAssignment:
    keep: dict[uuid.UUID, frozenset[int]] = {}
    taken: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in sorted(set(current.assigned) | set(target)):
        assigned = current.assigned.get(topic_id, frozenset())
        wanted = target.get(topic_id, frozenset())
        if assigned & wanted:
            keep[topic_id] = assigned & wanted
        if assigned - wanted:
            revoking[topic_id] = assigned - wanted
        free = frozenset(p for p in wanted - assigned if not owned_by_another(topic_id, p))
        unreleased |= len(free) < len(wanted - assigned)
        if (assigned & wanted) | free:
            taken[topic_id] = (assigned & wanted) | free
    if revoking:
        return CurrentAssignment(
            current.member_epoch,
            current.previous_member_epoch,
            MemberState.UNREVOKED_PARTITIONS,
            keep,
            revoking,
        )
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    previous = (
        current.member_epoch
        if target_epoch != current.member_epoch
        else current.previous_member_epoch
    )
    return CurrentAssignment(target_epoch, previous, state, taken, {})
