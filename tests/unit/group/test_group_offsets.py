"""Committed offsets: commit rules (generations, simple consumers), visibility only once
durable, fetch, replay from the log, DeleteGroups, OffsetDelete and offset expiry."""

from __future__ import annotations

import dataclasses

from group_helpers import CONFIG, SESSION_MS, Harness, subscription

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.group.api import (
    FetchedOffset,
    JoinGroupResponse,
    MemberIdentity,
    OffsetCommitResponse,
    OffsetToCommit,
)
from sluice.group.offsets import EXPIRY_RECORDS_PER_APPEND_MAX
from sluice.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    encode_group_metadata_value,
    encode_key,
)

OK = ErrorCode.none
T0 = TopicPartition("orders", 0)
T1 = TopicPartition("orders", 1)
OTHER = TopicPartition("other", 0)
DAY_MS = 24 * 3_600_000


def errors_of(response: OffsetCommitResponse) -> list[ErrorCode]:
    return [error for _, error in response.errors]


def test_simple_consumer_commits_and_fetches(harness: Harness) -> None:
    token = harness.commit(
        {("orders", 0): OffsetToCommit(42, leader_epoch=3, metadata="m"), ("orders", 1): 7},
        group_id="simple",
    )
    assert errors_of(harness.reply(token)) == [OK, OK]
    fetched = harness.coordinator.fetch_offsets("simple", [T0, T1, OTHER])
    assert fetched.error is OK
    assert fetched.offsets == (
        FetchedOffset(T0, 42, 3, "m"),
        FetchedOffset(T1, 7, -1, ""),
        FetchedOffset(OTHER, -1, -1, ""),
    )
    everything = harness.coordinator.fetch_offsets("simple", None)
    assert [f.partition for f in everything.offsets] == [T0, T1]
    assert harness.coordinator.fetch_offsets("nobody", None).offsets == ()
    assert harness.coordinator.fetch_offsets("nobody", [T0]).offsets == (FetchedOffset(T0),)
    (listed,) = harness.coordinator.list_groups()
    assert (listed.group_id, listed.protocol_type, listed.state) == ("simple", "", "Empty")


def test_offsets_are_visible_only_once_durable(harness: Harness) -> None:
    harness.auto_commit = False
    token = harness.commit({("orders", 0): 5})
    assert harness.reply(token) is None
    assert harness.committed() == {}
    harness.commit_appends()
    assert errors_of(harness.reply(token)) == [OK]
    assert harness.committed() == {T0: 5}


def test_failed_commit_is_answered_and_not_applied(harness: Harness) -> None:
    harness.commit({("orders", 0): 5})
    harness.auto_commit = False
    token = harness.commit({("orders", 0): 9, ("orders", 1): 1})
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    assert errors_of(harness.reply(token)) == [ErrorCode.not_coordinator] * 2
    assert harness.committed() == {T0: 5}
    too_big = harness.commit({("orders", 0): 9})
    harness.commit_appends(ErrorCode.message_too_large)
    assert errors_of(harness.reply(too_big)) == [ErrorCode.invalid_commit_offset_size]
    unavailable = harness.commit({("orders", 0): 9})
    harness.commit_appends(ErrorCode.not_enough_replicas)
    assert errors_of(harness.reply(unavailable)) == [ErrorCode.coordinator_not_available]


def test_failed_first_commit_leaves_no_group(harness: Harness) -> None:
    harness.auto_commit = False
    harness.commit({("orders", 0): 5}, group_id="fresh")
    harness.commit_appends(ErrorCode.request_timed_out)
    assert harness.coordinator.group("fresh") is None


