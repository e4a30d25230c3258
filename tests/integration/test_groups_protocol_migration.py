"""The online upgrade and downgrade between a classic group and a consumer group
(KIP-848) with real clients, after confluent-kafka-python's
``test_consumer_upgrade_downgrade``: a classic consumer (confluent-kafka 2.16,
``group.protocol=classic``) holds the group; a consumer of the new protocol
(``group.protocol=consumer``) joins it and the group becomes a consumer group
(AdminClient.describe_consumer_groups' ``type``), the partitions split between the two;
the new one leaves and the group is a classic group again, the classic consumer taking
every partition back. Records produced in each phase are all read and the committed
offsets stay with the group id throughout. A classic group caught in the middle of a
rebalance is upgraded too, the JoinGroup it kept waiting told to join again; a static
consumer restarted with the classic protocol in its own place downgrades the group. A mixed
group survives a restart of its coordinator: its classic member is loaded back as one
(ConsumerGroupDescribe's member type)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
from broker_process import BrokerProcess
from client_helpers import (
    CLIENT_TIMEOUT_S,
    admin_client,
    consumer_config,
    create_topic,
    produce_and_flush,
    producer_config,
    unique_group_id,
    unique_topic_name,
    wait_until,
)
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from consumer_group_wire import describe
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka_wire import KafkaConnection
from kio.schema.join_group.v5 import request as join_group_v5
from kio.schema.leave_group.v3 import request as leave_group_v3

from sluice.common.errors import ErrorCode

PARTITIONS = 6
CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1
RECORDS_PER_PHASE = 60
POLL_S = 0.1
GROUP_TIMEOUT_S = 60.0
"""A rebalance through both protocols, on a loaded machine."""


@pytest.fixture(scope="module")
def broker(consumer_protocol_broker: BrokerProcess) -> BrokerProcess:
    return consumer_protocol_broker


class Reader:
    """Consumers of one group polled in turn; every record they read is kept, and each
    commits what it read before anything else happens to it."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.consumers: list[Consumer] = []
        self.read: set[bytes] = set()

    def add(self, config: dict[str, Any]) -> Consumer:
        consumer = Consumer(config)
        consumer.subscribe([self.topic])
        self.consumers.append(consumer)
        return consumer

    def poll(self) -> None:
        for consumer in self.consumers:
            message = consumer.poll(POLL_S)
            if message is None:
                continue
            assert message.error() is None, message.error()
            value = message.value()
            assert value is not None
            self.read.add(value)
            consumer.commit(message, asynchronous=False)

    def until(self, condition: Callable[[], bool], what: str) -> None:
        def polled() -> bool:
            self.poll()
            return condition()

        wait_until(polled, what, GROUP_TIMEOUT_S)

    def assignments(self) -> list[set[int]]:
        return [{tp.partition for tp in c.assignment()} for c in self.consumers]

    def split_evenly(self) -> bool:
        """Every partition assigned once, each consumer holding its even share."""
        assignments = self.assignments()
        every = [p for assigned in assignments for p in assigned]
        share = PARTITIONS // len(assignments)
        return sorted(every) == list(range(PARTITIONS)) and all(
            len(assigned) == share for assigned in assignments
        )

    def close(self, consumer: Consumer) -> None:
        self.consumers.remove(consumer)
        consumer.close()


def group_type(broker: BrokerProcess, group: str) -> ConsumerGroupType:
    admin = admin_client(broker.bootstrap)  # kept until the answer arrives
    described = admin.describe_consumer_groups([group])[group]
    result: ConsumerGroupType = described.result(timeout=CLIENT_TIMEOUT_S).type
    return result


def produce(broker: BrokerProcess, topic: str, phase: str) -> set[bytes]:
    producer = Producer(producer_config(broker.bootstrap))
    values = [f"{phase}-{i}".encode() for i in range(RECORDS_PER_PHASE)]
    produce_and_flush(
        producer, topic, ({"value": v, "partition": i % PARTITIONS} for i, v in enumerate(values))
    )
    return set(values)


