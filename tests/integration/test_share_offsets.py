"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets on a
real broker: start offsets and lag as members accept records, resets refused while the
group has members and taking effect for the next fetch once it is empty, and deletion."""

from __future__ import annotations

import uuid
from typing import Any

from broker_process import BrokerProcess
from client_helpers import create_topic, produce_and_flush, producer_config
from confluent_kafka import Producer
from kafka_wire import KafkaConnection
from kio.schema.alter_share_group_offsets.v0 import request as alter_v0
from kio.schema.delete_share_group_offsets.v0 import request as delete_v0
from kio.schema.describe_share_group_offsets.v1 import request as describe_v1
from share_wire import ShareMember, set_group_configs, share_heartbeat, topic_id

from sluice.common.errors import ErrorCode

ACCEPT = 1


def describe(connection: KafkaConnection, group: str, topic: str | None) -> Any:
    topics = (
        None
        if topic is None
        else (describe_v1.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=(0,)),)
    )
    response = connection.request(
        describe_v1.DescribeShareGroupOffsetsRequest(
            groups=(
                describe_v1.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=topics),
            )
        )
    )
    (answer,) = response.groups
    return answer


def start_and_lag(connection: KafkaConnection, group: str, topic: str) -> tuple[int, int]:
    answer = describe(connection, group, None)
    assert answer.error_code == 0, answer
    (described,) = [t for t in answer.topics if t.topic_name == topic]
    (partition,) = described.partitions
    assert partition.error_code == 0, partition
    return int(partition.start_offset), int(partition.lag)


def alter(connection: KafkaConnection, group: str, topic: str, start: int) -> Any:
    return connection.request(
        alter_v0.AlterShareGroupOffsetsRequest(
            group_id=group,
            topics=(
                alter_v0.AlterShareGroupOffsetsRequestTopic(
                    topic_name=topic,
                    partitions=(
                        alter_v0.AlterShareGroupOffsetsRequestPartition(
                            partition_index=0, start_offset=start
                        ),
                    ),
                ),
            ),
        )
    )


def test_describe_alter_and_delete_share_group_offsets(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    produce_and_flush(
        Producer(producer_config(broker.bootstrap)),
        topic,
        ({"value": b"%d" % i} for i in range(10)),
    )
    group = f"g-{uuid.uuid4().hex[:8]}"
    with KafkaConnection(broker.host, broker.port) as conn:
        set_group_configs(conn, group, {"share.auto.offset.reset": "earliest"})
        member_id = str(uuid.uuid4())
        assert share_heartbeat(conn, group, member_id, 0, (topic,)).error_code == 0
        member = ShareMember(conn, group, topic_id(conn, topic), member_id=member_id)
        assert len(member.fetch()) == 10
        member.acknowledge([(0, 3, [ACCEPT]), (5, 5, [ACCEPT])])
        # Start offset 4; unfinished: 4 and 6-9 (5 is accepted).
        assert start_and_lag(conn, group, topic) == (4, 5)

        refused = alter(conn, group, topic, 8)
        assert refused.error_code == ErrorCode.non_empty_group

        member.close()
        assert share_heartbeat(conn, group, member_id, -1).error_code == 0
        response = alter(conn, group, topic, 8)
        assert response.error_code == 0
        assert response.responses[0].partitions[0].error_code == 0
        assert start_and_lag(conn, group, topic) == (8, 2)
        # The next member starts at the new offset.
        again = ShareMember(conn, group, topic_id(conn, topic))
        assert [d.offset for d in again.fetch()] == [8, 9]
        again.close()

        deleted = conn.request(
            delete_v0.DeleteShareGroupOffsetsRequest(
                group_id=group,
                topics=(delete_v0.DeleteShareGroupOffsetsRequestTopic(topic_name=topic),),
            )
        )
        assert deleted.error_code == 0 and deleted.responses[0].error_code == 0
        assert start_and_lag(conn, group, topic) == (-1, -1)

        unknown = describe(conn, f"nobody-{uuid.uuid4().hex[:6]}", topic)
        assert unknown.error_code == ErrorCode.group_id_not_found
