"""Share-group membership (KIP-932) against a real broker, in raw requests:
ShareGroupHeartbeat v1 joins, fences, leaves and expires members and hands out the
assignment by topic id; ShareGroupDescribe v1, ListGroups v5, DescribeGroups and
DeleteGroups see share groups as Kafka shows them; FindCoordinator v6 finds their
coordinators; the group's epoch survives a restart while its members rejoin."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import share_wire
from broker_process import BrokerProcess
from client_helpers import CLIENT_TIMEOUT_S, create_topic, unique_group_id, wait_until
from confluent_kafka import Consumer, TopicPartition
from kafka_wire import KafkaConnection
from kio.schema.delete_groups.v2 import request as delete_groups_v2
from kio.schema.describe_groups.v5 import request as describe_groups_v5
from kio.schema.describe_groups.v6 import request as describe_groups_v6
from kio.schema.find_coordinator.v6 import request as find_coordinator_v6
from kio.schema.incremental_alter_configs.v0 import request as incremental_v0
from kio.schema.join_group.v5 import request as join_group_v5
from kio.schema.list_groups.v5 import request as list_groups_v5
from kio.schema.share_group_describe.v1 import request as share_describe_v1

from sluice.common.errors import ErrorCode

GROUP_KEY_TYPE = 0
SHARE_KEY_TYPE = 2
GROUP_RESOURCE = 32

SHORT_SESSION_SETTINGS = {
    "group.share.min.session.timeout.ms": "500",
    "group.share.session.timeout.ms": "1500",
    "group.share.min.heartbeat.interval.ms": "50",
    "group.share.heartbeat.interval.ms": "100",
}
"""A share session short enough to watch a member expire."""

RETRIED = (
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
)


def request(broker: BrokerProcess, payload: Any) -> Any:
    with KafkaConnection(broker.host, broker.port) as connection:
        return connection.request(payload)


def heartbeat(
    broker: BrokerProcess,
    group: str,
    member_id: str,
    epoch: int,
    topics: tuple[str, ...] | None = None,
) -> Any:
    """One ShareGroupHeartbeat, retried while the coordinator loads (after a start)."""
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while True:
        with KafkaConnection(broker.host, broker.port) as connection:
            response = share_wire.share_heartbeat(connection, group, member_id, epoch, topics)
        if response.error_code not in RETRIED or time.monotonic() > deadline:
            return response


def join(broker: BrokerProcess, group: str, *topics: str) -> tuple[str, Any]:
    member_id = str(uuid.uuid4())
    response = heartbeat(broker, group, member_id, 0, topics)
    assert response.error_code == ErrorCode.none, response
    return member_id, response


def assigned(response: Any) -> dict[uuid.UUID, tuple[int, ...]]:
    assert response.assignment is not None, response
    return {t.topic_id: tuple(sorted(t.partitions)) for t in response.assignment.topic_partitions}


def describe(broker: BrokerProcess, *groups: str) -> tuple[Any, ...]:
    payload = share_describe_v1.ShareGroupDescribeRequest(
        group_ids=groups, include_authorized_operations=False
    )
    return tuple(request(broker, payload).groups)


def topic_id(broker: BrokerProcess, topic: str) -> uuid.UUID:
    with KafkaConnection(broker.host, broker.port) as connection:
        return share_wire.topic_id(connection, topic)


def listed(broker: BrokerProcess, types: tuple[str, ...] = ()) -> dict[str, Any]:
    payload = list_groups_v5.ListGroupsRequest(states_filter=(), types_filter=types)
    return {g.group_id: g for g in request(broker, payload).groups}


def delete(broker: BrokerProcess, group: str) -> ErrorCode:
    payload = delete_groups_v2.DeleteGroupsRequest(groups_names=(group,))
    (result,) = request(broker, payload).results
    return ErrorCode(result.error_code)


@pytest.fixture
def short_sessions(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return broker_factory(SHORT_SESSION_SETTINGS)


# ── membership and assignment ────────────────────────────────────────────────────────


def test_members_join_share_the_partitions_and_leave(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=3)
    group = unique_group_id()
    first, joined = join(broker, group, topic)
    orders = topic_id(broker, topic)
    assert (joined.member_id, joined.member_epoch) == (first, 1)
    assert joined.heartbeat_interval.total_seconds() == 5.0
    assert assigned(joined) == {orders: (0, 1, 2)}

    second, joined_second = join(broker, group, topic)
    assert joined_second.member_epoch == 2
    caught_up = heartbeat(broker, group, first, 1)
    assert caught_up.member_epoch == 2
    parts = assigned(caught_up)[orders] + assigned(joined_second)[orders]
    assert sorted(parts) == [0, 1, 2], "each partition to one member"

    assert heartbeat(broker, group, second, 1).error_code == ErrorCode.fenced_member_epoch
    assert heartbeat(broker, group, "nobody", 2).error_code == ErrorCode.unknown_member_id
    unchanged = heartbeat(broker, group, second, 2)
    assert (unchanged.error_code, unchanged.assignment) == (ErrorCode.none, None)

    (described,) = describe(broker, group)
    assert (described.error_code, described.group_state) == (ErrorCode.none, "Stable")
    assert (described.group_epoch, described.assignment_epoch) == (2, 2)
    assert described.assignor_name == "simple"
    assert described.authorized_operations == -(2**31)
    members = {m.member_id: m for m in described.members}
    assert set(members) == {first, second}
    assert members[first].subscribed_topic_names == (topic,)
    assert members[first].client_host == "/127.0.0.1"
    (topic_partitions,) = members[first].assignment.topic_partitions
    assert (topic_partitions.topic_id, topic_partitions.topic_name) == (orders, topic)

    left = heartbeat(broker, group, second, -1)
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
    assert assigned(heartbeat(broker, group, first, 2)) == {orders: (0, 1, 2)}


def test_more_members_than_partitions_all_get_work(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=1)
    group = unique_group_id()
    answers = [join(broker, group, topic)[1] for _ in range(3)]
    assert all(assigned(a) == {topic_id(broker, topic): (0,)} for a in answers)


def test_a_topic_created_later_is_assigned(broker: BrokerProcess, topic: str) -> None:
    group = unique_group_id()
    member, joined = join(broker, group, topic)
    assert assigned(joined) == {}, "a topic that does not exist is not assigned"
    create_topic(broker.bootstrap, topic, num_partitions=2)
    response = heartbeat(broker, group, member, 1)
    assert response.member_epoch == 2
    assert assigned(response) == {topic_id(broker, topic): (0, 1)}


def test_bad_heartbeats(broker: BrokerProcess, topic: str) -> None:
    group = unique_group_id()
    assert heartbeat(broker, group, "", 0, (topic,)).error_code == ErrorCode.invalid_request
    assert heartbeat(broker, group, "m", 0, None).error_code == ErrorCode.invalid_request
    unknown = heartbeat(broker, group, "m", 4)
    assert unknown.error_code == ErrorCode.unknown_member_id, "clients rejoin on this"


def test_a_group_override_sets_the_heartbeat_interval(broker: BrokerProcess, topic: str) -> None:
    group = unique_group_id()
    alter = incremental_v0.IncrementalAlterConfigsRequest(
        resources=(
            incremental_v0.AlterConfigsResource(
                resource_type=GROUP_RESOURCE,
                resource_name=group,
                configs=(
                    incremental_v0.AlterableConfig(
                        name="share.heartbeat.interval.ms", config_operation=0, value="7000"
                    ),
                ),
            ),
        ),
        validate_only=False,
    )
    (result,) = request(broker, alter).responses
    assert result.error_code == ErrorCode.none
    _, joined = join(broker, group, topic)
    assert joined.heartbeat_interval.total_seconds() == 7.0


def test_a_silent_member_expires(short_sessions: BrokerProcess, topic: str) -> None:
    broker = short_sessions
    create_topic(broker.bootstrap, topic, num_partitions=2)
    group = unique_group_id()
    alive, _ = join(broker, group, topic)
    silent, _ = join(broker, group, topic)
    assert heartbeat(broker, group, alive, 1).member_epoch == 2
    epoch = 2

    def silent_member_gone() -> bool:
        nonlocal epoch
        response = heartbeat(broker, group, alive, epoch)  # the live member keeps beating
        assert response.error_code == ErrorCode.none, response
        epoch = response.member_epoch
        time.sleep(0.05)  # the heartbeat interval: paces the live member, waits on nothing
        (described,) = describe(broker, group)
        return {m.member_id for m in described.members} == {alive}

    wait_until(silent_member_gone, "the silent member expired")
    assert heartbeat(broker, group, silent, 2).error_code == ErrorCode.unknown_member_id
    assert heartbeat(broker, group, alive, epoch).error_code == ErrorCode.none
    (described,) = describe(broker, group)
    assert described.group_epoch == 3
    (member,) = described.members
    assert [tuple(t.partitions) for t in member.assignment.topic_partitions] == [(0, 1)]


# ── one id, one group type; listing, describing, deleting ────────────────────────────


def test_share_and_classic_groups_keep_to_their_type(broker: BrokerProcess, topic: str) -> None:
    share_group = unique_group_id()
    join(broker, share_group, topic)
    classic_group = unique_group_id()
    ten_seconds = datetime.timedelta(seconds=10)
    classic_join = join_group_v5.JoinGroupRequest(
        group_id=share_group,
        session_timeout=ten_seconds,
        rebalance_timeout=ten_seconds,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(join_group_v5.JoinGroupRequestProtocol(name="range", metadata=b""),),
    )
    assert request(broker, classic_join).error_code == ErrorCode.group_id_not_found

    # A classic group (made by a simple consumer's commit) is not a share group.
    create_topic(broker.bootstrap, topic + "-c")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": classic_group})
    try:
        consumer.commit(offsets=[TopicPartition(topic + "-c", 0, 1)], asynchronous=False)
    finally:
        consumer.close()
    refused = heartbeat(broker, classic_group, "m", 0, (topic,))
    assert refused.error_code == ErrorCode.group_id_not_found
    assert refused.error_message == f"Group {classic_group} is not a share group."
    (not_share,) = describe(broker, classic_group)
    assert not_share.error_code == ErrorCode.group_id_not_found

    (classic_view,) = request(
        broker,
        describe_groups_v5.DescribeGroupsRequest(
            groups=(share_group,), include_authorized_operations=False
        ),
    ).groups
    assert (classic_view.error_code, classic_view.group_state) == (ErrorCode.none, "Dead")
    (classic_view_v6,) = request(
        broker,
        describe_groups_v6.DescribeGroupsRequest(
            groups=(share_group,), include_authorized_operations=False
        ),
    ).groups
    assert classic_view_v6.error_code == ErrorCode.group_id_not_found
    assert classic_view_v6.error_message == f"Group {share_group} is not a classic group."

    groups = listed(broker)
    assert (groups[share_group].group_type, groups[share_group].protocol_type) == (
        "share",
        "share",
    )
    assert groups[share_group].group_state == "Stable"
    assert groups[classic_group].group_type == "classic"
    assert share_group in listed(broker, ("Share",))
    assert classic_group not in listed(broker, ("share",))
    assert share_group not in listed(broker, ("classic",))


def test_delete_an_empty_share_group(broker: BrokerProcess, topic: str) -> None:
    group = unique_group_id()
    member, _ = join(broker, group, topic)
    assert delete(broker, group) == ErrorCode.non_empty_group
    heartbeat(broker, group, member, -1)
    assert listed(broker)[group].group_state == "Empty"
    assert delete(broker, group) == ErrorCode.none
    assert group not in listed(broker)
    (gone,) = describe(broker, group)
    assert gone.error_code == ErrorCode.group_id_not_found
    assert delete(broker, group) == ErrorCode.group_id_not_found


def test_find_coordinator_for_share_groups_and_share_keys(
    broker: BrokerProcess, topic: str
) -> None:
    group = unique_group_id()

    def find(key_type: int, key: str) -> Any:
        payload = find_coordinator_v6.FindCoordinatorRequest(
            key_type=find_coordinator_v6.i8(key_type), coordinator_keys=(key,)
        )
        (coordinator,) = request(broker, payload).coordinators
        return coordinator

    found = find(GROUP_KEY_TYPE, group)
    assert (found.error_code, found.node_id, found.port) == (ErrorCode.none, 0, broker.port)
    malformed = find(SHARE_KEY_TYPE, "not-a-share-key")
    assert malformed.error_code == ErrorCode.invalid_request
    share_key = find(SHARE_KEY_TYPE, f"{group}:{uuid.uuid4()}:0")
    # The share state topic is made by the share coordinator on first use; until then
    # there is no coordinator to name.
    assert share_key.error_code in (ErrorCode.none, ErrorCode.coordinator_not_available)


# ── restart ───────────────────────────────────────────────────────────────────────────


def test_the_group_survives_a_restart_and_members_rejoin(
    broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, topic, num_partitions=2)
    group = unique_group_id()
    member, _ = join(broker, group, topic)
    join(broker, group, topic)
    broker.restart()

    assert heartbeat(broker, group, member, 2).error_code == ErrorCode.unknown_member_id
    (described,) = describe(broker, group)
    assert (described.group_state, described.group_epoch, described.members) == ("Empty", 2, ())
    rejoined = heartbeat(broker, group, member, 0, (topic,))
    assert rejoined.member_epoch == 3
    assert assigned(rejoined) == {topic_id(broker, topic): (0, 1)}
