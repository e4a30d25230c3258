"""ConsumerGroupHeartbeat (KIP-848) rules, one by one: joining, the errors Kafka answers,
epochs and fencing, incremental reconciliation (revoke first, then assign), leaving,
static membership, timers, topic changes, regular expressions, and the records each
step writes (a coordinator loaded from them holds the same groups)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from consumer_helpers import (
    CONFIG,
    GROUP,
    REBALANCE_MS,
    Coordinator,
    as_dict,
    beat,
    join,
    owned,
    topic,
)

from sluice.common.errors import ErrorCode
from sluice.group.consumer_group import ConsumerGroupState, MemberState
from sluice.group.consumer_heartbeat import ConsumerGroups
from sluice.group.consumer_heartbeat_api import (
    ArmTimer,
    CancelTimer,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupsConfig,
    TimerKey,
    TimerKind,
)
from sluice.group.consumer_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)

TOPICS = {"a": topic("a", 4)}


def test_a_first_member_joins_gets_every_partition_and_the_records_say_so() -> None:
    coordinator = Coordinator()
    result = coordinator.heartbeat(join("m1"), TOPICS, now_ms=1_000)
    response = result.response
    assert response.error is ErrorCode.none
    assert (response.member_id, response.member_epoch) == ("m1", 1)
    assert response.heartbeat_interval_ms == CONFIG.heartbeat_interval_ms
    assert as_dict(response.assignment) == {"a": {0, 1, 2, 3}}
    assert [type(r.key) for r in result.records] == [
        ConsumerGroupMemberMetadataKey,
        ConsumerGroupCurrentMemberAssignmentKey,
        ConsumerGroupPartitionMetadataKey,
        ConsumerGroupMetadataKey,
        ConsumerGroupTargetAssignmentMemberKey,
        ConsumerGroupTargetAssignmentMetadataKey,
        ConsumerGroupCurrentMemberAssignmentKey,
    ]
    session = TimerKey(TimerKind.SESSION, GROUP, "m1")
    assert ArmTimer(session, 1_000 + CONFIG.session_timeout_ms) in result.timers
    group = coordinator.groups.group(GROUP)
    assert group is not None
    assert (group.group_epoch, group.assignment_epoch) == (1, 1)
    assert group.state is ConsumerGroupState.STABLE
    coordinator.check_replay()


def test_a_version_0_member_without_an_id_is_given_one_by_the_coordinator() -> None:
    coordinator = Coordinator()
    request = dataclasses.replace(join(""), version=0)
    assert coordinator.heartbeat(request, TOPICS).response.member_id == "member-1"
    refused = coordinator.heartbeat(join(""), TOPICS).response
    assert (refused.error, refused.error_message) == (
        ErrorCode.invalid_request,
        "MemberId can't be empty.",
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"group_id": ""}, "GroupId can't be empty."),
        ({"member_epoch": -3}, "MemberEpoch -3 is invalid."),
        ({"rebalance_timeout_ms": -1}, "RebalanceTimeoutMs must be provided in first request."),
        ({"owned_partitions": None}, "TopicPartitions must be empty when (re-)joining."),
        ({"owned_partitions": owned(a=[0])}, "TopicPartitions must be empty when (re-)joining."),
        (
            {"subscribed_topic_names": None},
            "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
        ),
        ({"instance_id": ""}, "InstanceId can't be empty."),
        ({"rack_id": ""}, "RackId can't be empty."),
        ({"member_epoch": -2}, "InstanceId can't be null."),
        ({"member_epoch": 3, "member_id": ""}, "MemberId can't be empty."),
        (
            {"subscribed_topic_names": ("a", "")},
            "SubscribedTopicNames can't contain an empty name.",
        ),
    ],
)
def test_a_malformed_heartbeat_is_refused_with_invalid_request_and_writes_nothing(
    changes: dict[str, object], message: str
) -> None:
    coordinator = Coordinator()
    result = coordinator.heartbeat(dataclasses.replace(join("m1"), **changes), TOPICS)  # type: ignore[arg-type]
    assert (result.response.error, result.response.error_message) == (
        ErrorCode.invalid_request,
        message,
    )
    assert result.records == [] and result.timers == []
    assert coordinator.groups.group(GROUP) is None


def test_an_unknown_server_assignor_is_refused() -> None:
    response = Coordinator().heartbeat(join("m1", assignor="sticky"), TOPICS).response
    assert response.error is ErrorCode.unsupported_assignor
    assert response.error_message == (
        "ServerAssignor sticky is not supported. Supported assignors: uniform, range."
    )


@pytest.mark.parametrize("pattern", ["(a)\\1", "(?=a).*", "a(?!b)", "(?<=x)y", "[", "a**"])
def test_a_regular_expression_re2_refuses_is_invalid_regular_expression(pattern: str) -> None:
    coordinator = Coordinator()
    response = coordinator.heartbeat(join("m1", None, regex=pattern), TOPICS).response
    assert response.error is ErrorCode.invalid_regular_expression
    assert response.error_message is not None and "Invalid regular expression" in (
        response.error_message
    )
    assert coordinator.groups.group(GROUP) is None


def test_a_regular_expression_subscribes_to_the_topics_whose_whole_name_matches() -> None:
    topics = {name: topic(name, 1) for name in ("orders", "orders-eu", "payments")}
    topics["__consumer_offsets"] = dataclasses.replace(
        topic("__consumer_offsets", 1), is_internal=True
    )
    coordinator = Coordinator()
    response = coordinator.heartbeat(join("m1", None, regex="orders.*|.*offsets"), topics).response
    assert as_dict(response.assignment) == {"orders": {0}, "orders-eu": {0}}
    # A topic created later that matches is picked up by the next heartbeat.
    topics["orders-us"] = topic("orders-us", 2)
    result = coordinator.heartbeat(beat("m1", 1), topics)
    assert result.response.member_epoch == 2
    assert sum(len(p.partitions) for p in result.response.assignment or ()) == 4
    coordinator.check_replay()


def test_heartbeats_of_unknown_members_or_groups_get_unknown_member_id() -> None:
    coordinator = Coordinator()
    assert coordinator.heartbeat(beat("m1", 3), TOPICS).response.error is (
        ErrorCode.unknown_member_id
    )
    coordinator.heartbeat(join("m1"), TOPICS)
    for request in (beat("m2", 1), beat("m2", -1)):
        assert coordinator.heartbeat(request, TOPICS).response.error is (
            ErrorCode.unknown_member_id
        )


def test_a_member_epoch_other_than_the_members_is_fenced_but_a_lost_answer_is_forgiven() -> None:
    coordinator = Coordinator()
    coordinator.heartbeat(join("m1"), TOPICS)
    assert coordinator.heartbeat(beat("m1", 2), TOPICS).response.error is (
        ErrorCode.fenced_member_epoch
    )
    # m2 joins: epoch 2; m1 must give up half. Say m1's answer at epoch 2 is lost.
    coordinator.heartbeat(join("m2"), TOPICS)
    answer = coordinator.heartbeat(beat("m1", 1, owned(a=[0, 1, 2, 3])), TOPICS).response
    kept = as_dict(answer.assignment)["a"]
    assert answer.member_epoch == 1 and len(kept) == 2
    moved = coordinator.heartbeat(beat("m1", 1, owned(a=sorted(kept))), TOPICS).response
    assert moved.member_epoch == 2
    # The member retries with epoch 1, owning no more than its assignment: accepted.
    retry = coordinator.heartbeat(beat("m1", 1, owned(a=sorted(kept))), TOPICS).response
    assert (retry.error, retry.member_epoch) == (ErrorCode.none, 2)
    assert as_dict(retry.assignment) == {"a": kept}, "the answer it missed is sent again"
    # With epoch 1 and more than it is assigned, or without saying what it owns: fenced.
    for owned_partitions in (owned(a=[0, 1, 2, 3]), None):
        fenced = coordinator.heartbeat(beat("m1", 1, owned_partitions), TOPICS).response
        assert fenced.error is ErrorCode.fenced_member_epoch
    coordinator.check_replay()


def test_a_second_member_gets_its_partitions_only_after_the_first_revoked_them() -> None:
    coordinator = Coordinator()
    coordinator.heartbeat(join("m1"), TOPICS)
    second = coordinator.heartbeat(join("m2"), TOPICS).response
    group = coordinator.groups.group(GROUP)
    assert group is not None
    assert (second.member_epoch, as_dict(second.assignment)) == (2, {})
    assert group.members["m2"].state is MemberState.UNRELEASED_PARTITIONS
    assert group.state is ConsumerGroupState.RECONCILING
    m2_target = group.target_assignment["m2"]
    # m2 keeps asking: nothing is free yet.
    again = coordinator.heartbeat(beat("m2", 2, owned()), TOPICS).response
    assert again.assignment is None and again.member_epoch == 2
    # m1 is told to revoke (its epoch stays 1) and a rebalance timer is armed.
    result = coordinator.heartbeat(beat("m1", 1, owned(a=[0, 1, 2, 3])), TOPICS)
    revoke = result.response
    assert revoke.member_epoch == 1
    assert group.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    rebalance = TimerKey(TimerKind.REBALANCE, GROUP, "m1")
    assert ArmTimer(rebalance, REBALANCE_MS) in result.timers
    kept = as_dict(revoke.assignment)["a"]
    assert kept.isdisjoint(m2_target[next(iter(m2_target))])
    # m1 revoked: it moves to epoch 2, the timer is cancelled, the partitions are free.
    result = coordinator.heartbeat(beat("m1", 1, owned(a=sorted(kept))), TOPICS)
    assert result.response.member_epoch == 2
    assert CancelTimer(rebalance) in result.timers
    got = coordinator.heartbeat(beat("m2", 2, owned()), TOPICS).response
    assert as_dict(got.assignment)["a"] == {0, 1, 2, 3} - kept
    assert group.state is ConsumerGroupState.STABLE
    coordinator.check_replay()


def test_a_member_that_leaves_is_deleted_and_its_partitions_go_to_the_others() -> None:
    coordinator = Coordinator()
    coordinator.heartbeat(join("m1"), TOPICS)
    coordinator.heartbeat(join("m2"), TOPICS)
    result = coordinator.heartbeat(beat("m1", -1), TOPICS)
    assert (result.response.error, result.response.member_epoch) == (ErrorCode.none, -1)
    assert [(type(r.key), r.value) for r in result.records[:3]] == [
        (ConsumerGroupCurrentMemberAssignmentKey, None),
        (ConsumerGroupTargetAssignmentMemberKey, None),
        (ConsumerGroupMemberMetadataKey, None),
    ]
    group = coordinator.groups.group(GROUP)
    assert group is not None and list(group.members) == ["m2"] and group.group_epoch == 3
    got = coordinator.heartbeat(beat("m2", 2, owned()), TOPICS).response
    assert (got.member_epoch, as_dict(got.assignment)) == (3, {"a": {0, 1, 2, 3}})
    coordinator.check_replay()


def test_a_static_member_leaving_for_a_while_keeps_its_partitions_for_its_successor() -> None:
    coordinator = Coordinator()
    first = coordinator.heartbeat(join("m1", instance_id="i1"), TOPICS).response
    coordinator.heartbeat(join("m2"), TOPICS)
    coordinator.heartbeat(beat("m1", 1, owned(a=[0, 1, 2, 3]), instance_id="i1"), TOPICS)
    group = coordinator.groups.group(GROUP)
    assert group is not None
    kept = group.members["m1"].assigned_partitions
    # Another process with the same instance id while m1 is there: refused.
    taken = coordinator.heartbeat(join("m3", instance_id="i1"), TOPICS).response
    assert taken.error is ErrorCode.unreleased_instance_id
    left = coordinator.heartbeat(beat("m1", -2, instance_id="i1"), TOPICS).response
    assert (left.error, left.member_epoch) == (ErrorCode.none, -2)
    epoch = group.group_epoch
    assert group.members["m1"].member_epoch == -2 and group.members["m1"].assigned_partitions
    # Back under a new member id: same partitions, no new group epoch.
    back = coordinator.heartbeat(join("m3", instance_id="i1"), TOPICS).response
    assert back.error is ErrorCode.none and group.group_epoch == epoch
    assert "m1" not in group.members
    assert group.members["m3"].assigned_partitions == kept
    assert first.member_epoch == 1
    # The old member id is fenced.
    old = coordinator.heartbeat(beat("m1", 1, instance_id="i1"), TOPICS).response
    assert old.error is ErrorCode.fenced_instance_id
    coordinator.check_replay()


def test_a_full_group_refuses_new_members() -> None:
    coordinator = Coordinator(dataclasses.replace(CONFIG, group_size_max=2))
    coordinator.heartbeat(join("m1"), TOPICS)
    coordinator.heartbeat(join("m2"), TOPICS)
    response = coordinator.heartbeat(join("m3"), TOPICS).response
    assert response.error is ErrorCode.group_max_size_reached
    # A member already in rejoins fine.
    assert coordinator.heartbeat(join("m2"), TOPICS).response.error is ErrorCode.none


def test_a_member_silent_for_its_session_is_removed_but_a_stale_timer_is_ignored() -> None:
    coordinator = Coordinator()
    coordinator.heartbeat(join("m1"), TOPICS, now_ms=0)
    coordinator.heartbeat(beat("m1", 1), TOPICS, now_ms=10_000)
    key = TimerKey(TimerKind.SESSION, GROUP, "m1")
    # The timer armed by the join fires: the member heartbeated since.
    assert coordinator.expire(key, CONFIG.session_timeout_ms).records == []
    expired = coordinator.expire(key, 10_000 + CONFIG.session_timeout_ms)
    group = coordinator.groups.group(GROUP)
    assert group is not None and group.members == {} and group.group_epoch == 2
    assert expired.records[-1] == ConsumerGroupRecord(
        ConsumerGroupMetadataKey(GROUP), expired.records[-1].value
    )
    assert group.state is ConsumerGroupState.EMPTY
    coordinator.check_replay()


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_removed() -> None:
    coordinator = Coordinator()
    coordinator.heartbeat(join("m1"), TOPICS, now_ms=0)
    coordinator.heartbeat(join("m2"), TOPICS, now_ms=0)
    coordinator.heartbeat(beat("m1", 1, owned(a=[0, 1, 2, 3])), TOPICS, now_ms=1_000)
    key = TimerKey(TimerKind.REBALANCE, GROUP, "m1")
    assert coordinator.expire(key, 1_000 + REBALANCE_MS - 1).records == []
    assert coordinator.expire(key, 1_000 + REBALANCE_MS).records
    got = coordinator.heartbeat(beat("m2", 2, owned()), TOPICS, now_ms=32_000).response
    assert as_dict(got.assignment) == {"a": {0, 1, 2, 3}}
    coordinator.check_replay()


def test_partitions_added_to_or_topics_deleted_from_the_metadata_move_the_group_epoch() -> None:
    coordinator = Coordinator()
    coordinator.heartbeat(join("m1", ("a", "b")), {"a": topic("a", 2)})
    grown = {"a": topic("a", 3), "b": topic("b", 1)}
    response = coordinator.heartbeat(beat("m1", 1), grown).response
    assert (response.member_epoch, as_dict(response.assignment)) == (2, {"a": {0, 1, 2}, "b": {0}})
    gone = {"a": topic("a", 3)}
    revoke = coordinator.heartbeat(beat("m1", 2, owned(a=[0, 1, 2], b=[0])), gone).response
    assert revoke.member_epoch == 2 and as_dict(revoke.assignment) == {"a": {0, 1, 2}}
    done = coordinator.heartbeat(beat("m1", 2, owned(a=[0, 1, 2])), gone).response
    assert done.member_epoch == 3
    coordinator.check_replay()


def test_the_assignor_most_members_name_is_used() -> None:
    topics = {"a": topic("a", 2), "b": topic("b", 2)}
    coordinator = Coordinator()
    coordinator.heartbeat(join("m1", ("a", "b"), assignor="range"), topics)
    coordinator.heartbeat(join("m2", ("a", "b"), assignor="range"), topics)
    group = coordinator.groups.group(GROUP)
    assert group is not None
    # range: co-partitioned, partition p of a and b to the same member.
    for member in ("m1", "m2"):
        target = group.target_assignment[member]
        assert len(set(target.values())) == 1


def test_an_unknown_member_state_from_a_newer_version_fences_the_member() -> None:
    coordinator = Coordinator()
    coordinator.heartbeat(join("m1"), TOPICS)
    record = ConsumerGroupRecord(
        ConsumerGroupCurrentMemberAssignmentKey(GROUP, "m1"),
        ConsumerGroupCurrentMemberAssignmentValue(1, 0, MemberState.from_byte(9), (), ()),
    )
    coordinator.groups.replay(record)
    response = coordinator.heartbeat(beat("m1", 1), TOPICS).response
    assert response.error is ErrorCode.fenced_member_epoch
    group = coordinator.groups.group(GROUP)
    assert group is not None and group.members == {}


def test_deleting_a_group_writes_tombstones_that_delete_it_on_replay() -> None:
    coordinator = Coordinator()
    coordinator.heartbeat(join("m1"), TOPICS)
    coordinator.heartbeat(join("m2", group_id="other"), TOPICS)
    tombstones, _ = coordinator.groups.delete_group_records(GROUP)
    coordinator.log += tombstones
    assert all(record.is_tombstone for record in tombstones)
    assert coordinator.groups.group(GROUP) is None
    assert coordinator.groups.group("other") is not None
    coordinator.check_replay()


def test_the_config_refuses_unknown_assignors_and_heartbeats_slower_than_sessions() -> None:
    with pytest.raises(ValueError, match="assignors"):
        ConsumerGroupsConfig(assignors=("sticky",))
    with pytest.raises(ValueError, match="heartbeat"):
        ConsumerGroupsConfig(session_timeout_ms=5_000, heartbeat_interval_ms=5_000)


def test_a_request_dataclass_carries_every_field_of_the_wire_request() -> None:
    fields = {f.name for f in dataclasses.fields(ConsumerGroupHeartbeatRequest)}
    assert {
        "group_id",
        "member_id",
        "member_epoch",
        "instance_id",
        "rack_id",
        "rebalance_timeout_ms",
        "subscribed_topic_names",
        "subscribed_topic_regex",
        "server_assignor",
        "owned_partitions",
    } <= fields


def may_describe(*allowed: str) -> Callable[[frozenset[str]], frozenset[str]]:
    """The rights of a member's principal: DESCRIBE on ``allowed`` only."""
    return lambda names: names & frozenset(allowed)


