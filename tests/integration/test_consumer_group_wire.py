"""The KIP-848 consumer group protocol on the wire, against a real broker process:
ConsumerGroupHeartbeat v1 joins members and splits a topic's partitions with revocation
first, ConsumerGroupDescribe v1 shows members with their epochs and assignments, a
member leaves; OffsetCommit and OffsetFetch v9 check the member's epoch, older
OffsetCommits from members are UNSUPPORTED_VERSION, TxnOffsetCommit checks the epoch
too; the APIs stay in ApiVersions (with the group.version feature) only when the broker
enables the protocol, and are refused UNSUPPORTED_VERSION otherwise; one group id names
one kind of group."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from broker_process import BrokerProcess, BrokerStartError
from client_helpers import CLIENT_TIMEOUT_S, admin_client, create_topic, unique_group_id, wait_until
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from consumer_group_wire import (
    CLASSIC_ONLY,
    CONSUMER_PROTOCOL,
    assigned,
    commit_offsets,
    describe,
    heartbeat,
    heartbeat_request,
)
from kafka_wire import KafkaConnection
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.consumer_group_heartbeat.v0 import request as heartbeat_v0
from kio.schema.delete_groups.v2 import request as delete_groups_v2
from kio.schema.describe_groups.v5 import request as describe_groups_v5
from kio.schema.describe_groups.v6 import request as describe_groups_v6
from kio.schema.init_producer_id.v4 import request as init_producer_id_v4
from kio.schema.join_group.v5 import request as join_group_v5
from kio.schema.list_groups.v5 import request as list_groups_v5
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.offset_commit.v8 import request as offset_commit_v8
from kio.schema.offset_fetch.v9 import request as offset_fetch_v9
from kio.schema.txn_offset_commit.v5 import request as txn_offset_commit_v5
from test_transaction_version2 import find_coordinator

from sluice.common.errors import ErrorCode

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69


@pytest.fixture(scope="module")
def broker(consumer_protocol_broker: BrokerProcess) -> BrokerProcess:
    return consumer_protocol_broker


def beat(broker: BrokerProcess, request: Any) -> Any:
    return heartbeat(broker.host, broker.port, request)


def topic_id(broker: BrokerProcess, topic: str) -> uuid.UUID:
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(
            metadata_v12.MetadataRequest(
                topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=topic),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
    (found,) = response.topics
    assert found.error_code == 0 and found.topic_id is not None, found
    return found.topic_id


def test_members_join_split_the_partitions_revoking_first_and_leave(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=4)
    orders = topic_id(broker, topic)
    group = unique_group_id()
    first, second = str(uuid.uuid4()), str(uuid.uuid4())

    joined = beat(broker, heartbeat_request(group, first, 0, (topic,)))
    assert (joined.error_code, joined.member_id, joined.member_epoch) == (0, first, 1), joined
    assert joined.heartbeat_interval.total_seconds() == 0.5, "the broker's setting"
    assert assigned(joined) == {orders: (0, 1, 2, 3)}

    # A second member joins: the group epoch moves to 2, and it gets nothing until the
    # first member has given up half of its partitions.
    joined_second = beat(broker, heartbeat_request(group, second, 0, (topic,)))
    assert (joined_second.error_code, joined_second.member_epoch) == (0, 2), joined_second
    assert assigned(joined_second) == {}
    revoke = beat(broker, heartbeat_request(group, first, 1, owned={orders: (0, 1, 2, 3)}))
    assert revoke.error_code == 0, revoke
    assert revoke.member_epoch == 1, "an epoch does not move before the revocation"
    kept = assigned(revoke)[orders]
    assert len(kept) == 2

    (reconciling,) = describe(broker.host, broker.port, group)
    assert reconciling.group_state == "Reconciling"
    revoked = beat(broker, heartbeat_request(group, first, 1, owned={orders: kept}))
    assert (revoked.error_code, revoked.member_epoch) == (0, 2), revoked
    released = beat(broker, heartbeat_request(group, second, 2, owned={}))
    assert released.error_code == 0, released
    given = assigned(released)[orders]
    assert sorted(kept + given) == [0, 1, 2, 3], "each partition to one member"

    (described,) = describe(broker.host, broker.port, group)
    assert (described.error_code, described.group_state) == (0, "Stable"), described
    assert (described.group_epoch, described.assignment_epoch) == (2, 2)
    assert described.assignor_name == "uniform"
    members = {m.member_id: m for m in described.members}
    assert set(members) == {first, second}
    for member_id, partitions in ((first, kept), (second, given)):
        member = members[member_id]
        assert member.member_epoch == 2
        assert member.member_type == 1
        assert member.subscribed_topic_names == (topic,)
        (owned_now,) = member.assignment.topic_partitions
        assert (owned_now.topic_id, owned_now.topic_name) == (orders, topic)
        assert tuple(sorted(owned_now.partitions)) == partitions
        (target,) = member.target_assignment.topic_partitions
        assert tuple(sorted(target.partitions)) == partitions

    left = beat(broker, heartbeat_request(group, second, -1))
    assert (left.error_code, left.member_epoch) == (0, -1), left
    takes_all = beat(broker, heartbeat_request(group, first, 2, owned={orders: kept}))
    assert takes_all.member_epoch == 3
    assert assigned(takes_all) == {orders: (0, 1, 2, 3)}
    (after,) = describe(broker.host, broker.port, group)
    assert [m.member_id for m in after.members] == [first]


def test_the_heartbeat_refuses_what_kafka_refuses(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=1)
    group = unique_group_id()
    member = str(uuid.uuid4())
    unknown = beat(broker, heartbeat_request(group, member, 3))
    assert unknown.error_code == ErrorCode.unknown_member_id
    assert beat(broker, heartbeat_request(group, member, 0, (topic,))).error_code == 0
    fenced = beat(broker, heartbeat_request(group, member, 7))
    assert fenced.error_code == ErrorCode.fenced_member_epoch
    missing = beat(broker, heartbeat_request(group, "", 0, (topic,)))
    assert missing.error_code == ErrorCode.invalid_request
    assert missing.error_message


def test_v0_lets_the_coordinator_choose_the_member_id(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=2)
    request = heartbeat_v0.ConsumerGroupHeartbeatRequest(
        group_id=unique_group_id(),
        member_id="",
        member_epoch=heartbeat_v0.i32(0),
        instance_id=None,
        rack_id=None,
        rebalance_timeout=heartbeat_request("g", "m", 0).rebalance_timeout,
        subscribed_topic_names=(topic,),
        server_assignor=None,
        topic_partitions=(),
    )
    joined = beat(broker, request)
    assert joined.error_code == 0, joined
    assert joined.member_id and joined.member_epoch == 1


def test_describe_answers_unknown_groups_as_not_found(broker: BrokerProcess) -> None:
    (unknown,) = describe(broker.host, broker.port, unique_group_id())
    assert unknown.error_code == ErrorCode.group_id_not_found


def test_a_rebalancing_classic_group_keeps_its_id(broker: BrokerProcess) -> None:
    group = unique_group_id()
    timeout = heartbeat_request("g", "m", 0).rebalance_timeout

    def join(member_id: str) -> Any:
        return join_group_v5.JoinGroupRequest(
            group_id=group,
            session_timeout=timeout,
            rebalance_timeout=timeout,
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(join_group_v5.JoinGroupRequestProtocol(name="range", metadata=b""),),
        )

    def state() -> str:
        with KafkaConnection(broker.host, broker.port) as connection:
            response = connection.request(
                describe_groups_v5.DescribeGroupsRequest(
                    groups=(group,), include_authorized_operations=False
                )
            )
        return str(response.groups[0].group_state)

    with KafkaConnection(broker.host, broker.port) as joining:
        required = joining.request(join(""))
        assert required.error_code == ErrorCode.member_id_required, required
        joining.send(join(required.member_id))  # answered once the rebalance ends
        wait_until(lambda: state() == "PreparingRebalance", "the member to be in the group")
        answer = beat(broker, heartbeat_request(group, str(uuid.uuid4()), 0, ("t",)))
    assert answer.error_code == ErrorCode.group_id_not_found
    assert answer.error_message == f"Group {group} is not a consumer group."


def test_join_group_of_another_protocol_type_to_a_consumer_group_is_inconsistent(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=1)
    group = unique_group_id()
    assert beat(broker, heartbeat_request(group, str(uuid.uuid4()), 0, (topic,))).error_code == 0
    timeout = heartbeat_request("g", "m", 0).rebalance_timeout
    with KafkaConnection(broker.host, broker.port) as connection:
        refused = connection.request(
            join_group_v5.JoinGroupRequest(
                group_id=group,
                session_timeout=timeout,
                rebalance_timeout=timeout,
                member_id="",
                group_instance_id=None,
                protocol_type="connect",
                protocols=(join_group_v5.JoinGroupRequestProtocol(name="range", metadata=b""),),
            )
        )
    assert refused.error_code == ErrorCode.inconsistent_group_protocol


def api_versions(broker: BrokerProcess) -> Any:
    with KafkaConnection(broker.host, broker.port) as connection:
        return connection.request(
            api_versions_v3.ApiVersionsRequest(
                client_software_name="tests", client_software_version="1"
            )
        )


def test_the_protocol_is_advertised_with_the_group_version_feature(broker: BrokerProcess) -> None:
    response = api_versions(broker)
    listed = {int(api.api_key): (api.min_version, api.max_version) for api in response.api_keys}
    assert listed[CONSUMER_GROUP_HEARTBEAT] == (0, 1)
    assert listed[CONSUMER_GROUP_DESCRIBE] == (0, 1)
    finalized = {
        f.name: (f.min_version_level, f.max_version_level) for f in response.finalized_features
    }
    assert finalized["group.version"] == (1, 1)


def test_without_the_setting_the_protocol_is_neither_listed_nor_served(
    broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    classic_only = broker_factory(CLASSIC_ONLY)
    response = api_versions(classic_only)
    listed = {int(api.api_key) for api in response.api_keys}
    assert CONSUMER_GROUP_HEARTBEAT not in listed
    assert CONSUMER_GROUP_DESCRIBE not in listed
    assert "group.version" not in {f.name for f in response.finalized_features}
    join = heartbeat_request(unique_group_id(), str(uuid.uuid4()), 0, (topic,))
    refused = beat(classic_only, join)
    assert refused.error_code == ErrorCode.unsupported_version
    assert "group.coordinator.rebalance.protocols" in refused.error_message
    (described,) = describe(classic_only.host, classic_only.port, "any-group")
    assert described.error_code == ErrorCode.unsupported_version


def commit(broker: BrokerProcess, group: str, member_id: str, epoch: int, topic: str) -> int:
    """OffsetCommit v9 of offset 7 for partition 0; the partition's error code."""
    return commit_offsets(broker.host, broker.port, group, member_id, epoch, topic, {0: 7})[0]


