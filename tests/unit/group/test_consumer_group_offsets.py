"""Offset commits to a consumer group (KIP-848) checked as Kafka checks them
(ConsumerGroup.validateOffsetCommit): OffsetCommit below v9 from a member is
UNSUPPORTED_VERSION, and TxnOffsetCommit checks the member and its epoch (a stale one is
ILLEGAL_GENERATION, the error transactional producers know)."""

from __future__ import annotations

import dataclasses
from typing import Any

from consumer_helpers import join, topic
from group_helpers import Harness

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.group.api import OffsetCommitRequest, OffsetCommitResponse, OffsetToCommit

TOPICS = {"a": topic("a", 1)}
TP = TopicPartition("a", 0)
PRODUCER_ID = 41


def joined(harness: Harness, member_id: str = "m1") -> int:
    """The member joins the consumer group "g"; its epoch."""
    token = harness.token()
    request = join(member_id)
    harness.apply(
        harness.coordinator.consumer_group_heartbeat(harness.now_ms, token, request, TOPICS)
    )
    answer = harness.reply(token)
    assert answer.error is ErrorCode.none, answer
    epoch: int = answer.member_epoch
    return epoch


def request(member_id: str, epoch: int, api_version: int = 9) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        "g", epoch, member_id, None, ((TP, OffsetToCommit(5)),), api_version=api_version
    )


def error_of(harness: Harness, effects: Any, token: int) -> ErrorCode:
    harness.apply(effects)
    answer = harness.reply(token)
    assert isinstance(answer, OffsetCommitResponse), answer
    ((partition, error),) = answer.errors
    assert partition == TP
    return error


def commit(harness: Harness, member_id: str, epoch: int, api_version: int = 9) -> ErrorCode:
    token = harness.token()
    effects = harness.coordinator.commit_offsets(
        harness.now_ms, token, request(member_id, epoch, api_version)
    )
    return error_of(harness, effects, token)


def commit_in_transaction(harness: Harness, member_id: str, epoch: int) -> ErrorCode:
    token = harness.token()
    effects = harness.coordinator.commit_transactional_offsets(
        harness.now_ms, token, request(member_id, epoch), PRODUCER_ID, 0
    )
    return error_of(harness, effects, token)


def test_a_member_must_commit_with_offset_commit_v9_or_above() -> None:
    harness = Harness()
    epoch = joined(harness)
    assert commit(harness, "m1", epoch, api_version=8) is ErrorCode.unsupported_version
    assert commit(harness, "m1", epoch, api_version=2) is ErrorCode.unsupported_version
    assert commit(harness, "m1", epoch, api_version=9) is ErrorCode.none
    assert harness.committed() == {TP: 5}


def test_an_unknown_member_is_told_so_before_its_version() -> None:
    harness = Harness()
    joined(harness)
    assert commit(harness, "nobody", 1, api_version=8) is ErrorCode.unknown_member_id


def test_an_old_commit_without_a_member_is_accepted_while_the_group_is_empty() -> None:
    harness = Harness()
    joined(harness)
    assert commit(harness, "", -1, api_version=2) is ErrorCode.unknown_member_id
    token = harness.token()
    leave = dataclasses.replace(join("m1"), member_epoch=-1)
    harness.apply(
        harness.coordinator.consumer_group_heartbeat(harness.now_ms, token, leave, TOPICS)
    )
    assert harness.reply(token).error is ErrorCode.none
    assert commit(harness, "", -1, api_version=2) is ErrorCode.none


def test_a_transactional_commit_checks_the_members_epoch() -> None:
    harness = Harness()
    epoch = joined(harness)
    assert commit_in_transaction(harness, "m1", epoch + 1) is ErrorCode.illegal_generation
    assert commit_in_transaction(harness, "nobody", epoch) is ErrorCode.unknown_member_id
    assert commit_in_transaction(harness, "", -1) is ErrorCode.unknown_member_id, (
        "a producer without the member's identity (TxnOffsetCommit v0-2) while it has members"
    )
    assert commit_in_transaction(harness, "m1", epoch) is ErrorCode.none, (
        "any TxnOffsetCommit version carries the epoch the member sends"
    )