def test_a_regular_expression_matches_only_topics_the_member_may_describe() -> None:
    topics = {name: topic(name, 2) for name in ("orders", "orders-eu", "payments")}
    coordinator = Coordinator()
    request = dataclasses.replace(
        join("m1", None, regex=".*"), describable_topics=may_describe("orders", "payments")
    )
    result = coordinator.heartbeat(request, topics)
    assert as_dict(result.response.assignment) == {"orders": {0, 1}, "payments": {0, 1}}
    group = coordinator.groups.group(GROUP)
    assert group is not None and sorted(group.subscribed_topics) == ["orders", "payments"]
    # Granted DESCRIBE on another topic: the member's next heartbeat picks it up.
    granted = may_describe("orders", "orders-eu", "payments")
    again = dataclasses.replace(beat("m1", 1), describable_topics=granted)
    answer = coordinator.heartbeat(again, topics).response
    assert answer.member_epoch == 2
    assert as_dict(answer.assignment)["orders-eu"] == {0, 1}
    coordinator.check_replay()


def test_each_members_pattern_is_resolved_with_its_own_rights() -> None:
    topics = {name: topic(name, 2) for name in ("orders", "payments")}
    coordinator = Coordinator()
    rights = {"m1": may_describe("orders"), "m2": may_describe("payments")}
    state: dict[str, tuple[int, dict[str, set[int]]]] = {}
    for member, describable in rights.items():
        request = dataclasses.replace(
            join(member, None, regex=".*"), describable_topics=describable
        )
        answer = coordinator.heartbeat(request, topics).response
        state[member] = (answer.member_epoch, as_dict(answer.assignment))
    for _ in range(4):  # heartbeats until both settle
        for member, describable in rights.items():
            epoch, held = state[member]
            request = beat(member, epoch, owned(**{t: sorted(p) for t, p in held.items()}))
            request = dataclasses.replace(request, describable_topics=describable)
            answer = coordinator.heartbeat(request, topics).response
            assert answer.error is ErrorCode.none, answer
            if answer.assignment is not None:
                held = as_dict(answer.assignment)
            state[member] = (answer.member_epoch, held)
    assert state["m1"][1] == {"orders": {0, 1}}
    assert state["m2"][1] == {"payments": {0, 1}}
    coordinator.check_replay()