def fetch(
    broker: BrokerProcess, group: str, member_id: str | None, epoch: int, topic: str
) -> tuple[int, int | None]:
    """OffsetFetch v9 of partition 0: the group's error code and the offset."""
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(
            offset_fetch_v9.OffsetFetchRequest(
                groups=(
                    offset_fetch_v9.OffsetFetchRequestGroup(
                        group_id=group,
                        member_id=member_id,
                        member_epoch=offset_fetch_v9.i32(epoch),
                        topics=(
                            offset_fetch_v9.OffsetFetchRequestTopics(
                                name=topic, partition_indexes=(offset_fetch_v9.i32(0),)
                            ),
                        ),
                    ),
                ),
                require_stable=False,
            )
        )
    (answer,) = response.groups
    offsets = [int(p.committed_offset) for t in answer.topics for p in t.partitions]
    return int(answer.error_code), (offsets[0] if offsets else None)


def test_offsets_are_committed_and_fetched_by_member_epoch(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=1)
    group = unique_group_id()
    member = str(uuid.uuid4())
    assert beat(broker, heartbeat_request(group, member, 0, (topic,))).member_epoch == 1

    assert commit(broker, group, member, 1, topic) == ErrorCode.none
    assert commit(broker, group, member, 0, topic) == ErrorCode.stale_member_epoch
    assert commit(broker, group, "nobody", 1, topic) == ErrorCode.unknown_member_id
    assert commit(broker, group, "", -1, topic) == ErrorCode.unknown_member_id, (
        "without an epoch only while the group has no members"
    )
    assert fetch(broker, group, member, 1, topic) == (ErrorCode.none, 7)
    assert fetch(broker, group, None, -1, topic) == (ErrorCode.none, 7), "an administrator"
    assert fetch(broker, group, member, 2, topic)[0] == ErrorCode.stale_member_epoch
    assert fetch(broker, group, "nobody", 1, topic)[0] == ErrorCode.unknown_member_id

    assert beat(broker, heartbeat_request(group, member, -1)).error_code == 0
    assert commit(broker, group, "", -1, topic) == ErrorCode.none, "the group is empty"


