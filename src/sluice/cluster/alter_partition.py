"""AlterPartition (Kafka's API 56, KIP-497) as the controller sees it: a partition
leader asks the controller to change its partition's ISR, and the controller checks the
request against its image before writing anything. Plain data and pure checks, no I/O:
:class:`~sluice.cluster.controller_core.ControllerCore` takes the requests, the broker's
handler and its ISR sender translate them from and to the wire.

The checks, in Kafka's order (``ReplicationControlManager.alterPartition``), each
answered per partition::

    requesting broker's epoch is not its registration      STALE_BROKER_EPOCH (whole request)
    topic id unknown                                       UNKNOWN_TOPIC_ID
    partition unknown                                      UNKNOWN_TOPIC_OR_PARTITION
    leader epoch or partition epoch ahead of the image     NOT_CONTROLLER (the image lags:
                                                             the leader asks again later)
    leader epoch behind                                    FENCED_LEADER_EPOCH
    requester is not the leader                            INVALID_REQUEST
    partition epoch behind                                 INVALID_UPDATE_VERSION
    ISR with a duplicate, a non-replica, or without
      the leader; leader recovery state RECOVERING         INVALID_REQUEST
    a member not registered, or registered with another
      epoch than the one named (-1: not checked)           INELIGIBLE_REPLICA

The partition epoch is the partition state's version in the store. Sluice has no
unclean-recovery state (KIP-704): every partition is RECOVERED, so a request naming
RECOVERING is invalid, as Kafka refuses going from RECOVERED to RECOVERING.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.cluster.image import MetadataImage
from sluice.cluster.model import PartitionState, TopicId
from sluice.common.errors import ErrorCode

LEADER_RECOVERED = 0
"""Kafka's LeaderRecoveryState RECOVERED (1 is RECOVERING, after an unclean election)."""

UNCHECKED_BROKER_EPOCH = -1
"""A member's broker epoch when the leader does not know it: not compared."""


@dataclass(frozen=True, slots=True)
class IsrMember:
    """One replica of a proposed ISR and the broker epoch the leader saw it with (KIP-903)."""

    broker_id: int
    broker_epoch: int = UNCHECKED_BROKER_EPOCH


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """One partition's proposed ISR, made from the state at ``partition_epoch`` (its
    version) and ``leader_epoch``."""

    topic_id: TopicId
    partition: int
    leader_epoch: int
    new_isr: tuple[IsrMember, ...]
    partition_epoch: int
    leader_recovery_state: int = LEADER_RECOVERED

    @property
    def isr(self) -> tuple[int, ...]:
        return tuple(m.broker_id for m in self.new_isr)


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """A leader's request: its node id and broker epoch, and its proposals."""

    broker_id: int
    broker_epoch: int
    proposals: tuple[IsrProposal, ...]


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """The answer for one proposal: ``state`` (the partition state now stored) when
    ``error_code`` is NONE, else None."""

    topic_id: TopicId
    partition: int
    error_code: ErrorCode
    state: PartitionState | None = None


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    """The whole answer: a top-level error (NOT_CONTROLLER, STALE_BROKER_EPOCH) or one
    outcome per proposal."""

    error_code: ErrorCode
    outcomes: tuple[PartitionOutcome, ...] = ()


def refused(request: AlterPartitionRequest, error_code: ErrorCode) -> AlterPartitionResponse:
    """The answer refusing the whole request with ``error_code`` (each proposal too, as
    a leader reading only the partitions' errors must see it)."""
    return AlterPartitionResponse(
        error_code,
        tuple(PartitionOutcome(p.topic_id, p.partition, error_code) for p in request.proposals),
    )


def check_requester(request: AlterPartitionRequest, image: MetadataImage) -> ErrorCode:
    """STALE_BROKER_EPOCH unless the requester is registered with the epoch it names."""
    broker = image.brokers.get(request.broker_id)
    if broker is None or broker.epoch != request.broker_epoch:
        return ErrorCode.stale_broker_epoch
    return ErrorCode.none


def check(
    broker_id: int, proposal: IsrProposal, image: MetadataImage
) -> tuple[ErrorCode, PartitionState | None]:
    """The error for one proposal, or NONE and the partition's state in ``image``."""
    topic = image.topic_by_id(proposal.topic_id)
    if topic is None:
        return ErrorCode.unknown_topic_id, None
    state = topic.partitions.get(proposal.partition)
    if state is None:
        return ErrorCode.unknown_topic_or_partition, None
    if proposal.leader_epoch > state.leader_epoch or proposal.partition_epoch > state.version:
        return ErrorCode.not_controller, None
    if proposal.leader_epoch < state.leader_epoch:
        return ErrorCode.fenced_leader_epoch, None
    if broker_id != state.leader:
        return ErrorCode.invalid_request, None
    if proposal.partition_epoch < state.version:
        return ErrorCode.invalid_update_version, None
    isr = proposal.isr
    if (
        len(set(isr)) != len(isr)
        or not set(isr) <= set(state.replicas)
        or state.leader not in isr
        or proposal.leader_recovery_state != LEADER_RECOVERED
    ):
        return ErrorCode.invalid_request, None
    for member in proposal.new_isr:
        broker = image.brokers.get(member.broker_id)
        if broker is None or member.broker_epoch not in (UNCHECKED_BROKER_EPOCH, broker.epoch):
            return ErrorCode.ineligible_replica, None
    return ErrorCode.none, state
