"""Controller decisions for leader elections (brokers leaving and joining, ElectLeaders)
and partition reassignments, as Kafka's controller makes them
(``ReplicationControlManager``).

Pure functions over the metadata model; the broker writes what they decide through the
metadata store. A partition's preferred leader is its first replica; a leader counts only
while its broker is live::

    election    leader is the preferred one (PREFERRED) or any leader is live (UNCLEAN)
                  → ELECTION_NOT_NEEDED
                PREFERRED: preferred replica live and in the ISR → it leads (epoch + 1)
                           otherwise → PREFERRED_LEADER_NOT_AVAILABLE
                UNCLEAN:   first live replica in the ISR, else first live eligible
                           leader replica (KIP-966: it is the ISR now), else first live
                           replica (ELR cleared) → it leads (epoch + 1); none live
                           → ELIGIBLE_LEADERS_NOT_AVAILABLE

    reassignment target T of a partition whose replicas are R (KIP-455):
                T non-empty, every broker registered, no broker twice
                  (INVALID_REPLICA_ASSIGNMENT); with allow_replication_factor_change
                  false, as many replicas as now (INVALID_REPLICATION_FACTOR)
                T == R, nothing in progress → nothing to do
                same brokers, another order → the new order, at once (no data moves)
                otherwise → in progress: replicas = T + (R − T), adding = T − R,
                  removing = R − T; ISR and leader unchanged. The added replicas
                  follow the leader like any follower and join the ISR once caught up.
                  A new target while one is in progress starts again from R.
                cancel (target None) → back to R: the added replicas leave (and lead
                  no more); nothing in progress → NO_REASSIGNMENT_IN_PROGRESS

    completion  (the controller, on any image) every adding replica in the ISR →
                  replicas = T, ISR − removing, adding and removing cleared; a removed
                  leader hands over to the first live in-sync replica of T (epoch + 1)
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from sluice.cluster import eligible
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import NO_LEADER, BrokerInfo, PartitionState, TopicMetadata
from sluice.cluster.store import PartitionChange
from sluice.common import errors
from sluice.common.errors import ErrorCode

log = logging.getLogger(__name__)


class ElectionType(IntEnum):
    """ElectLeaders v1+ ``election_type`` (KIP-460); v0 always means PREFERRED."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    """What an election decided: a new state to store, or why there is none."""

    state: PartitionState | None
    error_code: ErrorCode = ErrorCode.none

    @property
    def error_message(self) -> str | None:
        """Kafka's message for the code (its ``ApiError`` carries one for every error)."""
        return ERROR_MESSAGES.get(self.error_code)


ERROR_MESSAGES = {
    ErrorCode.election_not_needed: "Leader election not needed for topic partition.",
    ErrorCode.preferred_leader_not_available: "The preferred leader was not available.",
    ErrorCode.eligible_leaders_not_available: (
        "Eligible topic partition leaders are not available."
    ),
}


def election_type(value: int) -> ElectionType:
    """The election type a request names; INVALID_REQUEST for any other value."""
    try:
        return ElectionType(value)
    except ValueError:
        raise errors.InvalidRequest(f"Unknown election type {value}") from None


def elect(
    state: PartitionState, kind: ElectionType, live_brokers: Collection[int]
) -> ElectionOutcome:
    """Kafka's ``electLeader`` for one existing partition."""
    has_leader = state.leader in live_brokers
    preferred = state.replicas[0] if state.replicas else -1
    if (kind is ElectionType.PREFERRED and has_leader and state.leader == preferred) or (
        kind is ElectionType.UNCLEAN and has_leader
    ):
        return ElectionOutcome(None, ErrorCode.election_not_needed)
    if kind is ElectionType.PREFERRED:
        if preferred in live_brokers and preferred in state.isr:
            return ElectionOutcome(_led_by(state, preferred, state.isr))
        return ElectionOutcome(None, ErrorCode.preferred_leader_not_available)
    live_replicas = [r for r in state.replicas if r in live_brokers]
    in_sync = [r for r in live_replicas if r in state.isr]
    if in_sync:
        return ElectionOutcome(_led_by(state, in_sync[0], state.isr))
    electable = [r for r in live_replicas if r in state.elr]
    if electable:
        # An eligible leader replica has every committed record (KIP-966): a clean election.
        leader = electable[0]
        return ElectionOutcome(_led_by(eligible.elected_from_elr(state, leader), leader))
    if live_replicas:
        # Unclean: the new leader may lack committed records; it is the whole ISR now.
        unclean = eligible.cleared(state)
        return ElectionOutcome(_led_by(unclean, live_replicas[0], (live_replicas[0],)))
    return ElectionOutcome(None, ErrorCode.eligible_leaders_not_available)