def commit_v8(broker: BrokerProcess, group: str, member_id: str, epoch: int, topic: str) -> int:
    """OffsetCommit v8 (the last before member epochs) of partition 0; its error code."""
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(
            offset_commit_v8.OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=offset_commit_v8.i32(epoch),
                member_id=member_id,
                group_instance_id=None,
                topics=(
                    offset_commit_v8.OffsetCommitRequestTopic(
                        name=topic,
                        partitions=(
                            offset_commit_v8.OffsetCommitRequestPartition(
                                partition_index=offset_commit_v8.i32(0),
                                committed_offset=offset_commit_v8.i64(3),
                                committed_leader_epoch=offset_commit_v8.i32(-1),
                                committed_metadata=None,
                            ),
                        ),
                    ),
                ),
            )
        )
    return int(response.topics[0].partitions[0].error_code)


def test_a_member_committing_below_v9_is_unsupported(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=1)
    group = unique_group_id()
    member = str(uuid.uuid4())
    assert beat(broker, heartbeat_request(group, member, 0, (topic,))).member_epoch == 1
    assert commit_v8(broker, group, member, 1, topic) == ErrorCode.unsupported_version
    assert commit_v8(broker, group, "nobody", 1, topic) == ErrorCode.unknown_member_id
    assert fetch(broker, group, None, -1, topic) == (ErrorCode.none, -1), "nothing committed"
    assert beat(broker, heartbeat_request(group, member, -1)).error_code == 0
    assert commit_v8(broker, group, "", -1, topic) == ErrorCode.none, "the group is empty"