def test_metadata_too_large_is_refused_per_partition(seed: int) -> None:
    harness = Harness(dataclasses.replace(CONFIG, offset_metadata_bytes_max=4), seed)
    token = harness.commit(
        {("orders", 0): OffsetToCommit(1, metadata="12345"), ("orders", 1): OffsetToCommit(2)}
    )
    assert errors_of(harness.reply(token)) == [ErrorCode.offset_metadata_too_large, OK]
    assert harness.committed() == {T1: 2}
    alone = harness.commit({("orders", 0): OffsetToCommit(1, metadata="12345")})
    assert errors_of(harness.reply(alone)) == [ErrorCode.offset_metadata_too_large]


def test_member_commits_need_the_current_generation(harness: Harness) -> None:
    a, _b = harness.stable_group(2)
    ok = harness.commit({("orders", 0): 1}, member_id=a.member_id, generation=1)
    assert errors_of(harness.reply(ok)) == [OK]
    stale = harness.commit({("orders", 0): 2}, member_id=a.member_id, generation=0)
    assert errors_of(harness.reply(stale)) == [ErrorCode.illegal_generation]
    stranger = harness.commit({("orders", 0): 2}, member_id="who", generation=1)
    assert errors_of(harness.reply(stranger)) == [ErrorCode.unknown_member_id]
    simple = harness.commit({("orders", 0): 2})
    assert errors_of(harness.reply(simple)) == [ErrorCode.unknown_member_id], (
        "no generation: only while the group is Empty"
    )
    unknown_group = harness.commit({("orders", 0): 2}, group_id="none", generation=3)
    assert errors_of(harness.reply(unknown_group)) == [ErrorCode.illegal_generation]
    assert harness.committed() == {T0: 1}


def test_commits_during_a_rebalance(harness: Harness) -> None:
    a, b = harness.stable_group(2)
    harness.join(member_id=a.member_id)  # PreparingRebalance
    during = harness.commit({("orders", 0): 3}, member_id=b.member_id, generation=1)
    assert errors_of(harness.reply(during)) == [OK], "allowed before rejoining"
    harness.join(member_id=b.member_id)  # CompletingRebalance, generation 2
    assert harness.state() == "CompletingRebalance"
    completing = harness.commit({("orders", 0): 4}, member_id=b.member_id, generation=2)
    assert errors_of(harness.reply(completing)) == [ErrorCode.rebalance_in_progress]
    assert harness.committed() == {T0: 3}


def test_commit_counts_as_a_heartbeat(harness: Harness) -> None:
    (a,) = harness.stable_group(1)
    for _ in range(5):
        harness.advance(SESSION_MS - 1)
        harness.commit({("orders", 0): 1}, member_id=a.member_id, generation=1)
    assert harness.state() == "Stable"


def test_group_of_a_simple_consumer_can_then_be_joined(harness: Harness) -> None:
    harness.commit({("orders", 0): 5})
    (_a,) = harness.stable_group(1)
    assert harness.group().protocol_type == "consumer"
    assert harness.committed() == {T0: 5}


def test_replay_restores_offsets_and_group_metadata(harness: Harness) -> None:
    a, b = harness.stable_group(2, instance=None)
    harness.commit(
        {("orders", 0): OffsetToCommit(10, 2, "x"), ("orders", 1): 11},
        member_id=a.member_id,
        generation=1,
    )
    harness.commit({("orders", 0): 12}, member_id=b.member_id, generation=1)
    harness.commit({("t", 0): 1}, group_id="simple")
    harness.delete_offsets("simple", TopicPartition("t", 0))

    replayed = harness.replayed()
    assert replayed.fetch_offsets("g", None) == harness.coordinator.fetch_offsets("g", None)
    assert replayed.fetch_offsets("g", [T0]).offsets == (FetchedOffset(T0, 12, -1, ""),)
    assert replayed.group("simple") is None, "every offset deleted, no metadata: gone"
    group = replayed.group("g")
    assert group is not None
    assert (group.state.value, group.generation_id, group.protocol_name) == ("Stable", 1, "range")
    assert group.leader_id == a.leader
    assert {m: member.assignment for m, member in group.members.items()} == {
        a.member_id: b"assignment-0",
        b.member_id: b"assignment-1",
    }
    assert replayed.describe_groups(["g"]) == harness.coordinator.describe_groups(["g"])