def _led_by(state: PartitionState, leader: int, isr: Sequence[int] | None = None) -> PartitionState:
    """``state`` with a new leader (or NO_LEADER) at the next leader epoch, and the ISR
    ``isr`` when given (its ELR fields already decided); the version stays the one
    read, for the conditional write."""
    return dataclasses.replace(
        eligible.with_leader(state, leader),
        leader=leader,
        leader_epoch=state.leader_epoch + 1,
        isr=state.isr if isr is None else tuple(isr),
    )


def reconcile(
    image: MetadataImage,
    restarted: Collection[int] = (),
    unclean_allowed: Callable[[TopicMetadata], bool] = lambda topic: False,
    min_insync: Callable[[TopicMetadata], int] = lambda topic: 1,
) -> list[PartitionChange]:
    """What the controller writes after a change of the live brokers or the topics:
    every partition whose leader is not live gets the first live replica of its ISR
    (preferred order), or goes offline (NO_LEADER) when none is live, Kafka's rule with
    unclean election off; an offline partition whose ISR member came back leads again;
    a partition led by a restarted broker (in ``restarted``, registered anew since the
    controller last looked, or registered since the partition's state was written:
    :meth:`PartitionState.registered_since`) gets the next leader epoch, led by an in-sync
    replica that did not restart when there is one (the restarted ones leave the ISR).
    The ISR drops brokers that are not live,
    except the last one, which stays (the only replica known to have every record); a
    partition whose leader stays keeps its leader epoch when a dead or restarted follower
    leaves its ISR (only the partition state's version moves).

    Eligible leader replicas (KIP-966, :mod:`sluice.cluster.eligible`, with the topic's
    ``min_insync(topic)``): a replica that leaves the ISR while it is below
    min.insync.replicas joins the ELR; a restarted broker whose logs may have lost
    their unsynced tail (its machine may have gone down: not
    :attr:`BrokerInfo.logs_intact`) leaves the ISR and the ELR. With no in-sync replica
    to lead, the order is: an in-sync replica that stayed up, one that restarted with
    its logs intact, a live ELR member (the partition waits offline for a
    dead ELR member or in-sync replica rather than let a replica that lost its tail
    lead), the last leader (the last known ELR) when the ISR and the ELR are empty
    (Kafka's last known leader), and only then, where ``unclean_allowed(topic)`` (its
    unclean.leader.election.enable), the first live replica."""
    live = image.brokers
    changes: list[PartitionChange] = []
    for topic in image.topics.values():
        for index, state in topic.partitions.items():
            new_state = _reconciled(
                topic, index, state, live, restarted, unclean_allowed, min_insync(topic)
            )
            if new_state is not None and new_state != state:
                changes.append(PartitionChange(topic.name, index, new_state))
    return changes