def test_a_transactional_commit_checks_the_members_epoch(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=1)
    group, transactional_id = unique_group_id(), f"epochs-{topic}"
    member = str(uuid.uuid4())
    assert beat(broker, heartbeat_request(group, member, 0, (topic,))).member_epoch == 1
    with KafkaConnection(broker.host, broker.port) as connection:
        find_coordinator(connection, transactional_id)
        init = connection.request(
            init_producer_id_v4.InitProducerIdRequest(
                transactional_id=transactional_id,
                transaction_timeout=datetime.timedelta(seconds=60),
            )
        )
        assert init.error_code == ErrorCode.none, init

        def commit_in_transaction(member_id: str, epoch: int) -> int:
            answer = connection.request(
                txn_offset_commit_v5.TxnOffsetCommitRequest(
                    transactional_id=transactional_id,
                    group_id=group,
                    producer_id=init.producer_id,
                    producer_epoch=init.producer_epoch,
                    generation_id=txn_offset_commit_v5.i32(epoch),
                    member_id=member_id,
                    group_instance_id=None,
                    topics=(
                        txn_offset_commit_v5.TxnOffsetCommitRequestTopic(
                            name=topic,
                            partitions=(
                                txn_offset_commit_v5.TxnOffsetCommitRequestPartition(
                                    partition_index=0, committed_offset=7, committed_metadata=""
                                ),
                            ),
                        ),
                    ),
                )
            )
            return int(answer.topics[0].partitions[0].error_code)

        assert commit_in_transaction(member, 2) == ErrorCode.illegal_generation
        assert commit_in_transaction("nobody", 1) == ErrorCode.unknown_member_id
        assert commit_in_transaction("", -1) == ErrorCode.unknown_member_id
        assert commit_in_transaction(member, 1) == ErrorCode.none


def test_groups_apis_list_describe_and_delete_consumer_groups(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=1)
    group = unique_group_id()
    member = str(uuid.uuid4())
    assert beat(broker, heartbeat_request(group, member, 0, (topic,))).member_epoch == 1
    assert commit(broker, group, member, 1, topic) == ErrorCode.none

    with KafkaConnection(broker.host, broker.port) as connection:
        listed = connection.request(
            list_groups_v5.ListGroupsRequest(states_filter=(), types_filter=("consumer",))
        )
        (found,) = [g for g in listed.groups if g.group_id == group]
        assert (found.protocol_type, found.group_state, found.group_type) == (
            "consumer",
            "Stable",
            "consumer",
        )
        classic = connection.request(
            describe_groups_v6.DescribeGroupsRequest(
                groups=(group,), include_authorized_operations=False
            )
        )
        (described,) = classic.groups
        assert (described.error_code, described.group_state) == (
            ErrorCode.group_id_not_found,
            "Dead",
        ), "DescribeGroups describes classic groups only (v6 says so)"
        deletion = delete_groups_v2.DeleteGroupsRequest(groups_names=(group,))
        (busy,) = connection.request(deletion).results
        assert busy.error_code == ErrorCode.non_empty_group

        assert beat(broker, heartbeat_request(group, member, -1)).error_code == 0
        (deleted,) = connection.request(deletion).results
        assert deleted.error_code == ErrorCode.none
    (gone,) = describe(broker.host, broker.port, group)
    assert gone.error_code == ErrorCode.group_id_not_found
    assert fetch(broker, group, None, -1, topic) == (ErrorCode.none, -1), "offsets deleted"


