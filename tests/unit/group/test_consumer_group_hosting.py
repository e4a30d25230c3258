"""Consumer groups (KIP-848) hosted by the group coordinator shard: heartbeats answered
once their records are committed, records loaded back from the log, session timers on
the shard's clock, write errors mapped, one group id for one kind of group; a failed
write (of a heartbeat, an expiry, DeleteGroups' tombstones) reverted in memory, with the
group's later changes, so memory is what the log holds."""

from __future__ import annotations

import copy
from typing import Any

from consumer_helpers import as_dict, beat, join, owned, topic
from group_helpers import START_MS, Harness

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.group.api import MemberIdentity, ShareGroupHeartbeatRequest
from sluice.group.consumer_group import ConsumerGroup
from sluice.group.consumer_heartbeat import EXPIRY_RETRY_BACKOFF_MS
from sluice.group.consumer_heartbeat_api import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from sluice.group.coordinator import GroupCoordinator

TOPICS = {"a": topic("a", 4)}
SESSION_MS = 45_000


def heartbeat(harness: Harness, request: ConsumerGroupHeartbeatRequest) -> Any:
    token = harness.token()
    harness.apply(
        harness.coordinator.consumer_group_heartbeat(harness.now_ms, token, request, TOPICS)
    )
    return harness.reply(token)


def reloaded(harness: Harness, now_ms: int) -> GroupCoordinator:
    coordinator = GroupCoordinator(harness.config)
    for key, value in harness.log:
        coordinator.replay(key, value)
    coordinator.load_completed(now_ms)
    return coordinator


def test_a_heartbeat_is_answered_once_its_records_are_committed() -> None:
    harness = Harness()
    harness.auto_commit = False
    token = harness.token()
    harness.apply(
        harness.coordinator.consumer_group_heartbeat(harness.now_ms, token, join("m1"), TOPICS)
    )
    assert harness.reply(token) is None, "nothing answered before the write"
    assert len(harness.held) == 1
    harness.commit_appends()
    answer = harness.reply(token)
    assert isinstance(answer, ConsumerGroupHeartbeatResponse)
    assert answer.error is ErrorCode.none and answer.member_epoch == 1
    assert as_dict(answer.assignment) == {"a": {0, 1, 2, 3}}


def test_the_log_reloads_the_groups_with_their_epochs_and_assignments() -> None:
    harness = Harness()
    heartbeat(harness, join("m1"))
    heartbeat(harness, join("m2"))
    heartbeat(harness, beat("m1", 1, owned(a=[0, 1, 2, 3])))  # revokes half
    before = harness.coordinator.consumer_group("g")
    coordinator = reloaded(harness, harness.now_ms)
    after = coordinator.consumer_group("g")
    assert after == before
    assert after is not None and after.group_epoch == 2


def test_a_reloaded_member_keeps_its_session_and_loses_it_when_silent() -> None:
    harness = Harness()
    answer = heartbeat(harness, join("m1"))
    assert answer.member_epoch == 1
    harness.coordinator = reloaded(harness, START_MS + 1_000)
    harness.now_ms = START_MS + 1_000
    deadline = harness.coordinator.next_deadline_ms()
    assert deadline is not None and deadline <= START_MS + 1_000 + SESSION_MS
    assert heartbeat(harness, beat("m1", 1)).error is ErrorCode.none
    harness.advance(SESSION_MS + 1)
    group = harness.coordinator.consumer_group("g")
    assert group is not None and not group.members, "the silent member was removed"
    again = reloaded(harness, harness.now_ms).consumer_group("g")
    assert again is not None and not again.members, "its removal is in the log"


def test_a_failed_write_answers_kafkas_error_for_it() -> None:
    harness = Harness()
    harness.auto_commit = False
    token = harness.token()
    harness.apply(
        harness.coordinator.consumer_group_heartbeat(harness.now_ms, token, join("m1"), TOPICS)
    )
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    assert harness.reply(token).error is ErrorCode.not_coordinator


def test_a_classic_group_of_another_protocol_keeps_its_id() -> None:
    harness = Harness()
    harness.stable_group(1, protocol_type="connect")
    answer = heartbeat(harness, join("m1"))
    assert answer.error is ErrorCode.group_id_not_found
    assert answer.error_message == "Group g is not a consumer group."


def test_an_empty_classic_group_gives_its_id_and_its_record_is_deleted() -> None:
    harness = Harness()
    [joined] = harness.stable_group(1)
    harness.leave(MemberIdentity(joined.member_id, None))
    assert harness.state() == "Empty"
    answer = heartbeat(harness, join("m1"))
    assert answer.error is ErrorCode.none
    classic = [value for key, value in harness.log if key[:2] == b"\x00\x02"]
    assert classic[-1] is None, "the classic group's record ends with a tombstone"
    assert reloaded(harness, harness.now_ms).consumer_group("g") is not None


def test_join_group_of_another_protocol_type_to_a_consumer_group_is_inconsistent() -> None:
    harness = Harness()
    heartbeat(harness, join("m1"))
    token = harness.join(protocol_type="connect")
    assert harness.reply(token).error is ErrorCode.inconsistent_group_protocol


def test_an_empty_consumer_group_gives_its_id_to_a_classic_group() -> None:
    harness = Harness()
    heartbeat(harness, join("m1"))
    heartbeat(harness, beat("m1", -1))
    [joined] = harness.join_all(1)
    assert joined.error is ErrorCode.none
    assert harness.coordinator.consumer_group("g") is None
    assert reloaded(harness, harness.now_ms).consumer_group("g") is None


