"""The controller's answers to AlterPartition (``ControllerCore.on_alter_partition``):
every check of a leader's ISR proposal against the controller's image, each with the
error code Kafka's controller answers, and the write of the valid ones, conditional on
the partition version and the controller epoch, answered once its result comes in."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from types import MappingProxyType

import pytest

from sluice.cluster.alter_partition import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    IsrMember,
    IsrProposal,
    PartitionOutcome,
)
from sluice.cluster.controller_core import (
    AnswerAlterPartition,
    AnswerDecisions,
    ControllerCore,
    DecisionOutcome,
    ElectController,
    Fenced,
    Lost,
    PartitionDecision,
    StoreFailed,
    WritePartitions,
    Written,
)
from sluice.cluster.image import ControllerInfo, MetadataImage
from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata
from sluice.cluster.store import PartitionChange
from sluice.common import errors
from sluice.common.errors import ErrorCode

ME = 1
EPOCH = 4
TOPIC_ID = uuid.UUID(int=7)
BROKER_EPOCHS = {1: 10, 2: 20, 3: 30}
LEADER_EPOCH = 3
VERSION = 7
STATE = PartitionState((2, 3, 1), 2, LEADER_EPOCH, (2, 3), VERSION)
"""Partition 0: led by broker 2, broker 1 out of the ISR."""


def _image(live: dict[int, int] | None = None) -> MetadataImage:
    live = BROKER_EPOCHS if live is None else live
    brokers = {n: BrokerInfo(n, "127.0.0.1", 9092 + n, epoch=e) for n, e in live.items()}
    topic = TopicMetadata("t", TOPIC_ID, {0: STATE})
    return MetadataImage(
        "c", MappingProxyType(brokers), ControllerInfo(ME, EPOCH), MappingProxyType({"t": topic})
    )


def _controller() -> ControllerCore:
    core = ControllerCore(ME)
    image = dataclasses.replace(_image(), controller=None)
    assert core.on_image(image, 0) == [ElectController(ME)]
    assert core.on_elected(EPOCH, _image(), 0) == []
    return core


def _proposal(
    isr: Sequence[int] = (2, 3, 1),
    *,
    leader_epoch: int = LEADER_EPOCH,
    partition_epoch: int = VERSION,
    topic_id: uuid.UUID = TOPIC_ID,
    partition: int = 0,
    epochs: dict[int, int] | None = None,
    leader_recovery_state: int = 0,
) -> IsrProposal:
    epochs = BROKER_EPOCHS if epochs is None else epochs
    return IsrProposal(
        topic_id,
        partition,
        leader_epoch,
        tuple(IsrMember(r, epochs.get(r, -1)) for r in isr),
        partition_epoch,
        leader_recovery_state,
    )


def _request(*proposals: IsrProposal, broker_id: int = 2) -> AlterPartitionRequest:
    return AlterPartitionRequest(broker_id, BROKER_EPOCHS.get(broker_id, -1), proposals)


def _answer(commands: Sequence[object]) -> AlterPartitionResponse:
    (command,) = commands
    assert isinstance(command, AnswerAlterPartition)
    assert command.request_id == 5
    return command.response


def _codes(response: AlterPartitionResponse) -> list[ErrorCode]:
    return [o.error_code for o in response.outcomes]


def test_a_broker_that_is_not_the_controller_answers_not_controller() -> None:
    core = ControllerCore(ME)
    response = _answer(core.on_alter_partition(5, _request(_proposal()), _image(), 0))
    assert response.error_code == ErrorCode.not_controller
    assert _codes(response) == [ErrorCode.not_controller]


def test_a_controller_the_image_no_longer_names_answers_not_controller() -> None:
    core = _controller()
    newer = dataclasses.replace(_image(), controller=ControllerInfo(2, EPOCH + 1))
    response = _answer(core.on_alter_partition(5, _request(_proposal()), newer, 0))
    assert response.error_code == ErrorCode.not_controller
    assert core.epoch is None


def test_a_requester_with_another_broker_epoch_is_stale() -> None:
    request = dataclasses.replace(_request(_proposal()), broker_epoch=19)
    response = _answer(_controller().on_alter_partition(5, request, _image(), 0))
    assert response.error_code == ErrorCode.stale_broker_epoch


@pytest.mark.parametrize(
    ("proposal", "broker_id", "expected"),
    [
        (_proposal(topic_id=uuid.UUID(int=8)), 2, ErrorCode.unknown_topic_id),
        (_proposal(partition=1), 2, ErrorCode.unknown_topic_or_partition),
        (_proposal(leader_epoch=LEADER_EPOCH + 1), 2, ErrorCode.not_controller),
        (_proposal(partition_epoch=VERSION + 1), 2, ErrorCode.not_controller),
        (_proposal(leader_epoch=LEADER_EPOCH - 1), 2, ErrorCode.fenced_leader_epoch),
        (_proposal((3, 2)), 3, ErrorCode.invalid_request),  # not the leader
        (_proposal(partition_epoch=VERSION - 1), 2, ErrorCode.invalid_update_version),
        (_proposal((2, 3, 4)), 2, ErrorCode.invalid_request),  # 4 is no replica
        (_proposal((3, 1)), 2, ErrorCode.invalid_request),  # without the leader
        (_proposal((2, 3, 3)), 2, ErrorCode.invalid_request),  # a duplicate
        (_proposal(leader_recovery_state=1), 2, ErrorCode.invalid_request),
        (_proposal(epochs={**BROKER_EPOCHS, 1: 9}), 2, ErrorCode.ineligible_replica),
    ],
    ids=[
        "unknown-topic-id",
        "unknown-partition",
        "leader-epoch-ahead",
        "partition-epoch-ahead",
        "leader-epoch-behind",
        "not-the-leader",
        "partition-epoch-behind",
        "not-a-replica",
        "without-the-leader",
        "duplicate",
        "recovering",
        "member-of-another-registration",
    ],
)
def test_each_check_answers_its_error_and_writes_nothing(
    proposal: IsrProposal, broker_id: int, expected: ErrorCode
) -> None:
    core = _controller()
    response = _answer(
        core.on_alter_partition(5, _request(proposal, broker_id=broker_id), _image(), 0)
    )
    assert response.error_code == ErrorCode.none
    assert response.outcomes == (PartitionOutcome(proposal.topic_id, proposal.partition, expected),)


def test_a_member_that_is_not_registered_is_ineligible() -> None:
    live = {2: 20, 3: 30}
    response = _answer(_controller().on_alter_partition(5, _request(_proposal()), _image(live), 0))
    assert _codes(response) == [ErrorCode.ineligible_replica]


def test_a_valid_proposal_is_written_on_its_version_and_the_controller_epoch() -> None:
    core = _controller()
    (command,) = core.on_alter_partition(5, _request(_proposal()), _image(), 0)
    wanted = dataclasses.replace(STATE, isr=(2, 3, 1))
    assert isinstance(command, WritePartitions)
    assert command.epoch == EPOCH
    assert command.purpose == "alter_partition"
    assert command.changes == (PartitionChange("t", 0, wanted),)
    stored = dataclasses.replace(wanted, version=VERSION + 1)
    response = _answer(core.on_write_result(Written(command.write_id, (stored,)), 1))
    assert response == AlterPartitionResponse(
        ErrorCode.none, (PartitionOutcome(TOPIC_ID, 0, ErrorCode.none, stored),)
    )


def test_a_member_whose_epoch_the_leader_does_not_know_is_not_checked() -> None:
    core = _controller()
    (command,) = core.on_alter_partition(5, _request(_proposal(epochs={})), _image(), 0)
    assert isinstance(command, WritePartitions)


def test_valid_and_invalid_proposals_of_one_request_are_answered_together() -> None:
    core = _controller()
    request = _request(_proposal((2,)), _proposal(partition=3))
    (command,) = core.on_alter_partition(5, request, _image(), 0)
    assert isinstance(command, WritePartitions)
    stored = dataclasses.replace(STATE, isr=(2,), version=VERSION + 1)
    response = _answer(core.on_write_result(Written(command.write_id, (stored,)), 1))
    assert sorted((o.partition, o.error_code) for o in response.outcomes) == [
        (0, ErrorCode.none),
        (3, ErrorCode.unknown_topic_or_partition),
    ]


def test_the_same_partition_twice_is_written_once() -> None:
    core = _controller()
    request = _request(_proposal((2,)), _proposal((2, 3)))
    (command,) = core.on_alter_partition(5, request, _image(), 0)
    assert isinstance(command, WritePartitions)
    assert len(command.changes) == 1
    stored = dataclasses.replace(STATE, isr=(2,), version=VERSION + 1)
    response = _answer(core.on_write_result(Written(command.write_id, (stored,)), 1))
    assert _codes(response) == [ErrorCode.invalid_request, ErrorCode.none]


@pytest.mark.parametrize(
    "result",
    [Lost(0, "a newer state"), StoreFailed(0, "unreachable"), Fenced(0, "epoch 5")],
    ids=["lost", "store-failed", "fenced"],
)
def test_a_write_that_fails_answers_not_controller_so_the_leader_asks_again(
    result: Lost | StoreFailed | Fenced,
) -> None:
    core = _controller()
    (command,) = core.on_alter_partition(5, _request(_proposal()), _image(), 0)
    assert isinstance(command, WritePartitions)
    response = _answer(
        core.on_write_result(dataclasses.replace(result, write_id=command.write_id), 1)
    )
    assert _codes(response) == [ErrorCode.not_controller]
    assert core.epoch == (None if isinstance(result, Fenced) else EPOCH)


# ── administrators' changes (ElectLeaders, reassignments) ─────────────────────────────


def _to_leader(leader: int) -> PartitionDecision:
    def decide(state: PartitionState, image: MetadataImage) -> PartitionState | None:
        if state.leader == leader:
            raise errors.for_code(ErrorCode.election_not_needed)("leads already")
        return dataclasses.replace(state, leader=leader, leader_epoch=state.leader_epoch + 1)

    return PartitionDecision("t", 0, decide)


def _decided(commands: Sequence[object]) -> tuple[DecisionOutcome, ...]:
    (command,) = commands
    assert isinstance(command, AnswerDecisions)
    assert command.request_id == 5
    return command.outcomes


def test_a_broker_that_is_not_the_controller_decides_nothing() -> None:
    outcomes = _decided(ControllerCore(ME).on_partition_decisions(5, (_to_leader(3),), _image(), 0))
    assert [o.error_code for o in outcomes] == [ErrorCode.not_controller]


def test_a_refused_or_unknown_change_is_answered_without_a_write() -> None:
    unknown = PartitionDecision("t", 9, _to_leader(3).decide)
    outcomes = _decided(
        _controller().on_partition_decisions(5, (_to_leader(2), unknown), _image(), 0)
    )
    assert [o.error_code for o in outcomes] == [
        ErrorCode.election_not_needed,
        ErrorCode.unknown_topic_or_partition,
    ]


def test_a_change_is_written_with_the_controller_epoch_and_answered_with_the_stored_state() -> None:
    core = _controller()
    (command,) = core.on_partition_decisions(5, (_to_leader(3), _to_leader(3)), _image(), 0)
    assert isinstance(command, WritePartitions)
    assert command.epoch == EPOCH
    (change,) = command.changes  # the same partition twice: decided once per write
    stored = dataclasses.replace(change.state, version=VERSION + 1)
    first, second = _decided(core.on_write_result(Written(command.write_id, (stored,)), 1))
    assert (first.error_code, first.state, first.retry) == (ErrorCode.none, stored, False)
    assert second.retry


def test_a_change_that_lost_to_a_newer_state_is_to_be_decided_again() -> None:
    core = _controller()
    (command,) = core.on_partition_decisions(5, (_to_leader(3),), _image(), 0)
    assert isinstance(command, WritePartitions)
    (outcome,) = _decided(core.on_write_result(Lost(command.write_id, "newer"), 1))
    assert outcome.retry
    assert outcome.state is None


def test_an_isr_change_carries_the_eligible_leader_replicas_of_the_new_isr() -> None:
    """KIP-966: with min.insync.replicas 2, a replica dropped from an ISR that falls below
    it is written into the ELR; the ELR is cleared once the ISR is back to the minimum."""
    core = _controller()
    topic = TopicMetadata("t", TOPIC_ID, {0: STATE}, {"min.insync.replicas": "2"})
    image = dataclasses.replace(_image(), topics=MappingProxyType({"t": topic}))
    (shrink,) = core.on_alter_partition(5, _request(_proposal((2,))), image, 0)
    assert isinstance(shrink, WritePartitions)
    (change,) = shrink.changes
    assert (change.state.isr, change.state.elr, change.state.last_known_elr) == ((2,), (3,), ())
    stored = dataclasses.replace(change.state, version=VERSION + 1)
    _answer(core.on_write_result(Written(shrink.write_id, (stored,)), 1))
    shrunk = TopicMetadata("t", TOPIC_ID, {0: stored}, {"min.insync.replicas": "2"})
    image = dataclasses.replace(image, topics=MappingProxyType({"t": shrunk}))
    grow = _request(_proposal((2, 1), partition_epoch=VERSION + 1))
    (grown,) = core.on_alter_partition(6, grow, image, 2)
    assert isinstance(grown, WritePartitions)
    (change,) = grown.changes
    assert (change.state.isr, change.state.elr, change.state.last_known_elr) == ((2, 1), (), ())
