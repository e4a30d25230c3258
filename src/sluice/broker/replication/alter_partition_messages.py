"""AlterPartition (API 56) on the wire, to and from the controller's own terms
(:mod:`sluice.cluster.alter_partition`): the leader's side builds the request and reads
the answer, the controller's handler reads the request and builds the answer.

v2 names each ISR member by id only (its broker epoch is then not checked); v3 adds
each member's broker epoch (KIP-903). An answer carries the partition's leader, leader
epoch, ISR and partition epoch (the state's version): the leader makes the new state
from the one it proposed the change from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sluice.cluster.alter_partition import (
    UNCHECKED_BROKER_EPOCH,
    AlterPartitionRequest,
    AlterPartitionResponse,
    IsrMember,
    IsrProposal,
    PartitionOutcome,
)
from sluice.cluster.model import PartitionState, TopicId
from sluice.common.errors import ErrorCode
from sluice.protocol.messages import has_field, make

FIRST_VERSION_WITH_MEMBER_EPOCHS = 3


def request_message(module: Any, request: AlterPartitionRequest, version: int) -> Any:
    """``request`` as the wire message of ``module`` (version ``version``)."""
    by_topic: dict[TopicId, list[Any]] = {}
    for proposal in request.proposals:
        if version >= FIRST_VERSION_WITH_MEMBER_EPOCHS:
            isr_fields: dict[str, Any] = {
                "new_isr_with_epochs": tuple(
                    make(module.BrokerState, broker_id=m.broker_id, broker_epoch=m.broker_epoch)
                    for m in proposal.new_isr
                )
            }
        else:
            isr_fields = {"new_isr": proposal.isr}
        by_topic.setdefault(proposal.topic_id, []).append(
            make(
                module.PartitionData,
                partition_index=proposal.partition,
                leader_epoch=proposal.leader_epoch,
                leader_recovery_state=proposal.leader_recovery_state,
                partition_epoch=proposal.partition_epoch,
                **isr_fields,
            )
        )
    return make(
        module.AlterPartitionRequest,
        broker_id=request.broker_id,
        broker_epoch=request.broker_epoch,
        topics=tuple(
            make(module.TopicData, topic_id=topic_id, partitions=tuple(partitions))
            for topic_id, partitions in by_topic.items()
        ),
    )


def parse_request(message: Any) -> AlterPartitionRequest:
    """The wire request (v2 or v3) in the controller's terms."""
    proposals = []
    for topic in message.topics:
        for partition in topic.partitions:
            if has_field(type(partition), "new_isr_with_epochs"):
                members = tuple(
                    IsrMember(int(m.broker_id), int(m.broker_epoch))
                    for m in partition.new_isr_with_epochs
                )
            else:
                members = tuple(
                    IsrMember(int(r), UNCHECKED_BROKER_EPOCH) for r in partition.new_isr
                )
            proposals.append(
                IsrProposal(
                    topic.topic_id,
                    int(partition.partition_index),
                    int(partition.leader_epoch),
                    members,
                    int(partition.partition_epoch),
                    int(partition.leader_recovery_state),
                )
            )
    return AlterPartitionRequest(
        int(message.broker_id), int(message.broker_epoch), tuple(proposals)
    )


def response_message(module: Any, response: AlterPartitionResponse) -> Any:
    """The controller's answer as the wire message of ``module``."""
    by_topic: dict[TopicId, list[Any]] = {}
    for outcome in response.outcomes:
        state = outcome.state
        by_topic.setdefault(outcome.topic_id, []).append(
            make(
                module.PartitionData,
                partition_index=outcome.partition,
                error_code=outcome.error_code,
                leader_id=-1 if state is None else state.leader,
                leader_epoch=-1 if state is None else state.leader_epoch,
                isr=() if state is None else state.isr,
                leader_recovery_state=0,
                partition_epoch=-1 if state is None else state.version,
            )
        )
    return make(
        module.AlterPartitionResponse,
        throttle_time=0,
        error_code=response.error_code,
        topics=tuple(
            make(module.TopicData, topic_id=topic_id, partitions=tuple(partitions))
            for topic_id, partitions in by_topic.items()
        ),
    )


def parse_response(
    message: Any, proposed_from: Mapping[tuple[TopicId, int], PartitionState]
) -> AlterPartitionResponse:
    """The wire answer in the controller's terms; a stored state is made from the
    state the change was proposed from (``proposed_from``), with the answer's leader,
    leader epoch, ISR and version. A partition not asked about is left out."""
    outcomes = []
    for topic in message.topics:
        for partition in topic.partitions:
            key = (topic.topic_id, int(partition.partition_index))
            base = proposed_from.get(key)
            if base is None:
                continue
            code = ErrorCode(partition.error_code)
            state = None
            if code == ErrorCode.none:
                state = dataclasses.replace(
                    base,
                    leader=int(partition.leader_id),
                    leader_epoch=int(partition.leader_epoch),
                    isr=tuple(int(r) for r in partition.isr),
                    version=int(partition.partition_epoch),
                )
            outcomes.append(PartitionOutcome(key[0], key[1], code, state))
    return AlterPartitionResponse(ErrorCode(message.error_code), tuple(outcomes))