def test_a_share_group_id_is_not_a_consumer_group() -> None:
    harness = Harness()
    heartbeat(harness, join("m1"))
    token = harness.token()
    request = ShareGroupHeartbeatRequest(
        group_id="g",
        member_id="s1",
        member_epoch=0,
        rack_id=None,
        subscribed_topic_names=("a",),
        client_id="c",
        client_host="h",
        topics={},
        group_configs={},
    )
    harness.apply(harness.coordinator.share_group_heartbeat(harness.now_ms, token, request))
    assert harness.reply(token).error is ErrorCode.group_id_not_found


def test_a_refused_heartbeat_leaves_an_empty_classic_group_as_it_was() -> None:
    harness = Harness()
    [joined] = harness.stable_group(1)
    harness.leave(MemberIdentity(joined.member_id, None))
    generation = harness.group().generation_id
    refused = heartbeat(harness, join(""))  # v1 needs a member id: INVALID_REQUEST
    assert refused.error is ErrorCode.invalid_request
    assert harness.group().generation_id == generation
    assert harness.coordinator.consumer_group("g") is None


# ------------------------------------------------------- a failed write is reverted


def snapshot(harness: Harness) -> ConsumerGroup | None:
    return copy.deepcopy(harness.coordinator.consumer_group("g"))


def send(harness: Harness, request: ConsumerGroupHeartbeatRequest) -> int:
    """A heartbeat whose write is held (``auto_commit`` off); its token."""
    token = harness.token()
    harness.apply(
        harness.coordinator.consumer_group_heartbeat(harness.now_ms, token, request, TOPICS)
    )
    return token


def test_a_joins_failed_write_leaves_no_group_behind() -> None:
    harness = Harness()
    harness.auto_commit = False
    token = send(harness, join("m1"))
    assert harness.coordinator.consumer_group("g") is not None, "memory holds it meanwhile"
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    assert harness.reply(token).error is ErrorCode.not_coordinator
    assert harness.coordinator.consumer_group("g") is None, "the group is not in the log"
    assert heartbeat_after_commit(harness, join("m1")).member_epoch == 1, "joining again works"


def heartbeat_after_commit(harness: Harness, request: ConsumerGroupHeartbeatRequest) -> Any:
    harness.auto_commit = True
    return heartbeat(harness, request)


def test_a_failed_heartbeat_write_restores_the_group_as_the_log_has_it() -> None:
    harness = Harness()
    heartbeat(harness, join("m1"))
    before = snapshot(harness)
    harness.auto_commit = False
    token = send(harness, join("m2"))  # moves the group epoch and the target assignment
    assert snapshot(harness) != before
    harness.commit_appends(ErrorCode.kafka_storage_error)
    assert harness.reply(token).error is ErrorCode.not_coordinator
    assert snapshot(harness) == before
    assert reloaded(harness, harness.now_ms).consumer_group("g") == before


def test_later_changes_of_the_group_are_reverted_with_a_failed_one() -> None:
    harness = Harness()
    heartbeat(harness, join("m1"))
    before = snapshot(harness)
    harness.auto_commit = False
    first, second = send(harness, join("m2")), send(harness, join("m3"))
    harness.commit_appends(ErrorCode.not_leader_or_follower, count=1)
    assert snapshot(harness) == before, "the second change built on the first: both undone"
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    assert snapshot(harness) == before
    assert harness.reply(first).error is harness.reply(second).error is ErrorCode.not_coordinator


def test_an_expiry_that_was_not_written_keeps_the_member_and_is_tried_again() -> None:
    harness = Harness()
    heartbeat(harness, join("m1"))
    before = snapshot(harness)
    harness.auto_commit = False
    harness.advance(SESSION_MS + 1)
    assert len(harness.held) == 1, "the member's removal is being written"
    harness.commit_appends(ErrorCode.not_enough_replicas)
    assert snapshot(harness) == before, "the member is back"
    deadline = harness.coordinator.next_deadline_ms()
    assert deadline is not None and deadline <= harness.now_ms + EXPIRY_RETRY_BACKOFF_MS
    harness.auto_commit = True
    harness.advance(EXPIRY_RETRY_BACKOFF_MS)
    group = harness.coordinator.consumer_group("g")
    assert group is not None and not group.members, "removed once the write succeeds"
    assert reloaded(harness, harness.now_ms).consumer_group("g") == group


def test_a_failed_delete_groups_write_brings_the_consumer_group_back() -> None:
    harness = Harness()
    heartbeat(harness, join("m1"))
    heartbeat(harness, beat("m1", -1))
    harness.commit({("a", 0): 5}, member_id="", generation=-1)
    before = snapshot(harness)
    harness.auto_commit = False
    token = harness.delete_groups("g")
    assert harness.coordinator.consumer_group("g") is None
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    assert dict(harness.reply(token).errors)["g"] is ErrorCode.not_coordinator
    assert snapshot(harness) == before, "the group is back as the log has it"
    assert harness.committed() == {TopicPartition("a", 0): 5}
    harness.auto_commit = True
    token = harness.delete_groups("g")
    assert dict(harness.reply(token).errors)["g"] is ErrorCode.none
    assert harness.coordinator.consumer_group("g") is None
    assert reloaded(harness, harness.now_ms).consumer_group("g") is None