def _reconciled(
    topic: TopicMetadata,
    index: int,
    state: PartitionState,
    live: Mapping[int, BrokerInfo],
    restarted: Collection[int],
    unclean_allowed: Callable[[TopicMetadata], bool],
    min_insync: int,
) -> PartitionState | None:
    """One partition's new state for :func:`reconcile`, or None to leave it."""
    # A controller elected after a broker restarted never saw its previous
    # registration: the state, written before the new one, tells it.
    bounced = {*restarted, *state.registered_since(live)}
    at_risk = {r for r in bounced if r in live and not live[r].logs_intact}
    decided = eligible.without_tail_at_risk(state, at_risk, min_insync)
    if decided.leader in live and decided.leader not in bounced:
        # A dead follower leaves the ISR at once (the leader would drop it only after
        # replica.lag.time.max.ms, holding acks=all back), and so does a restarted
        # one: it may have lost its unflushed tail, and rejoins once caught up (as
        # KIP-903 has it).
        in_sync_live = tuple(r for r in decided.isr if r in live and r not in bounced)
        return eligible.with_isr(decided, in_sync_live, min_insync, at_risk)
    in_sync = [r for r in decided.replicas if r in decided.isr and r in live]
    # A restarted replica may have lost an unflushed tail: one that stayed up leads if
    # there is one, else one whose logs are intact; the restarted ones rejoin the ISR
    # once caught up.
    trusted = [r for r in in_sync if r not in bounced] or [r for r in in_sync if r not in at_risk]
    if trusted:
        isr = [r for r in decided.isr if r in trusted]
        return _led_by(eligible.with_isr(decided, isr, min_insync, at_risk), trusted[0])
    electable = [r for r in decided.replicas if r in decided.elr and r in live]
    if electable:
        log.info(
            "%s-%d: no in-sync replica can lead; eligible leader replica %d leads",
            topic.name,
            index,
            electable[0],
        )
        return _led_by(eligible.elected_from_elr(decided, electable[0]), electable[0])
    if not decided.isr and not decided.elr and len(decided.last_known_elr) == 1:
        (last_leader,) = decided.last_known_elr
        if last_leader in live:
            # Every replica known to have the records restarted with its tail at risk:
            # the last leader leads again, uncleanly (Kafka's last known leader).
            log.warning(
                "%s-%d: no in-sync or eligible replica is left; the last leader %d leads "
                "again: records its machine's crash took are lost",
                topic.name,
                index,
                last_leader,
            )
            return _led_by(eligible.cleared(decided), last_leader, (last_leader,))
    live_replicas = [r for r in decided.replicas if r in live]
    if live_replicas and unclean_allowed(topic):
        # Unclean: the records only the ISR had are lost; the partition serves again.
        log.warning(
            "%s-%d: no in-sync replica is live; replica %d leads uncleanly "
            "(unclean.leader.election.enable=true): records it lacks are lost",
            topic.name,
            index,
            live_replicas[0],
        )
        return _led_by(eligible.cleared(decided), live_replicas[0], (live_replicas[0],))
    if decided.is_online:
        return _led_by(decided, NO_LEADER)
    return decided  # offline, and still nobody to lead (the ELR fields may have moved)


def preferred_leader_changes(
    image: MetadataImage, imbalance_percentage: int
) -> list[PartitionChange]:
    """Kafka's automatic leader rebalance: for each live broker, the share of the
    partitions it is the preferred replica of (their first replica) that it does not lead;
    where that share is above ``imbalance_percentage``, each of those partitions whose
    preferred replica is in its ISR is led by it again (next leader epoch)."""
    live = image.brokers
    preferred_of: dict[int, list[tuple[str, int, PartitionState]]] = {}
    for topic in image.topics.values():
        for index, state in topic.partitions.items():
            if state.replicas:
                preferred_of.setdefault(state.replicas[0], []).append((topic.name, index, state))
    changes: list[PartitionChange] = []
    for broker, partitions in sorted(preferred_of.items()):
        if broker not in live:
            continue
        not_led = [(n, i, s) for n, i, s in partitions if s.leader != broker]
        if len(not_led) * 100 <= imbalance_percentage * len(partitions):
            continue
        for name, index, state in not_led:
            outcome = elect(state, ElectionType.PREFERRED, live)
            if outcome.state is not None:
                changes.append(PartitionChange(name, index, outcome.state))
    return changes