def committed(broker: BrokerProcess, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer(consumer_config(broker.bootstrap, **{"group.id": group}))
    try:
        partitions = [ConfluentTopicPartition(topic, p) for p in range(PARTITIONS)]
        return {
            tp.partition: tp.offset
            for tp in consumer.committed(partitions, timeout=CLIENT_TIMEOUT_S)
        }
    finally:
        consumer.close()


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_a_classic_group_is_upgraded_and_downgraded_with_real_consumers(
    broker: BrokerProcess, strategy: str
) -> None:
    topic = unique_topic_name(f"migrate-{strategy}")
    group = unique_group_id()
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    common = consumer_config(
        broker.bootstrap,
        **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False},
    )
    classic_config = {
        **common,
        "group.protocol": "classic",
        "partition.assignment.strategy": strategy,
    }
    consumer_protocol_config = {**common, "group.protocol": "consumer"}
    reader = Reader(topic)
    produced: set[bytes] = set()
    try:
        classic = reader.add(classic_config)
        reader.until(reader.split_evenly, "the classic consumer holds every partition")
        assert group_type(broker, group) is ConsumerGroupType.CLASSIC
        produced |= produce(broker, topic, "classic")
        reader.until(lambda: produced <= reader.read, "the classic consumer reads them all")

        upgraded = reader.add(consumer_protocol_config)
        reader.until(reader.split_evenly, "the two consumers share the partitions")
        assert group_type(broker, group) is ConsumerGroupType.CONSUMER
        produced |= produce(broker, topic, "mixed")
        reader.until(lambda: produced <= reader.read, "the two consumers read them all")

        reader.close(upgraded)
        reader.until(reader.split_evenly, "the classic consumer takes every partition back")
        assert group_type(broker, group) is ConsumerGroupType.CLASSIC
        produced |= produce(broker, topic, "downgraded")
        reader.until(lambda: produced <= reader.read, "the classic consumer reads the rest")
        assert classic in reader.consumers
    finally:
        for consumer in list(reader.consumers):
            reader.close(consumer)
    ends = {p: 3 * RECORDS_PER_PHASE // PARTITIONS for p in range(PARTITIONS)}
    assert committed(broker, group, topic) == ends, "every record's offset is committed"


def group_state(broker: BrokerProcess, group: str) -> ConsumerGroupState:
    admin = admin_client(broker.bootstrap)  # kept until the answer arrives
    described = admin.describe_consumer_groups([group])[group]
    result: ConsumerGroupState = described.result(timeout=CLIENT_TIMEOUT_S).state
    return result


WAITING_MEMBER_TIMEOUT = datetime.timedelta(minutes=5)
"""The session and rebalance timeouts of the raw classic member: it outlasts the test."""


def test_a_classic_group_is_upgraded_in_the_middle_of_a_rebalance(broker: BrokerProcess) -> None:
    """A classic consumer that stops polling cannot rejoin, so the rebalance a second
    classic member (raw JoinGroup, kept waiting) starts stays open; a consumer of the new
    protocol joining then converts the group at once and the waiting JoinGroup is told
    REBALANCE_IN_PROGRESS (Kafka 4.3's rule; the conversion used to wait for the
    rebalance to end, here its rebalance timeout)."""
    topic = unique_topic_name("migrate-rebalancing")
    group = unique_group_id()
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    common = consumer_config(
        broker.bootstrap,
        **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False},
    )
    subscription = RangePartitionAssignor.metadata([topic]).encode()

    def join(member_id: str) -> Any:
        return join_group_v5.JoinGroupRequest(
            group_id=group,
            session_timeout=WAITING_MEMBER_TIMEOUT,
            rebalance_timeout=WAITING_MEMBER_TIMEOUT,
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(
                join_group_v5.JoinGroupRequestProtocol(name="range", metadata=subscription),
            ),
        )

    reader = Reader(topic)
    produced: set[bytes] = set()
    try:
        reader.add(
            {**common, "group.protocol": "classic", "partition.assignment.strategy": "range"}
        )
        reader.until(reader.split_evenly, "the classic consumer holds every partition")
        with KafkaConnection(broker.host, broker.port) as waiting:
            required = waiting.request(join(""))
            assert required.error_code == ErrorCode.member_id_required, required
            member_id = required.member_id
            parked = waiting.send(join(member_id))  # the classic consumer is not polled now
            wait_until(
                lambda: group_state(broker, group) is ConsumerGroupState.PREPARING_REBALANCING,
                "the classic group to rebalance",
                GROUP_TIMEOUT_S,
            )
            newcomer = Consumer({**common, "group.protocol": "consumer"})
            newcomer.subscribe([topic])
            reader.consumers.append(newcomer)
            told = waiting.receive(join(member_id), parked)
            assert told.error_code == ErrorCode.rebalance_in_progress, told
            assert group_type(broker, group) is ConsumerGroupType.CONSUMER
            left = waiting.request(
                leave_group_v3.LeaveGroupRequest(
                    group_id=group,
                    members=(
                        leave_group_v3.MemberIdentity(member_id=member_id, group_instance_id=None),
                    ),
                )
            )
            assert left.error_code == ErrorCode.none, left
        reader.until(reader.split_evenly, "the two consumers share the partitions")
        assert member_types(broker, group) == [CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE]
        produced |= produce(broker, topic, "upgraded")
        reader.until(lambda: produced <= reader.read, "the two consumers read them all")
    finally:
        for consumer in list(reader.consumers):
            reader.close(consumer)
    ends = {p: RECORDS_PER_PHASE // PARTITIONS for p in range(PARTITIONS)}
    assert committed(broker, group, topic) == ends, "every record's offset is committed"


def test_a_static_classic_consumer_replacing_the_last_new_one_downgrades_the_group(
    broker: BrokerProcess,
) -> None:
    """A static consumer of the new protocol is closed (it keeps its seat: a static
    member's leave) and restarted with group.protocol=classic under the same
    group.instance.id: it takes its own place and the group becomes classic at once,
    the consumer holding every partition and reading on from the committed offsets."""
    topic = unique_topic_name("migrate-static")
    group = unique_group_id()
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    common = consumer_config(
        broker.bootstrap,
        **{
            "group.id": group,
            "group.instance.id": "instance-1",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        },
    )
    reader = Reader(topic)
    produced: set[bytes] = set()
    try:
        first = reader.add({**common, "group.protocol": "consumer"})
        reader.until(reader.split_evenly, "the consumer holds every partition")
        assert member_types(broker, group) == [CONSUMER_MEMBER_TYPE]
        produced |= produce(broker, topic, "consumer")
        reader.until(lambda: produced <= reader.read, "the consumer reads them all")
        reader.close(first)
        assert member_types(broker, group) == [CONSUMER_MEMBER_TYPE], "its seat is kept"

        reader.add(
            {**common, "group.protocol": "classic", "partition.assignment.strategy": "range"}
        )
        reader.until(reader.split_evenly, "the classic consumer holds every partition")
        assert group_type(broker, group) is ConsumerGroupType.CLASSIC
        produced |= produce(broker, topic, "classic")
        reader.until(lambda: produced <= reader.read, "the classic consumer reads the rest")
    finally:
        for consumer in list(reader.consumers):
            reader.close(consumer)
    ends = {p: 2 * RECORDS_PER_PHASE // PARTITIONS for p in range(PARTITIONS)}
    assert committed(broker, group, topic) == ends, "every record's offset is committed"


def member_types(broker: BrokerProcess, group: str) -> list[int]:
    """ConsumerGroupDescribe v1's member types of the group (empty if not found)."""
    (described,) = describe(broker.host, broker.port, group)
    return sorted(int(m.member_type) for m in described.members)


def test_a_mixed_group_survives_a_restart_of_its_coordinator(broker: BrokerProcess) -> None:
    topic = unique_topic_name("migrate-restart")
    group = unique_group_id()
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    common = consumer_config(
        broker.bootstrap,
        **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False},
    )
    reader = Reader(topic)
    produced: set[bytes] = set()
    try:
        reader.add({**common, "group.protocol": "classic"})
        reader.until(reader.split_evenly, "the classic consumer holds every partition")
        upgraded = reader.add({**common, "group.protocol": "consumer"})
        reader.until(reader.split_evenly, "the two consumers share the partitions")
        assert member_types(broker, group) == [CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE]
        produced |= produce(broker, topic, "before")
        reader.until(lambda: produced <= reader.read, "the two consumers read them all")

        broker.restart()
        wait_until(
            lambda: member_types(broker, group) == [CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE],
            "the mixed group to be loaded back",
            GROUP_TIMEOUT_S,
        )
        produced |= produce(broker, topic, "after")
        reader.until(lambda: produced <= reader.read, "the two consumers read on")
        reader.until(reader.split_evenly, "the two consumers still share the partitions")

        reader.close(upgraded)
        reader.until(reader.split_evenly, "the classic consumer takes every partition back")
        assert group_type(broker, group) is ConsumerGroupType.CLASSIC
    finally:
        for consumer in list(reader.consumers):
            reader.close(consumer)
    ends = {p: 2 * RECORDS_PER_PHASE // PARTITIONS for p in range(PARTITIONS)}
    assert committed(broker, group, topic) == ends, "every record's offset is committed"