SHORT_SESSION_SETTINGS = {
    "group.consumer.min.session.timeout.ms": "500",
    "group.consumer.session.timeout.ms": "1500",
    "group.consumer.min.heartbeat.interval.ms": "50",
    "group.consumer.heartbeat.interval.ms": "100",
}
"""A consumer session short enough to watch a member expire."""


def test_a_silent_member_is_removed_when_its_session_ends(
    broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    broker = broker_factory({**SHORT_SESSION_SETTINGS, **CONSUMER_PROTOCOL})
    create_topic(broker.bootstrap, topic, num_partitions=2)
    orders = topic_id(broker, topic)
    group = unique_group_id()
    silent, alive = str(uuid.uuid4()), str(uuid.uuid4())
    joined = beat(broker, heartbeat_request(group, silent, 0, (topic,)))
    assert joined.heartbeat_interval.total_seconds() == 0.1, "the broker's setting"
    beat(broker, heartbeat_request(group, alive, 0, (topic,)))
    epoch = 2
    owned: dict[uuid.UUID, tuple[int, ...]] = {}

    def silent_gone() -> bool:
        nonlocal epoch, owned
        answer = beat(broker, heartbeat_request(group, alive, epoch, owned=owned))
        assert answer.error_code == 0, answer
        epoch = answer.member_epoch
        if answer.assignment is not None:
            owned = assigned(answer)
        (described,) = describe(broker.host, broker.port, group)
        return [m.member_id for m in described.members] == [alive]

    wait_until(silent_gone, "the silent member's session to end")
    wait_until(lambda: silent_gone() and owned == {orders: (0, 1)}, "its partitions to move")
    assert beat(broker, heartbeat_request(group, silent, 1)).error_code == (
        ErrorCode.unknown_member_id
    )


def test_the_assignors_are_the_brokers_setting(
    broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    broker = broker_factory({"group.consumer.assignors": "range", **CONSUMER_PROTOCOL})
    create_topic(broker.bootstrap, topic, num_partitions=2)
    group = unique_group_id()
    member = str(uuid.uuid4())
    joining = heartbeat_request(group, member, 0, (topic,))
    uniform = dataclasses.replace(joining, server_assignor="uniform")
    refused = beat(broker, uniform)
    assert refused.error_code == ErrorCode.unsupported_assignor, refused
    assert "range" in refused.error_message
    assert beat(broker, joining).error_code == 0
    (described,) = describe(broker.host, broker.port, group)
    assert described.assignor_name == "range", "the first configured is the default"


def test_an_unknown_assignor_stops_the_broker_with_a_message_naming_it(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(
        {"group.consumer.assignors": "uniform,sticky", **CONSUMER_PROTOCOL}, start=False
    )
    with pytest.raises(BrokerStartError, match=r"group\.consumer\.assignors.*'sticky'"):
        broker.start(timeout_s=30)
    assert broker.last_exit_code not in (None, 0)


LOW_BOUNDS_SETTINGS = {
    **CONSUMER_PROTOCOL,
    "group.consumer.min.session.timeout.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "50",
}
"""The broker's settings stay Kafka's defaults (45 s session, 5 s interval); groups may
choose shorter ones."""


def test_a_groups_overrides_set_its_members_interval_and_session(
    broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    broker = broker_factory(LOW_BOUNDS_SETTINGS)
    create_topic(broker.bootstrap, topic, num_partitions=2)
    group = unique_group_id()
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "consumer.session.timeout.ms", "1500", incremental_operation=AlterConfigOpType.SET
            ),
            ConfigEntry(
                "consumer.heartbeat.interval.ms", "100", incremental_operation=AlterConfigOpType.SET
            ),
        ],
    )
    admin = admin_client(broker.bootstrap)
    admin.incremental_alter_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)
    silent, alive = str(uuid.uuid4()), str(uuid.uuid4())
    joined = beat(broker, heartbeat_request(group, silent, 0, (topic,)))
    assert joined.heartbeat_interval.total_seconds() == 0.1, "the group's setting"
    epoch = beat(broker, heartbeat_request(group, alive, 0, (topic,))).member_epoch

    def silent_gone() -> bool:
        nonlocal epoch
        answer = beat(broker, heartbeat_request(group, alive, epoch, owned=None))
        assert answer.error_code == 0, answer
        epoch = answer.member_epoch
        (described,) = describe(broker.host, broker.port, group)
        return [m.member_id for m in described.members] == [alive]

    # Within the broker's 45 s session only if the group's 1.5 s one applies.
    wait_until(silent_gone, "the silent member's 1.5 s session to end", timeout_s=30)