def test_a_loaded_members_pattern_is_not_widened_by_another_members_rights() -> None:
    topics = {"orders": topic("orders", 2), "payments": topic("payments", 4)}
    coordinator = Coordinator()
    restricted = dataclasses.replace(
        join("m1", None, regex=".*"), describable_topics=may_describe("orders")
    )
    coordinator.heartbeat(restricted, topics)
    coordinator.heartbeat(join("m2", ("payments",)), topics)
    loaded = ConsumerGroups(CONFIG, lambda: "unused")
    for record in coordinator.log:
        loaded.replay(record)
    # m2 subscribes to "orders" too: the group epoch moves and the target is computed
    # before m1 is heard from again; m1 is still given nothing beyond "orders".
    loaded.heartbeat(
        beat("m2", 2, owned(payments=[0, 1, 2, 3]), topics=("payments", "orders")), topics, 0
    )
    group = loaded.group(GROUP)
    assert group is not None
    names = {t.topic_id: t.name for t in topics.values()}
    assert {names[t] for t in group.target_assignment["m1"]} <= {"orders"}


def test_a_subscription_change_moves_the_group_epoch_even_on_the_groups_topics() -> None:
    topics = {"a": topic("a", 2), "b": topic("b", 2)}
    coordinator = Coordinator()
    coordinator.heartbeat(join("m1", ("a", "b")), topics)
    joined = coordinator.heartbeat(join("m2", ("b",)), topics).response
    group = coordinator.groups.group(GROUP)
    assert group is not None
    epoch = group.group_epoch
    # m2 adds "a", which the group already subscribes to: its topics change, so must
    # the assignment (Kafka bumps the group epoch on any subscription change).
    changed = beat("m2", joined.member_epoch, owned(), topics=("a", "b"))
    coordinator.heartbeat(changed, topics)
    assert group.group_epoch == epoch + 1
    assert group.assignment_epoch == epoch + 1
    coordinator.check_replay()