def test_replayed_members_carry_on_or_expire(harness: Harness) -> None:
    a, b = harness.stable_group(2)
    restarted = harness.replayed()
    harness.coordinator = restarted
    harness.advance(SESSION_MS - 1)
    assert harness.heartbeat(a.member_id, 1) is OK, "no rebalance after a coordinator restart"
    harness.advance(1)
    assert b.member_id not in harness.group().members, "b never came back"
    assert harness.state() == "PreparingRebalance"


def test_replay_of_an_empty_group_and_of_static_members(harness: Harness) -> None:
    token = harness.join(instance="i", client_id="s")
    harness.advance(0)
    first: JoinGroupResponse = harness.reply(token)
    harness.sync(first.member_id, 1, {first.member_id: b"a"}, instance="i")
    harness.reply(harness.join(instance="i", client_id="s"))  # a new member id, stored
    replayed = harness.replayed()
    group = replayed.group("g")
    assert group is not None
    assert list(group.static_members) == ["i"]
    assert group.static_members["i"] == harness.group().static_members["i"]

    harness.leave(MemberIdentity("", "i"))
    emptied = harness.replayed().group("g")
    assert emptied is not None
    assert (emptied.state.value, emptied.generation_id, emptied.members) == ("Empty", 2, {})


def test_replay_uses_the_last_value_of_each_key(harness: Harness) -> None:
    """A compacted log (only the last record of each key) loads the same state."""
    harness.stable_group(2)
    harness.commit({("orders", 0): 1}, group_id="s")
    harness.commit({("orders", 0): 2}, group_id="s")
    harness.commit({("orders", 1): 3}, group_id="s")
    harness.delete_offsets("s", T1)
    last: dict[bytes, bytes | None] = {}
    for key, value in harness.log:
        last.pop(key, None)
        last[key] = value
    compacted = [(k, v) for k, v in last.items() if v is not None]
    full = harness.replayed()
    harness.log = compacted
    assert harness.replayed().fetch_offsets("s", None) == full.fetch_offsets("s", None)
    assert harness.replayed().describe_groups(["g"]) == full.describe_groups(["g"])


def test_records_are_kafkas(harness: Harness) -> None:
    (a,) = harness.stable_group(1)
    harness.commit({("orders", 0): 1}, member_id=a.member_id, generation=1)
    keys = [decode_key(k) for k, _ in harness.log]
    assert keys == [GroupMetadataKey("g"), OffsetCommitKey("g", "orders", 0)]
    stored = decode_group_metadata_value(harness.log[0][1] or b"")
    assert stored.protocol_type == "consumer"
    assert stored.members[0].member_id == a.member_id
    assert stored.members[0].subscription == subscription("orders")
    assert stored.members[0].client_host == "/127.0.0.1"


# ------------------------------------------------------------------- DeleteGroups


def test_delete_groups(harness: Harness) -> None:
    harness.commit({("orders", 0): 1, ("orders", 1): 2}, group_id="empty")
    harness.stable_group(1, group_id="busy")
    token = harness.delete_groups("empty", "busy", "missing", "empty")
    assert harness.reply(token).errors == (
        ("empty", OK),
        ("busy", ErrorCode.non_empty_group),
        ("missing", ErrorCode.group_id_not_found),
    )
    assert harness.coordinator.group("empty") is None
    tombstones = [(decode_key(k), v) for k, v in harness.log[-3:]]
    assert tombstones == [
        (OffsetCommitKey("empty", "orders", 0), None),
        (OffsetCommitKey("empty", "orders", 1), None),
        (GroupMetadataKey("empty"), None),
    ]
    replayed = harness.replayed()
    assert replayed.group("empty") is None
    assert replayed.group("busy") is not None


