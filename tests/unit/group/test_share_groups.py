"""Share-group membership in the group coordinator's shard: joining, leaving, epochs,
fencing, session expiry, the assignment it hands out, and what survives a reload."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from group_helpers import START_MS, Harness

from sluice.common.errors import ErrorCode
from sluice.group.api import (
    DeleteGroupsResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from sluice.group.config import GroupConfig
from sluice.group.coordinator import GroupCoordinator
from sluice.group.records import (
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    decode_key,
    decode_share_group_metadata_value,
    encode_key,
    encode_share_group_metadata_value,
)
from sluice.group.share_group import ShareTopic

SESSION_MS = 45_000
HEARTBEAT_MS = 5_000

ORDERS = ShareTopic(uuid.UUID(int=0xA1), 3)
PAYMENTS = ShareTopic(uuid.UUID(int=0xB2), 1)
TOPICS: dict[str, ShareTopic] = {"orders": ORDERS, "payments": PAYMENTS}


def heartbeat(
    harness: Harness,
    member_id: str,
    epoch: int,
    topics: tuple[str, ...] | None = None,
    *,
    group_id: str = "s",
    image: Mapping[str, ShareTopic] = TOPICS,
    configs: Mapping[str, str] | None = None,
    rack: str | None = None,
) -> ShareGroupHeartbeatResponse:
    token = harness.token()
    request = ShareGroupHeartbeatRequest(
        group_id=group_id,
        member_id=member_id,
        member_epoch=epoch,
        rack_id=rack,
        subscribed_topic_names=topics,
        client_id=f"client-{member_id}",
        client_host="/127.0.0.1",
        topics=image,
        group_configs=configs or {},
    )
    harness.apply(harness.coordinator.share_group_heartbeat(harness.now_ms, token, request))
    response = harness.reply(token)
    assert isinstance(response, ShareGroupHeartbeatResponse), response
    return response


def assigned(response: ShareGroupHeartbeatResponse) -> dict[str, tuple[int, ...]]:
    assert response.assignment is not None
    return {t.topic_name: t.partitions for t in response.assignment}


def join(harness: Harness, member_id: str, *topics: str, **kwargs: Any) -> Any:
    response = heartbeat(harness, member_id, 0, topics or ("orders",), **kwargs)
    assert response.error is ErrorCode.none, response
    return response


def test_a_member_joins_and_gets_every_partition(harness: Harness) -> None:
    response = join(harness, "m1")
    assert response.member_id == "m1"
    assert response.member_epoch == 1
    assert response.heartbeat_interval_ms == HEARTBEAT_MS
    assert assigned(response) == {"orders": (0, 1, 2)}
    assert response.assignment is not None
    assert response.assignment[0].topic_id == ORDERS.topic_id
    group = harness.coordinator.share_group("s")
    assert group is not None
    assert (group.state.value, group.group_epoch, group.assignment_epoch) == ("Stable", 1, 1)


def test_a_heartbeat_that_changes_nothing_keeps_the_epoch_and_sends_no_assignment(
    harness: Harness,
) -> None:
    join(harness, "m1")
    response = heartbeat(harness, "m1", 1)
    assert (response.error, response.member_epoch, response.assignment) == (ErrorCode.none, 1, None)
    assert not harness.held and len(harness.log) == 1, "nothing more written"


def test_a_second_member_bumps_the_epoch_and_the_first_catches_up(harness: Harness) -> None:
    join(harness, "m1")
    second = join(harness, "m2")
    assert second.member_epoch == 2
    first = heartbeat(harness, "m1", 1)
    assert first.member_epoch == 2
    together = sorted(assigned(first)["orders"] + assigned(second)["orders"])
    assert together == [0, 1, 2], "every partition to exactly one member"
    assert {len(assigned(first)["orders"]), len(assigned(second)["orders"])} == {1, 2}


def test_more_members_than_partitions_share_them(harness: Harness) -> None:
    for member in ("m1", "m2", "m3"):
        join(harness, member, "payments")
    answers = [heartbeat(harness, m, epoch) for m, epoch in (("m1", 1), ("m2", 2), ("m3", 3))]
    assert [a.member_epoch for a in answers] == [3, 3, 3]
    assert assigned(answers[0]) == assigned(answers[1]) == {"payments": (0,)}
    assert answers[2].assignment is None, "m3 got its partition when it joined"


def test_a_stale_or_future_epoch_is_fenced(harness: Harness) -> None:
    join(harness, "m1")
    join(harness, "m2")
    assert heartbeat(harness, "m2", 1).error is ErrorCode.fenced_member_epoch
    assert heartbeat(harness, "m2", 5).error is ErrorCode.fenced_member_epoch
    assert heartbeat(harness, "m2", 2).error is ErrorCode.none


def test_unknown_members_and_bad_requests(harness: Harness) -> None:
    assert heartbeat(harness, "ghost", 3, group_id="nothing").error is ErrorCode.unknown_member_id
    join(harness, "m1")
    assert heartbeat(harness, "ghost", 1).error is ErrorCode.unknown_member_id
    assert heartbeat(harness, "ghost", -1).error is ErrorCode.unknown_member_id
    assert heartbeat(harness, "", 0, ("orders",)).error is ErrorCode.invalid_request
    assert heartbeat(harness, "m9", 0, None).error is ErrorCode.invalid_request
    assert heartbeat(harness, "m9", 0, ()).error is ErrorCode.invalid_request
    assert heartbeat(harness, "m1", -2).error is ErrorCode.invalid_request
    assert heartbeat(harness, "m1", 0, ("orders",), group_id="").error is ErrorCode.invalid_request


def test_a_classic_group_id_is_not_a_share_group_and_back(harness: Harness) -> None:
    harness.stable_group(1, group_id="classic")
    response = heartbeat(harness, "m1", 0, ("orders",), group_id="classic")
    assert response.error is ErrorCode.group_id_not_found
    assert response.error_message == "Group classic is not a share group."
    join(harness, "m1")
    classic_join = harness.reply(harness.join("s"))
    assert classic_join.error is ErrorCode.group_id_not_found
    commit = harness.reply(harness.commit({("orders", 0): 5}, group_id="s"))
    assert commit.errors[0][1] is ErrorCode.group_id_not_found
    (description,) = harness.coordinator.describe_share_groups(["classic"])
    assert description.error is ErrorCode.group_id_not_found
    assert description.error_message == "Group classic is not a share group."
    (classic,) = harness.coordinator.describe_groups(["s"])
    assert (classic.error, classic.state) == (ErrorCode.none, "Dead"), "no classic group"
    assert classic.not_found_message == "Group s is not a classic group."


def test_leaving_bumps_the_epoch_and_empties_the_group(harness: Harness) -> None:
    join(harness, "m1")
    join(harness, "m2")
    left = heartbeat(harness, "m2", -1)
    assert (left.error, left.member_epoch) == (ErrorCode.none, -1)
    remaining = heartbeat(harness, "m1", 1)
    assert remaining.member_epoch == 3
    assert assigned(remaining) == {"orders": (0, 1, 2)}
    heartbeat(harness, "m1", -1)
    group = harness.coordinator.share_group("s")
    assert group is not None and group.state.value == "Empty" and group.group_epoch == 4


def test_a_member_that_stops_heartbeating_expires(harness: Harness) -> None:
    join(harness, "m1")
    join(harness, "m2")
    harness.advance(SESSION_MS - 1)
    heartbeat(harness, "m1", 1)
    harness.advance(1)
    group = harness.coordinator.share_group("s")
    assert group is not None and set(group.members) == {"m1"}, "m2 expired on time"
    assert group.group_epoch == 3
    harness.advance(SESSION_MS - 2)
    assert set(group.members) == {"m1"}
    harness.advance(1)
    assert not group.members and group.state.value == "Empty"
    assert heartbeat(harness, "m1", 2).error is ErrorCode.unknown_member_id


def test_group_configs_override_the_session_and_heartbeat_interval(harness: Harness) -> None:
    configs = {"share.session.timeout.ms": "50000", "share.heartbeat.interval.ms": "7000"}
    response = join(harness, "m1", configs=configs)
    assert response.heartbeat_interval_ms == 7_000
    harness.advance(SESSION_MS)
    group = harness.coordinator.share_group("s")
    assert group is not None and "m1" in group.members
    harness.advance(50_000 - SESSION_MS)
    assert "m1" not in group.members


def test_the_broker_settings_are_the_defaults() -> None:
    config = GroupConfig(
        share_session_timeout_ms=1_000,
        share_session_timeout_ms_min=1_000,
        share_heartbeat_interval_ms=100,
        share_heartbeat_interval_ms_min=100,
    )
    harness = Harness(config)
    assert join(harness, "m1").heartbeat_interval_ms == 100
    harness.advance(1_000)
    group = harness.coordinator.share_group("s")
    assert group is not None and not group.members


def test_a_subscription_change_and_a_new_topic_reassign(harness: Harness) -> None:
    join(harness, "m1", "orders")
    changed = heartbeat(harness, "m1", 1, ("orders", "payments"))
    assert changed.member_epoch == 2
    assert assigned(changed) == {"orders": (0, 1, 2), "payments": (0,)}
    grown = dict(TOPICS, orders=ShareTopic(ORDERS.topic_id, 5))
    after = heartbeat(harness, "m1", 2, image=grown)
    assert after.member_epoch == 3
    assert assigned(after)["orders"] == (0, 1, 2, 3, 4)
    missing = heartbeat(harness, "m1", 3, ("later",), image=grown)
    assert assigned(missing) == {}, "a topic that does not exist is not assigned"
    created = dict(grown, later=ShareTopic(uuid.UUID(int=7), 2))
    assert assigned(heartbeat(harness, "m1", 4, ("later",), image=created)) == {"later": (0, 1)}


def test_the_assignment_is_stable_when_a_member_joins(harness: Harness) -> None:
    image = {"big": ShareTopic(uuid.UUID(int=9), 12)}
    join(harness, "a", "big", image=image)
    join(harness, "b", "big", image=image)
    before = {
        m: assigned(heartbeat(harness, m, epoch, ("big",), image=image))["big"]
        for m, epoch in (("a", 1), ("b", 2))
    }
    join(harness, "c", "big", image=image)
    after = {m: assigned(heartbeat(harness, m, 2, image=image))["big"] for m in ("a", "b")}
    for member in ("a", "b"):
        assert set(after[member]) <= set(before[member]), "only what must move moves"
        assert len(after[member]) == 4


def test_a_rejoin_with_epoch_zero_gets_the_assignment_again(harness: Harness) -> None:
    join(harness, "m1")
    again = heartbeat(harness, "m1", 0, ("orders",))
    assert (again.error, again.member_epoch) == (ErrorCode.none, 1)
    assert assigned(again) == {"orders": (0, 1, 2)}


def test_the_group_size_is_bounded() -> None:
    harness = Harness(GroupConfig(share_group_size_max=2))
    join(harness, "m1")
    join(harness, "m2")
    assert heartbeat(harness, "m3", 0, ("orders",)).error is ErrorCode.group_max_size_reached


def test_an_answer_waits_for_the_record_and_a_failed_write_is_reported(harness: Harness) -> None:
    harness.auto_commit = False
    token = harness.token()
    request = ShareGroupHeartbeatRequest(
        "s", "m1", 0, None, ("orders",), "client", "/127.0.0.1", TOPICS, {}
    )
    harness.apply(harness.coordinator.share_group_heartbeat(harness.now_ms, token, request))
    assert harness.reply(token) is None, "answered only once the epoch is in the log"
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    assert harness.reply(token).error is ErrorCode.not_coordinator


def test_describe(harness: Harness) -> None:
    join(harness, "m1", "orders", "payments", rack="rack-a")
    (description,) = harness.coordinator.describe_share_groups(["s"])
    assert (description.error, description.state) == (ErrorCode.none, "Stable")
    assert (description.group_epoch, description.assignment_epoch) == (1, 1)
    assert description.assignor_name == "simple"
    (member,) = description.members
    assert (member.member_id, member.rack_id, member.member_epoch) == ("m1", "rack-a", 1)
    assert (member.client_id, member.client_host) == ("client-m1", "/127.0.0.1")
    assert member.subscribed_topic_names == ("orders", "payments")
    assert [(t.topic_name, t.partitions) for t in member.assignment] == [
        ("orders", (0, 1, 2)),
        ("payments", (0,)),
    ]
    unknown, empty = harness.coordinator.describe_share_groups(["nothing", ""])
    assert unknown.error is ErrorCode.group_id_not_found
    assert unknown.error_message == "Group nothing not found."
    assert empty.error is ErrorCode.invalid_group_id


def test_list_groups_lists_share_groups(harness: Harness) -> None:
    harness.stable_group(1, group_id="classic")
    join(harness, "m1")
    listed = {g.group_id: g for g in harness.coordinator.list_groups()}
    assert (listed["s"].group_type, listed["s"].protocol_type, listed["s"].state) == (
        "share",
        "share",
        "Stable",
    )
    assert listed["classic"].group_type == "classic"
    assert [g.group_id for g in harness.coordinator.list_groups(["empty"])] == []
    heartbeat(harness, "m1", -1)
    assert [g.group_id for g in harness.coordinator.list_groups(["Empty"])] == ["s"]


def test_delete_only_an_empty_share_group_and_name_its_topics(harness: Harness) -> None:
    join(harness, "m1", "orders", "payments")
    heartbeat(harness, "m1", 1, ("orders",))
    token = harness.delete_groups("s")
    assert harness.reply(token).errors == (("s", ErrorCode.non_empty_group),)
    heartbeat(harness, "m1", -1)
    token = harness.delete_groups("s")
    response = harness.reply(token)
    assert isinstance(response, DeleteGroupsResponse)
    assert response.errors == (("s", ErrorCode.none),)
    assert response.share_topics == (("s", ("orders", "payments")),), "every topic ever"
    assert harness.coordinator.share_group("s") is None
    key, value = harness.log[-1]
    assert decode_key(key) == ShareGroupMetadataKey("s") and value is None
    assert harness.replayed().share_group("s") is None, "the tombstone is the last word"


def test_a_failed_delete_leaves_the_group(harness: Harness) -> None:
    join(harness, "m1")
    heartbeat(harness, "m1", -1)
    harness.auto_commit = False
    token = harness.delete_groups("s")
    (described,) = harness.coordinator.describe_share_groups(["s"])
    assert described.error is ErrorCode.group_id_not_found, "Dead while being deleted"
    harness.commit_appends(ErrorCode.not_enough_replicas)
    assert harness.reply(token).errors == (("s", ErrorCode.coordinator_not_available),)
    group = harness.coordinator.share_group("s")
    assert group is not None and group.state.value == "Empty"


def test_replay_restores_the_epoch_and_topics_but_no_members(harness: Harness) -> None:
    join(harness, "m1", "orders")
    join(harness, "m2", "payments")
    reloaded = harness.replayed()
    group = reloaded.share_group("s")
    assert group is not None
    assert (group.state.value, group.group_epoch) == ("Empty", 2)
    assert group.subscribed_topic_names_ever == {"orders", "payments"}
    harness.coordinator = reloaded
    assert heartbeat(harness, "m1", 2).error is ErrorCode.unknown_member_id
    rejoined = join(harness, "m1", "orders")
    assert rejoined.member_epoch == 3, "epochs never go back"


def test_the_record_round_trips_and_skips_unknown_tags() -> None:
    value = ShareGroupMetadataValue(7, ("a", "ü" * 3))
    encoded = encode_share_group_metadata_value(value)
    assert decode_share_group_metadata_value(encoded) == value
    # Kafka's own value: version 0, epoch 7, a metadata hash, no tagged fields.
    kafka = bytes.fromhex("0000" + "00000007" + "0123456789abcdef" + "00")
    assert decode_share_group_metadata_value(kafka) == ShareGroupMetadataValue(7, ())
    # An unknown tagged field (tag 5, two bytes) before the topics is skipped.
    tagged = encoded[:14] + b"\x02\x05\x02\xab\xcd" + encoded[15:]
    assert decode_share_group_metadata_value(tagged) == value
    assert encode_key(ShareGroupMetadataKey("s"))[:2] == b"\x00\x0b"


def test_a_reloaded_group_has_no_session_timers() -> None:
    harness = Harness()
    join(harness, "m1")
    coordinator = GroupCoordinator(harness.config)
    for key, value in harness.log:
        coordinator.replay(key, value)
    coordinator.load_completed(START_MS)
    retention_check_ms = START_MS + harness.config.offsets_retention_check_interval_ms
    assert coordinator.next_deadline_ms() == retention_check_ms, "no member to expire"
    share = coordinator.share_group("s")
    assert share is not None and not share.members