def check_reassignment_target(
    target: Sequence[int],
    current: PartitionState,
    registered_brokers: Collection[int],
    *,
    allow_replication_factor_change: bool = True,
) -> None:
    """Kafka's ``validateManualPartitionAssignment`` (brokers checked in id order, so
    the lowest bad id is the one named) and, for AlterPartitionReassignments v1 with
    ``allow_replication_factor_change`` false, ``validatePartitionReplicationFactorUnchanged``."""
    if not target:
        raise errors.for_code(ErrorCode.invalid_replica_assignment)(
            "The manual partition assignment includes an empty replica list."
        )
    previous: int | None = None
    for broker_id in sorted(target):
        if broker_id not in registered_brokers:
            raise errors.for_code(ErrorCode.invalid_replica_assignment)(
                f"The manual partition assignment includes broker {broker_id}, but no "
                "such broker is registered."
            )
        if broker_id == previous:
            raise errors.for_code(ErrorCode.invalid_replica_assignment)(
                f"The manual partition assignment includes the broker {broker_id} more than once."
            )
        previous = broker_id
    if not allow_replication_factor_change and len(target) != len(current.replicas):
        raise errors.InvalidReplicationFactor(
            f"The replication factor is changed from {len(current.replicas)} to {len(target)}"
        )


def reassigned(
    target: Sequence[int] | None,
    current: PartitionState,
    registered_brokers: Collection[int],
    *,
    allow_replication_factor_change: bool = True,
) -> PartitionState | None:
    """The partition's new state for one AlterPartitionReassignments entry, or None when
    nothing changes; raises the Kafka error that refuses it."""
    original = current.original_replicas
    if target is None:
        if not current.reassigning:
            raise errors.for_code(ErrorCode.no_reassignment_in_progress)(
                "No partition reassignment is in progress."
            )
        return _with_replicas(current, original, registered_brokers)
    check_reassignment_target(
        target,
        dataclasses.replace(current, replicas=original),
        registered_brokers,
        allow_replication_factor_change=allow_replication_factor_change,
    )
    replicas = tuple(target)
    if replicas == current.replicas and not current.reassigning:
        return None
    # A reassignment in progress is replaced: start again from the original replicas.
    base = _with_replicas(current, original, registered_brokers)
    if set(replicas) == set(original):
        # Another order changes only the preferred leader; no data moves.
        return dataclasses.replace(base, replicas=replicas)
    moving = dataclasses.replace(
        base,
        replicas=replicas + tuple(r for r in original if r not in replicas),
        adding_replicas=tuple(r for r in replicas if r not in original),
        removing_replicas=tuple(r for r in original if r not in replicas),
    )
    return completed(moving, registered_brokers) or moving


def completed(state: PartitionState, live_brokers: Collection[int]) -> PartitionState | None:
    """The state once the reassignment in progress completes, if it can now (every
    adding replica is in the ISR); None otherwise."""
    if not state.reassigning or any(r not in state.isr for r in state.adding_replicas):
        return None
    return _with_replicas(state, state.target_replicas, live_brokers)


def _with_replicas(
    state: PartitionState, replicas: tuple[int, ...], live_brokers: Collection[int]
) -> PartitionState:
    """``state`` with exactly ``replicas`` and no reassignment in progress: the ISR keeps
    its members among them; a leader not among them hands over to the first live
    in-sync one (next epoch), or the partition goes offline."""
    isr = tuple(r for r in state.isr if r in replicas)
    settled = eligible.restricted_to(
        dataclasses.replace(
            state, replicas=replicas, isr=isr, adding_replicas=(), removing_replicas=()
        ),
        replicas,
    )
    if state.leader in replicas or state.leader == NO_LEADER:
        return settled
    in_sync = [r for r in replicas if r in isr and r in live_brokers]
    if in_sync:
        return _led_by(settled, in_sync[0], isr)
    return _led_by(settled, NO_LEADER, isr or state.isr[:1])


def reassignments_completed(image: MetadataImage) -> list[PartitionChange]:
    """Reassignments in progress whose added replicas have all joined the ISR."""
    changes = []
    for topic in image.topics.values():
        for index, state in topic.partitions.items():
            done = completed(state, image.brokers)
            if done is not None:
                changes.append(PartitionChange(topic.name, index, done))
    return changes