def test_deleting_group_is_dead_until_durable_and_revived_on_failure(harness: Harness) -> None:
    harness.commit({("orders", 0): 1})
    harness.auto_commit = False
    token = harness.delete_groups("g")
    assert harness.state() == "Dead"
    join = harness.join()
    assert harness.reply(join).error is ErrorCode.coordinator_not_available
    commit = harness.commit({("orders", 0): 2})
    assert errors_of(harness.reply(commit)) == [ErrorCode.coordinator_not_available]
    assert harness.committed() == {}
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    assert harness.reply(token).errors == (("g", ErrorCode.not_coordinator),)
    assert harness.state() == "Empty"
    assert harness.committed() == {T0: 1}


def test_delete_covers_commits_still_in_flight(harness: Harness) -> None:
    harness.commit({("orders", 0): 1})
    harness.auto_commit = False
    commit = harness.commit({("orders", 1): 2})
    delete = harness.delete_groups("g")
    harness.commit_appends()
    assert errors_of(harness.reply(commit)) == [OK]
    assert harness.reply(delete).errors == (("g", OK),)
    assert harness.coordinator.group("g") is None
    assert harness.replayed().group("g") is None, "the in-flight commit was tombstoned too"


# ------------------------------------------------------------------- OffsetDelete


def test_offset_delete_on_an_empty_group(harness: Harness) -> None:
    harness.commit({("orders", 0): 1, ("orders", 1): 2})
    token = harness.delete_offsets("g", T0, OTHER)
    response = harness.reply(token)
    assert response.error is OK
    assert response.errors == ((T0, OK), (OTHER, OK))
    assert harness.committed() == {T1: 2}
    assert decode_key(harness.log[-1][0]) == OffsetCommitKey("g", "orders", 0)
    assert harness.log[-1][1] is None
    missing = harness.reply(harness.delete_offsets("missing", T0))
    assert missing.error is ErrorCode.group_id_not_found


def test_offset_delete_refuses_subscribed_topics_of_an_active_group(harness: Harness) -> None:
    (a,) = harness.stable_group(1)  # subscribed to "orders"
    harness.commit({("orders", 0): 1, ("other", 0): 2}, member_id=a.member_id, generation=1)
    response = harness.reply(harness.delete_offsets("g", T0, OTHER))
    assert response.error is OK
    assert response.errors == ((T0, ErrorCode.group_subscribed_to_topic), (OTHER, OK))
    assert harness.committed() == {T0: 1}


def test_offset_delete_of_an_active_non_consumer_group_is_refused(harness: Harness) -> None:
    harness.stable_group(1, protocol_type="connect")
    harness.commit({("orders", 0): 1}, member_id=harness.group().leader_id or "", generation=1)
    response = harness.reply(harness.delete_offsets("g", T0))
    assert response.error is ErrorCode.non_empty_group
    assert harness.committed() == {T0: 1}


def test_unreadable_subscriptions_protect_every_topic(harness: Harness) -> None:
    harness.stable_group(1, protocols=(("range", b"\xff"),))
    member = harness.group().leader_id or ""
    harness.commit({("other", 0): 1}, member_id=member, generation=1)
    response = harness.reply(harness.delete_offsets("g", OTHER))
    assert response.errors == ((OTHER, ErrorCode.group_subscribed_to_topic),)


# ------------------------------------------------------------------------ expiry


