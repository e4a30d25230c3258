"""The online upgrade and downgrade between a classic group and a consumer group
(KIP-848), and members of the classic protocol inside a consumer group, on the group
coordinator shard: Kafka's rules, the records written (a reloaded coordinator finds the
same groups), committed offsets kept with the id through both conversions; a failed
write of a conversion or of a classic member's change reverted (both groups as the log
has them)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from consumer_helpers import beat, join, topic
from group_helpers import CONFIG, REBALANCE_MS, SESSION_MS, Harness

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.group.api import (
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    SyncGroupResponse,
)
from sluice.group.config import GroupConfig
from sluice.group.consumer_group import ClassicMemberMetadata, MemberState
from sluice.group.consumer_heartbeat_api import ConsumerGroupHeartbeatRequest
from sluice.group.consumer_records import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupRecord,
)
from sluice.group.consumer_records_codec import decode_record, encode_record
from sluice.group.coordinator import GroupCoordinator
from sluice.group.migration import MigrationPolicy, decode_assignment, encode_assignment

TOPICS = {"a": topic("a", 4)}


def subscription(*topics: str, owned: dict[str, list[int]] | None = None) -> bytes:
    """A ConsumerProtocolSubscription v1 (topics, null user data, owned partitions)."""
    parts = [(1).to_bytes(2, "big"), len(topics).to_bytes(4, "big")]
    for name in topics:
        parts += [len(name).to_bytes(2, "big"), name.encode()]
    parts.append((-1).to_bytes(4, "big", signed=True))
    owned = owned or {}
    parts.append(len(owned).to_bytes(4, "big"))
    for name, partitions in sorted(owned.items()):
        parts += [len(name).to_bytes(2, "big"), name.encode(), len(partitions).to_bytes(4, "big")]
        parts += [p.to_bytes(4, "big") for p in partitions]
    return b"".join(parts)


PROTOCOLS = (("range", subscription("a")),)


def heartbeat(harness: Harness, request: ConsumerGroupHeartbeatRequest) -> Any:
    token = harness.token()
    harness.apply(
        harness.coordinator.consumer_group_heartbeat(harness.now_ms, token, request, TOPICS)
    )
    return harness.reply(token)


def classic_group(harness: Harness, count: int = 2, **join: Any) -> list[JoinGroupResponse]:
    """A Stable classic group of ``count`` consumers of "a", the leader giving each
    member contiguous partitions of its 4 (``join``: more arguments of their JoinGroup)."""
    responses = harness.join_all(count, protocols=PROTOCOLS, **join)
    generation, leader = responses[0].generation_id, responses[0].leader
    share = 4 // count
    assignments = {
        r.member_id: encode_assignment({"a": range(i * share, (i + 1) * share)}, 1)
        for i, r in enumerate(responses)
    }
    for r in responses:
        token = harness.sync(
            r.member_id, generation, assignments if r.member_id == leader else None
        )
        assert harness.reply(token).error is ErrorCode.none
    assert harness.state() == "Stable"
    return responses


def rejoin(harness: Harness, member_id: str, owned: dict[str, list[int]] | None = None) -> Any:
    protocols = (("range", subscription("a", owned=owned)),)
    token = harness.join(member_id=member_id, protocols=protocols, topics=TOPICS)
    return harness.reply(token)


def sync(harness: Harness, member_id: str, generation: int) -> dict[str, frozenset[int]]:
    answer = harness.reply(harness.sync(member_id, generation, protocol_name="range"))
    assert isinstance(answer, SyncGroupResponse)
    assert answer.error is ErrorCode.none, answer
    return decode_assignment(answer.assignment)


def reloaded(harness: Harness) -> GroupCoordinator:
    return harness.replayed()


def upgraded(harness: Harness) -> list[JoinGroupResponse]:
    """A classic group of two, committed offsets, then converted by member "m3"."""
    members = classic_group(harness)
    first = members[0]
    token = harness.commit(
        {("a", 0): 42}, member_id=first.member_id, generation=first.generation_id
    )
    assert harness.reply(token).errors[0][1] is ErrorCode.none
    answer = heartbeat(harness, join("m3"))
    assert answer.error is ErrorCode.none, answer
    return members


# ====================================================================== upgrade


def test_a_joining_consumer_member_converts_a_classic_group() -> None:
    harness = Harness()
    members = upgraded(harness)
    group = harness.coordinator.consumer_group("g")
    assert group is not None
    assert set(group.members) == {members[0].member_id, members[1].member_id, "m3"}
    generation = members[0].generation_id
    assert group.group_epoch == generation + 1, "the newcomer moved the epoch"
    for i, joined in enumerate(members):
        classic = group.members[joined.member_id]
        assert classic.classic is not None and classic.classic.session_timeout_ms == SESSION_MS
        assert classic.member_epoch == generation and classic.state is MemberState.STABLE
        assert set(classic.assigned_partitions.values()) == {frozenset({2 * i, 2 * i + 1})}
    assert not group.members["m3"].assigned_partitions, "it waits for the partitions"
    assert harness.coordinator.describe_groups(["g"])[0].not_found_message, "not classic now"
    assert [g.protocol_type for g in harness.coordinator.list_groups()] == ["consumer"]
    assert harness.committed() == {TopicPartition("a", 0): 42}, "the offsets stay"
    classic_records = [value for key, value in harness.log if key[:2] == b"\x00\x02"]
    assert classic_records[-1] is None, "the classic group's record ends with a tombstone"
    again = reloaded(harness)
    assert again.consumer_group("g") == group
    assert again.fetch_offsets("g", None).offsets[0].offset == 42


def test_classic_members_rejoin_and_the_coordinator_splits_the_partitions() -> None:
    harness = Harness()
    members = upgraded(harness)
    generation = members[0].generation_id
    for joined in members:
        error = harness.heartbeat(joined.member_id, generation)
        assert error is ErrorCode.rebalance_in_progress, "the epoch moved: join again"
    owners: dict[int, str] = {}
    for joined in members:
        # An eager consumer revokes everything before it joins; the first join moves
        # it to revoking what it gives up (Kafka's reconciliation), the next one on.
        for _ in range(3):
            answer = rejoin(harness, joined.member_id)
            assert answer.error is ErrorCode.none and answer.leader == ""
            assert answer.protocol_name == "range"
            assignment = sync(harness, joined.member_id, answer.generation_id)
            if harness.heartbeat(joined.member_id, answer.generation_id) is ErrorCode.none:
                break
        assert answer.generation_id == generation + 1
        for partition in assignment.get("a", ()):
            owners[partition] = joined.member_id
    answer = heartbeat(harness, beat("m3", generation + 1, ()))
    newcomer = {p for entry in answer.assignment or () for p in entry.partitions}
    assert newcomer and not newcomer & set(owners), "no partition has two owners"
    assert len(newcomer) + len(owners) == 4
    group = harness.coordinator.consumer_group("g")
    assert group is not None and group.state.value == "Stable"
    assert reloaded(harness).consumer_group("g") == group


def test_no_upgrade_when_the_policy_forbids_it() -> None:
    for policy in (MigrationPolicy.DISABLED, MigrationPolicy.DOWNGRADE):
        harness = Harness(dataclasses.replace(CONFIG, consumer_migration_policy=policy))
        classic_group(harness)
        answer = heartbeat(harness, join("m3"))
        assert answer.error is ErrorCode.group_id_not_found
        assert answer.error_message == "Group g is not a consumer group."
        assert harness.state() == "Stable"


def test_a_group_in_its_first_rebalance_has_no_protocol_to_convert() -> None:
    harness = Harness()
    parked = harness.join(protocols=PROTOCOLS)  # no generation yet: nothing was chosen
    assert harness.state() == "PreparingRebalance"
    assert heartbeat(harness, join("m3")).error is ErrorCode.group_id_not_found
    assert harness.reply(parked) is None, "the classic rebalance goes on"
    harness.advance(REBALANCE_MS)
    assert harness.reply(parked).error is ErrorCode.none


def test_a_preparing_rebalance_is_converted_and_its_parked_joins_told_to_join_again() -> None:
    harness = Harness()
    members = classic_group(harness)
    generation = members[0].generation_id
    parked = harness.join(member_id=members[0].member_id, protocols=PROTOCOLS, topics=TOPICS)
    newcomer = harness.join(protocols=PROTOCOLS, client_id="late")  # joins this rebalance
    assert harness.state() == "PreparingRebalance" and harness.reply(parked) is None
    late = next(m for m in harness.group().members.values() if m.client_id == "late")
    answer = heartbeat(harness, join("m3"))
    assert answer.error is ErrorCode.none, answer
    for token in (parked, newcomer):
        told = harness.reply(token)
        assert isinstance(told, JoinGroupResponse), told
        assert told.error is ErrorCode.rebalance_in_progress, "join the new rebalance"
    group = harness.coordinator.consumer_group("g")
    assert group is not None
    assert set(group.members) == {m.member_id for m in members} | {late.member_id, "m3"}
    assert group.group_epoch == generation + 1
    for i, joined in enumerate(members):
        member = group.members[joined.member_id]
        assert member.member_epoch == generation, "at the classic generation"
        assert set(member.assigned_partitions.values()) == {frozenset({2 * i, 2 * i + 1})}
    converted = group.members[late.member_id]
    assert converted.classic is not None and not converted.assigned_partitions
    assert harness.coordinator.group("g") is None or not harness.group().members
    assert reloaded(harness).consumer_group("g") == group
    answer = rejoin(harness, members[0].member_id)  # served by the consumer group now
    assert answer.error is ErrorCode.none and answer.leader == "", "nobody assigns"


def test_a_completing_rebalance_is_converted_and_its_parked_syncs_told_to_join_again() -> None:
    harness = Harness()
    members = classic_group(harness)
    tokens = [
        harness.join(member_id=m.member_id, protocols=PROTOCOLS, topics=TOPICS) for m in members
    ]
    answers = [harness.reply(t) for t in tokens]
    assert all(a is not None and a.error is ErrorCode.none for a in answers), answers
    assert harness.state() == "CompletingRebalance"
    generation = answers[0].generation_id
    follower = next(a for a in answers if a.member_id != a.leader)
    parked = harness.sync(follower.member_id, generation, protocol_name="range")
    assert harness.reply(parked) is None
    assert heartbeat(harness, join("m3")).error is ErrorCode.none
    told = harness.reply(parked)
    assert isinstance(told, SyncGroupResponse) and told.error is ErrorCode.rebalance_in_progress
    group = harness.coordinator.consumer_group("g")
    assert group is not None and group.group_epoch == generation + 1
    for i, joined in enumerate(members):  # the partitions of the last assignment
        member = group.members[joined.member_id]
        assert member.member_epoch == generation
        assert set(member.assigned_partitions.values()) == {frozenset({2 * i, 2 * i + 1})}
    assert reloaded(harness).consumer_group("g") == group


def test_an_unreadable_assignment_is_not_converted() -> None:
    harness = Harness()
    harness.stable_group(1, protocols=PROTOCOLS)  # its leader assigns b"assignment-0"
    answer = heartbeat(harness, join("m1"))
    assert answer.error is ErrorCode.group_id_not_found
    assert "malformed" in answer.error_message
    assert harness.state() == "Stable" and harness.coordinator.consumer_group("g") is None


def test_a_refused_heartbeat_leaves_the_classic_group_as_it_was() -> None:
    harness = Harness()
    classic_group(harness)
    log_size = len(harness.log)
    refused = heartbeat(harness, dataclasses.replace(join("m3"), server_assignor="nope"))
    assert refused.error is ErrorCode.unsupported_assignor
    assert harness.coordinator.consumer_group("g") is None
    assert harness.state() == "Stable" and len(harness.log) == log_size
    assert heartbeat(harness, join("m3")).error is ErrorCode.none, "and can convert later"


# ============================================================ classic members


def test_a_classic_consumer_joins_a_consumer_group() -> None:
    harness = Harness()
    heartbeat(harness, join("m1"))
    token = harness.join(protocols=PROTOCOLS, topics=TOPICS, require_known=True)
    required = harness.reply(token)
    assert required.error is ErrorCode.member_id_required
    answer = rejoin(harness, required.member_id)
    assert answer.error is ErrorCode.none and answer.generation_id == 2
    assert sync(harness, required.member_id, 2) == {}, "m1 still owns them all"
    assert harness.heartbeat(required.member_id, 2) is ErrorCode.none
    heartbeat(harness, beat("m1", 1, ()))  # m1 is told what it keeps
    heartbeat(harness, beat("m1", 1, ()))  # and has revoked the rest
    assert harness.heartbeat(required.member_id, 2) is ErrorCode.rebalance_in_progress
    answer = rejoin(harness, required.member_id)
    assert len(sync(harness, required.member_id, answer.generation_id)["a"]) == 2


def test_a_classic_members_new_subscription_moves_the_group_epoch() -> None:
    """Even when it adds only a topic that does not exist (Kafka bumps the epoch when a
    member's subscribed topic names change)."""
    harness = Harness()
    heartbeat(harness, join("m1"))
    assert rejoin(harness, "c1").error is ErrorCode.none
    group = harness.coordinator.consumer_group("g")
    assert group is not None
    epoch = group.group_epoch
    protocols = (("range", subscription("a", "missing")),)
    answer = harness.reply(harness.join(member_id="c1", protocols=protocols, topics=TOPICS))
    assert answer.error is ErrorCode.none
    group = harness.coordinator.consumer_group("g")
    assert group is not None and group.group_epoch == epoch + 1
    assert reloaded(harness).consumer_group("g") == group


def test_join_group_with_another_protocol_is_inconsistent() -> None:
    harness = Harness()
    heartbeat(harness, join("m1"))
    token = harness.join(protocol_type="connect", topics=TOPICS)
    assert harness.reply(token).error is ErrorCode.inconsistent_group_protocol
    token = harness.join(protocols=(("range", b"\x00\x01\xff"),), topics=TOPICS)
    assert harness.reply(token).error is ErrorCode.inconsistent_group_protocol
    group = harness.coordinator.consumer_group("g")
    assert group is not None and list(group.members) == ["m1"], "nothing changed"


def test_classic_requests_check_member_and_generation() -> None:
    harness = Harness()
    members = upgraded(harness)
    generation = members[0].generation_id
    member_id = members[0].member_id
    assert harness.heartbeat("nobody", generation) is ErrorCode.unknown_member_id
    assert harness.heartbeat("m3", 1) is ErrorCode.unknown_member_id, "not a classic member"
    assert harness.heartbeat(member_id, generation - 1) is ErrorCode.illegal_generation
    token = harness.commit({("a", 0): 50}, member_id=member_id, generation=generation - 1)
    assert harness.reply(token).errors[0][1] is ErrorCode.illegal_generation
    token = harness.commit({("a", 0): 50}, member_id=member_id, generation=generation)
    assert harness.reply(token).errors[0][1] is ErrorCode.none
    answer = harness.reply(harness.sync(member_id, generation, protocol_name="roundrobin"))
    assert answer.error is ErrorCode.inconsistent_group_protocol


def test_a_silent_classic_member_is_removed_at_its_session_timeout() -> None:
    harness = Harness()
    members = upgraded(harness)
    heartbeat(harness, beat("m3", members[0].generation_id + 1, ()))
    harness.advance(SESSION_MS - 1)
    assert harness.heartbeat(members[0].member_id, members[0].generation_id) in (
        ErrorCode.none,
        ErrorCode.rebalance_in_progress,
    )
    heartbeat(harness, beat("m3", members[0].generation_id + 1, ()))
    harness.advance(2)
    group = harness.coordinator.consumer_group("g")
    assert group is not None and members[1].member_id not in group.members, "it was silent"
    assert members[0].member_id in group.members, "its heartbeat kept it"
    assert reloaded(harness).consumer_group("g") == group


def test_a_classic_member_that_does_not_sync_in_time_is_removed() -> None:
    harness = Harness()
    heartbeat(harness, join("m1"))
    answer = rejoin(harness, "c1")
    assert answer.error is ErrorCode.none
    for _ in range(REBALANCE_MS // (SESSION_MS // 2)):  # heartbeats keep its session only
        harness.advance(SESSION_MS // 2)
        harness.heartbeat("c1", answer.generation_id)
        heartbeat(harness, beat("m1", 2))
    harness.advance(SESSION_MS // 2)
    group = harness.coordinator.consumer_group("g")
    assert group is not None and list(group.members) == ["m1"]


def test_a_classic_member_told_to_join_again_must_do_so_in_time() -> None:
    harness = Harness()
    members = upgraded(harness)
    silent, rejoining = members[0], members[1]
    assert harness.heartbeat(silent.member_id, silent.generation_id) is (
        ErrorCode.rebalance_in_progress
    )
    for _ in range(REBALANCE_MS // (SESSION_MS // 2) + 1):
        harness.advance(SESSION_MS // 2)
        heartbeat(harness, beat("m3", silent.generation_id + 1))
        harness.heartbeat(silent.member_id, silent.generation_id)  # but never joins
        answer = rejoin(harness, rejoining.member_id)
        sync(harness, rejoining.member_id, answer.generation_id)
    group = harness.coordinator.consumer_group("g")
    assert group is not None and silent.member_id not in group.members
    assert rejoining.member_id in group.members


def test_a_classic_member_leaves_a_consumer_group() -> None:
    harness = Harness()
    members = upgraded(harness)
    epoch_before = harness.coordinator.consumer_group("g").group_epoch  # type: ignore[union-attr]
    response = harness.leave(MemberIdentity(members[0].member_id), MemberIdentity("nobody"))
    assert [m.error for m in response.members] == [ErrorCode.none, ErrorCode.unknown_member_id]
    group = harness.coordinator.consumer_group("g")
    assert group is not None and members[0].member_id not in group.members
    assert group.group_epoch == epoch_before + 1


# ==================================================================== downgrade


def test_the_last_consumer_member_leaving_downgrades_the_group() -> None:
    harness = Harness()
    members = upgraded(harness)
    epoch = harness.coordinator.consumer_group("g").group_epoch  # type: ignore[union-attr]
    answer = heartbeat(harness, beat("m3", -1))
    assert answer.error is ErrorCode.none and answer.member_epoch == -1
    assert harness.coordinator.consumer_group("g") is None
    group = harness.group()
    assert group.state.value == "PreparingRebalance" and group.generation_id == epoch
    assert set(group.members) == {m.member_id for m in members}
    assert harness.committed() == {TopicPartition("a", 0): 42}, "the offsets stay"
    again = reloaded(harness).group("g")
    assert again is not None and again.generation_id == epoch
    assert set(again.members) == set(group.members), "the classic group is in the log"
    # The classic members join again and the classic protocol carries on.
    tokens = [
        harness.join(member_id=m.member_id, protocols=PROTOCOLS, topics=TOPICS) for m in members
    ]
    answers = [harness.reply(t) for t in tokens]
    assert all(a.error is ErrorCode.none for a in answers), answers
    assert answers[0].generation_id == epoch + 1 and harness.state() == "CompletingRebalance"


def test_an_expired_consumer_member_downgrades_the_group() -> None:
    harness = Harness()
    members = upgraded(harness)
    for _ in range(12):  # the classic members keep their sessions, m3 is silent
        harness.advance(SESSION_MS // 2)
        if harness.coordinator.consumer_group("g") is None:
            break
        for joined in members:  # as their clients do: join again when told
            answer = rejoin(harness, joined.member_id)
            sync(harness, joined.member_id, answer.generation_id)
    assert harness.coordinator.consumer_group("g") is None
    assert harness.state() == "PreparingRebalance"
    assert set(harness.group().members) == {m.member_id for m in members}


def static_consumer_member(harness: Harness) -> None:
    """A consumer group of one static member of the new protocol ("m1", instance "i1")
    holding the 4 partitions of "a", with an offset committed."""
    answer = heartbeat(harness, join("m1", instance_id="i1"))
    assert answer.error is ErrorCode.none and answer.member_epoch == 1, answer
    token = harness.commit({("a", 0): 7}, member_id="m1", generation=1)
    assert harness.reply(token).errors[0][1] is ErrorCode.none


def test_a_static_classic_member_replacing_the_last_consumer_member_downgrades() -> None:
    """Its client went back to the classic protocol: the group becomes a classic group
    at once, Stable, the new member holding its predecessor's partitions (no rebalance:
    the subscription is the same)."""
    harness = Harness()
    static_consumer_member(harness)
    token = harness.join(instance="i1", protocols=PROTOCOLS, topics=TOPICS)
    answer = harness.reply(token)
    assert isinstance(answer, JoinGroupResponse) and answer.error is ErrorCode.none, answer
    assert answer.member_id not in ("", "m1") and answer.generation_id == 1
    assert answer.protocol_name == "range" and answer.leader == ""
    assert harness.coordinator.consumer_group("g") is None, "downgraded"
    group = harness.group()
    assert harness.state() == "Stable" and group.generation_id == 1
    assert list(group.members) == [answer.member_id]
    assert group.static_members == {"i1": answer.member_id}
    assert sync(harness, answer.member_id, answer.generation_id) == {"a": frozenset(range(4))}
    assert harness.heartbeat(answer.member_id, 1, instance="i1") is ErrorCode.none
    assert harness.committed() == {TopicPartition("a", 0): 7}, "the offsets stay"
    again = reloaded(harness)
    assert again.consumer_group("g") is None
    loaded = again.group("g")
    assert loaded is not None and list(loaded.members) == [answer.member_id]
    assert loaded.members[answer.member_id].group_instance_id == "i1"
    assert decode_assignment(loaded.members[answer.member_id].assignment) == {
        "a": frozenset(range(4))
    }


def test_a_static_replacement_with_another_subscription_downgrades_and_rebalances() -> None:
    harness = Harness()
    static_consumer_member(harness)
    protocols = (("range", subscription("a", "b")),)
    token = harness.join(instance="i1", protocols=protocols, topics=TOPICS)
    answer = harness.reply(token)
    assert isinstance(answer, JoinGroupResponse) and answer.error is ErrorCode.none, answer
    assert harness.coordinator.consumer_group("g") is None
    assert harness.state() == "PreparingRebalance", "the classic members join again"
    assert harness.group().generation_id == 2, "the new subscription moved the epoch"
    rejoined = harness.join(
        member_id=answer.member_id, instance="i1", protocols=protocols, topics=TOPICS
    )
    harness.advance(0)
    again = harness.reply(rejoined)
    assert again.error is ErrorCode.none and again.generation_id == 3
    assert again.leader == answer.member_id


def test_no_downgrade_by_a_static_replacement_while_others_use_the_new_protocol() -> None:
    harness = Harness()
    static_consumer_member(harness)
    assert heartbeat(harness, join("m2")).error is ErrorCode.none
    token = harness.join(instance="i1", protocols=PROTOCOLS, topics=TOPICS)
    answer = harness.reply(token)
    assert answer.error is ErrorCode.none
    group = harness.coordinator.consumer_group("g")
    assert group is not None and set(group.members) == {answer.member_id, "m2"}
    assert group.members[answer.member_id].classic is not None


def test_a_failed_downgrade_by_a_static_replacement_restores_the_consumer_group() -> None:
    harness = Harness()
    static_consumer_member(harness)
    before = consumer_snapshot(harness)
    harness.auto_commit = False
    token = harness.join(instance="i1", protocols=PROTOCOLS, topics=TOPICS)
    assert harness.coordinator.consumer_group("g") is None, "downgraded in memory"
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    harness.auto_commit = True
    answer = harness.reply(token)
    assert isinstance(answer, JoinGroupResponse) and answer.error is ErrorCode.not_coordinator
    assert consumer_snapshot(harness) == before, "m1 holds its seat again"
    assert harness.coordinator.describe_groups(["g"])[0].not_found_message, "not classic"
    assert reloaded(harness).consumer_group("g") == harness.coordinator.consumer_group("g")
    retried = harness.reply(harness.join(instance="i1", protocols=PROTOCOLS, topics=TOPICS))
    assert retried.error is ErrorCode.none and harness.state() == "Stable", "on a retry"


def test_no_downgrade_when_the_policy_forbids_it() -> None:
    harness = Harness(
        dataclasses.replace(CONFIG, consumer_migration_policy=MigrationPolicy.UPGRADE)
    )
    members = upgraded(harness)
    heartbeat(harness, beat("m3", -1))
    group = harness.coordinator.consumer_group("g")
    assert group is not None and set(group.members) == {m.member_id for m in members}


# ====================================================================== records


def test_classic_member_metadata_round_trips_in_kafkas_layout() -> None:
    value = ConsumerGroupMemberMetadataValue(
        instance_id=None,
        rack_id=None,
        client_id="c",
        client_host="h",
        subscribed_topic_names=("a",),
        subscribed_topic_regex=None,
        rebalance_timeout_ms=300,
        server_assignor=None,
        classic_member_metadata=ClassicMemberMetadata(45_000, (("range", b"\x00\x01"),)),
    )
    record = ConsumerGroupRecord(ConsumerGroupMemberMetadataKey("g", "m"), value)
    key, data = encode_record(record)
    assert data is not None
    struct_bytes = (
        b"\x01"  # a nullable struct that is not null
        + (45_000).to_bytes(4, "big")
        + b"\x02"  # one protocol
        + b"\x06range"
        + b"\x03\x00\x01"
        + b"\x00"  # the protocol's tags
        + b"\x00"  # the struct's tags
    )
    assert data.endswith(b"\x01\x00" + bytes([len(struct_bytes)]) + struct_bytes)
    assert decode_record(key, data) == record


def test_the_migration_policy_is_read_by_kafkas_name() -> None:
    assert GroupConfig().consumer_migration_policy is MigrationPolicy.BIDIRECTIONAL
    config = GroupConfig.from_properties({"group.consumer.migration.policy": "Upgrade"})
    assert config.consumer_migration_policy is MigrationPolicy.UPGRADE
    with pytest.raises(ValueError, match=r"group.consumer.migration.policy: 'both'"):
        GroupConfig.from_properties({"group.consumer.migration.policy": "both"})


# ================================================== failed writes are reverted


def consumer_snapshot(harness: Harness) -> Any:
    return copy.deepcopy(harness.coordinator.consumer_group("g"))


def classic_snapshot(harness: Harness) -> Any:
    group = harness.coordinator.group("g")
    if group is None:
        return None
    members = {
        m.member_id: (m.group_instance_id, m.session_timeout_ms, m.protocols, m.assignment)
        for m in group.members.values()
    }
    return (group.state, group.generation_id, group.protocol_name, group.leader_id, members)


def test_a_failed_upgrade_write_leaves_the_classic_group_as_it_was() -> None:
    harness = Harness()
    members = classic_group(harness)
    classic_before = classic_snapshot(harness)
    harness.auto_commit = False
    token = harness.token()
    harness.apply(
        harness.coordinator.consumer_group_heartbeat(harness.now_ms, token, join("m3"), TOPICS)
    )
    assert harness.coordinator.consumer_group("g") is not None, "memory holds it meanwhile"
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    assert harness.reply(token).error is ErrorCode.not_coordinator
    assert harness.coordinator.consumer_group("g") is None, "no consumer group in the log"
    assert classic_snapshot(harness) == classic_before, "members, generation, leader back"
    assert [g.protocol_type for g in harness.coordinator.list_groups()] == ["consumer"]
    assert harness.coordinator.describe_groups(["g"])[0].state == "Stable"
    generation = members[0].generation_id
    for joined in members:  # served by the classic group again, sessions running
        assert harness.heartbeat(joined.member_id, generation) is ErrorCode.none
    harness.advance(SESSION_MS // 2)
    assert harness.heartbeat(members[0].member_id, generation) is ErrorCode.none
    harness.auto_commit = True
    assert heartbeat(harness, join("m3")).error is ErrorCode.none, "converted on a retry"
    group = harness.coordinator.consumer_group("g")
    assert group is not None and len(group.members) == 3
    assert reloaded(harness).consumer_group("g") == group


def test_a_failed_upgrade_of_a_rebalancing_group_lets_its_rebalance_go_on() -> None:
    """The parked requests wait again (the clients see nothing of the attempt) and the
    rebalance deadline, passed while the write was in flight, is watched again."""
    harness = Harness()
    timeouts = {"session_ms": 60_000, "rebalance_ms": 20_000}
    members = classic_group(harness, **timeouts)
    generation = members[0].generation_id
    parked = harness.join(
        member_id=members[0].member_id, protocols=PROTOCOLS, topics=TOPICS, **timeouts
    )
    classic_before = classic_snapshot(harness)
    harness.auto_commit = False
    token = harness.token()
    harness.apply(
        harness.coordinator.consumer_group_heartbeat(harness.now_ms, token, join("m3"), TOPICS)
    )
    harness.advance(timeouts["rebalance_ms"] + 1)  # the classic join deadline passes
    assert harness.reply(parked) is None, "answered only once the conversion is written"
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    harness.auto_commit = True
    assert harness.reply(token).error is ErrorCode.not_coordinator
    assert harness.reply(parked) is None, "still parked in the classic rebalance"
    assert harness.coordinator.consumer_group("g") is None
    assert classic_snapshot(harness) == classic_before
    assert harness.group().members[members[0].member_id].awaiting_join
    harness.advance(0)  # the other member did not join in time: the rebalance ends
    answer = harness.reply(parked)
    assert isinstance(answer, JoinGroupResponse) and answer.error is ErrorCode.none
    assert answer.generation_id == generation + 1
    assert set(harness.group().members) == {members[0].member_id}


def test_a_failed_write_of_an_empty_classic_groups_tombstone_gives_its_record_back() -> None:
    harness = Harness()
    (member,) = classic_group(harness, count=1)
    harness.leave(MemberIdentity(member.member_id))
    assert harness.state() == "Empty" and harness.group().generation_id > 0
    generation = harness.group().generation_id
    harness.auto_commit = False
    token = harness.token()
    harness.apply(
        harness.coordinator.consumer_group_heartbeat(harness.now_ms, token, join("m1"), TOPICS)
    )
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    assert harness.coordinator.consumer_group("g") is None
    assert harness.group().generation_id == generation, "the classic record is in the log"
    assert harness.group().protocol_type == "consumer"


def test_a_failed_classic_join_write_is_reverted() -> None:
    harness = Harness()
    upgraded(harness)
    before = consumer_snapshot(harness)
    harness.auto_commit = False
    token = harness.join(member_id="c9", protocols=PROTOCOLS, topics=TOPICS)
    assert "c9" in harness.coordinator.consumer_group("g").members  # type: ignore[union-attr]
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    answer = harness.reply(token)
    assert isinstance(answer, JoinGroupResponse) and answer.error is ErrorCode.not_coordinator
    assert consumer_snapshot(harness) == before


def test_a_failed_classic_leave_write_keeps_the_member() -> None:
    harness = Harness()
    members = upgraded(harness)
    before = consumer_snapshot(harness)
    harness.auto_commit = False
    token = harness.token()
    request = LeaveGroupRequest("g", (MemberIdentity(members[0].member_id),))
    harness.apply(harness.coordinator.leave_group(harness.now_ms, token, request))
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    assert harness.reply(token).error is ErrorCode.not_coordinator
    assert consumer_snapshot(harness) == before, "the member is back"
    generation = members[0].generation_id
    assert harness.heartbeat(members[0].member_id, generation) in (
        ErrorCode.none,
        ErrorCode.rebalance_in_progress,
    ), "and served as a member"


def test_a_failed_downgrade_write_restores_the_consumer_group() -> None:
    harness = Harness()
    members = upgraded(harness)
    harness.auto_commit = False
    leave = harness.token()
    harness.apply(
        harness.coordinator.consumer_group_heartbeat(harness.now_ms, leave, beat("m3", -1), TOPICS)
    )
    assert harness.coordinator.consumer_group("g") is None, "downgraded in memory"
    assert set(harness.group().members) == {m.member_id for m in members}
    # A classic member joins the replacement while its record is being written: parked.
    parked = harness.join(member_id=members[0].member_id, protocols=PROTOCOLS, topics=TOPICS)
    assert harness.reply(parked) is None
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    assert harness.reply(leave).error is ErrorCode.not_coordinator
    answer = harness.reply(parked)
    assert isinstance(answer, JoinGroupResponse) and answer.error is ErrorCode.not_coordinator
    group = harness.coordinator.consumer_group("g")
    assert group is not None and set(group.members) == {m.member_id for m in members} | {"m3"}
    assert reloaded(harness).consumer_group("g") == group, "memory is what the log holds"
    assert harness.coordinator.describe_groups(["g"])[0].not_found_message, "not classic"
    assert harness.committed() == {TopicPartition("a", 0): 42}
    harness.auto_commit = True
    assert heartbeat(harness, beat("m3", -1)).error is ErrorCode.none
    assert harness.coordinator.consumer_group("g") is None, "downgraded on a retry"


def test_a_classic_member_commits_with_any_offset_commit_version() -> None:
    """Kafka's validateOffsetCommit: only members of the new protocol need v9+."""
    harness = Harness()
    members = upgraded(harness)
    generation = members[0].generation_id
    token = harness.commit(
        {("a", 0): 60}, member_id=members[0].member_id, generation=generation, api_version=8
    )
    assert harness.reply(token).errors[0][1] is ErrorCode.none
    epoch = harness.coordinator.consumer_group("g").members["m3"].member_epoch  # type: ignore[union-attr]
    token = harness.commit({("a", 3): 1}, member_id="m3", generation=epoch, api_version=8)
    assert harness.reply(token).errors[0][1] is ErrorCode.unsupported_version


def test_a_pattern_in_an_upgraded_group_matches_only_what_its_member_may_describe() -> None:
    """The member converting the group subscribes by pattern: the topics its principal may
    not DESCRIBE are left out, and stay out after a reload when a classic member's
    JoinGroup moves the group (no other member's request widens the pattern)."""
    harness = Harness()
    members = classic_group(harness)
    topics = {**TOPICS, "b": topic("b", 2)}
    hidden = dataclasses.replace(
        join("m3", None, regex="a|b"), describable_topics=lambda names: names - {"b"}
    )
    token = harness.token()
    harness.apply(
        harness.coordinator.consumer_group_heartbeat(harness.now_ms, token, hidden, topics)
    )
    assert harness.reply(token).error is ErrorCode.none
    group = harness.coordinator.consumer_group("g")
    assert group is not None and set(group.subscribed_topics) == {"a"}
    harness.coordinator = reloaded(harness)
    protocols = (("range", subscription("a")),)
    token = harness.join(member_id=members[0].member_id, protocols=protocols, topics=topics)
    assert harness.reply(token).error is ErrorCode.none
    group = harness.coordinator.consumer_group("g")
    assert group is not None and set(group.subscribed_topics) == {"a"}, "not widened"