def test_offsets_of_an_empty_consumer_group_expire_after_retention(seed: int) -> None:
    config = dataclasses.replace(CONFIG, offsets_retention_ms=DAY_MS)
    harness = Harness(config, seed)
    (a,) = harness.stable_group(1)
    harness.commit({("orders", 0): 1}, member_id=a.member_id, generation=1)
    harness.advance(DAY_MS // 2)  # the member is gone after its session: Empty from here
    assert harness.state() == "Empty"
    harness.advance(DAY_MS // 2)
    assert harness.committed() == {T0: 1}, "retention counts from when the group emptied"
    harness.advance(DAY_MS // 2)
    assert harness.coordinator.group("g") is None
    assert [decode_key(k) for k, v in harness.log[-2:] if v is None] == [
        OffsetCommitKey("g", "orders", 0),
        GroupMetadataKey("g"),
    ]
    assert harness.replayed().group("g") is None


def test_offsets_of_a_simple_consumer_expire_per_commit(seed: int) -> None:
    config = dataclasses.replace(
        CONFIG, offsets_retention_ms=DAY_MS, offsets_retention_check_interval_ms=60_000
    )
    harness = Harness(config, seed)
    harness.commit({("orders", 0): 1})
    harness.advance(DAY_MS // 2)
    harness.commit({("orders", 1): 2})
    harness.advance(DAY_MS // 2)
    assert harness.committed() == {T1: 2}
    harness.advance(DAY_MS // 2)
    assert harness.coordinator.group("g") is None


def test_offsets_with_an_explicit_retention_expire_then(seed: int) -> None:
    config = dataclasses.replace(CONFIG, offsets_retention_check_interval_ms=1_000)
    harness = Harness(config, seed)
    harness.commit({("orders", 0): 1}, retention_ms=5_000)
    harness.advance(4_000)
    assert harness.committed() == {T0: 1}
    harness.advance(1_000)
    assert harness.committed() == {}


def test_stable_consumer_group_expires_only_unsubscribed_topics(seed: int) -> None:
    config = dataclasses.replace(
        CONFIG, offsets_retention_ms=DAY_MS, offsets_retention_check_interval_ms=3_000
    )
    harness = Harness(config, seed)
    (a,) = harness.stable_group(1)
    harness.commit({("orders", 0): 1, ("other", 0): 2}, member_id=a.member_id, generation=1)
    for _ in range(DAY_MS // 3_000 + 1):
        harness.advance(3_000)
        assert harness.heartbeat(a.member_id, 1) is OK
    assert harness.committed() == {T0: 1}


def test_expiry_waits_for_commits_in_flight_and_empty_groups_go(seed: int) -> None:
    config = dataclasses.replace(CONFIG, offsets_retention_ms=1_000)
    harness = Harness(config, seed)
    harness.stable_group(1, group_id="never-committed")
    harness.advance(SESSION_MS)
    assert harness.state("never-committed") == "Empty"
    harness.auto_commit = False
    commit = harness.commit({("orders", 0): 1})
    harness.advance(config.offsets_retention_check_interval_ms)
    harness.commit_appends()
    assert errors_of(harness.reply(commit)) == [OK]
    assert harness.coordinator.group("never-committed") is None
    assert harness.committed() == {T0: 1}, "was in flight during the check"


def test_expiry_is_split_into_bounded_appends(seed: int) -> None:
    config = dataclasses.replace(CONFIG, offsets_retention_ms=1_000)
    harness = Harness(config, seed)
    harness.commit({("t", p): p for p in range(EXPIRY_RECORDS_PER_APPEND_MAX + 10)})
    harness.auto_commit = False
    harness.advance(config.offsets_retention_check_interval_ms)
    assert [len(a.records) for a in harness.held] == [EXPIRY_RECORDS_PER_APPEND_MAX, 11]
    harness.commit_appends()
    assert harness.coordinator.group("g") is None


def test_a_stored_group_listing_a_member_twice_loads(harness: Harness) -> None:
    """Readable but inconsistent bytes from the disk are not a reason to crash."""
    member = MemberMetadataValue("m", "i", "c", "h", 1_000, SESSION_MS, b"", b"")
    value = GroupMetadataValue("consumer", 3, "range", "m", 0, (member, member))
    harness.log = [(encode_key(GroupMetadataKey("g")), encode_group_metadata_value(value))]
    group = harness.replayed().group("g")
    assert group is not None and list(group.members) == ["m"]
