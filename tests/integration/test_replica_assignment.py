"""Explicit replica assignments in CreateTopics and CreatePartitions: accepted when they
name live brokers consistently, refused as Kafka's controller refuses them otherwise
(INVALID_REPLICA_ASSIGNMENT, or INVALID_REQUEST for an assignment beside counts), with
confluent-kafka, kafka-python and raw requests for what clients will not send."""

from __future__ import annotations

import datetime

import pytest
from client_helpers import CLIENT_TIMEOUT_S, admin_client, create_topic
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewPartitions, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions as KafkaPythonNewPartitions
from kafka.admin import NewTopic as KafkaPythonNewTopic
from kafka.errors import InvalidReplicationAssignmentError
from kafka_wire import KafkaConnection, metadata_request
from kio.schema.create_partitions.v1 import request as create_partitions_v1
from kio.schema.create_topics.v4 import request as create_topics_v4

NONE = 0
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_REQUEST = 42
UNKNOWN_TOPIC_OR_PARTITION = 3


def _replicas_by_partition(broker, topic: str) -> dict[int, list[int]]:
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(metadata_request([topic], allow_auto_topic_creation=False))
    (described,) = response.topics
    if described.error_code != NONE:
        return {}
    return {int(p.partition_index): [int(r) for r in p.replica_nodes] for p in described.partitions}


def _create_raw(
    broker,
    name: str,
    assignments: list[tuple[int, list[int]]],
    *,
    num_partitions: int = -1,
    replication_factor: int = -1,
    validate_only: bool = False,
):
    request = create_topics_v4.CreateTopicsRequest(
        topics=(
            create_topics_v4.CreatableTopic(
                name=name,
                num_partitions=num_partitions,
                replication_factor=replication_factor,
                assignments=tuple(
                    create_topics_v4.CreatableReplicaAssignment(
                        partition_index=index, broker_ids=tuple(brokers)
                    )
                    for index, brokers in assignments
                ),
                configs=(),
            ),
        ),
        timeout=datetime.timedelta(seconds=10),
        validate_only=validate_only,
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        (result,) = connection.request(request).topics
    return result


def _add_partitions_raw(broker, name: str, count: int, assignments: list[list[int]] | None):
    request = create_partitions_v1.CreatePartitionsRequest(
        topics=(
            create_partitions_v1.CreatePartitionsTopic(
                name=name,
                count=count,
                assignments=None
                if assignments is None
                else tuple(
                    create_partitions_v1.CreatePartitionsAssignment(broker_ids=tuple(b))
                    for b in assignments
                ),
            ),
        ),
        timeout=datetime.timedelta(seconds=10),
        validate_only=False,
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        (result,) = connection.request(request).results
    return result


def test_confluent_creates_a_topic_with_an_explicit_assignment(broker, topic):
    admin = admin_client(broker.bootstrap)
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=3, replica_assignment=[[0], [0], [0]])]
    )
    futures[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert _replicas_by_partition(broker, topic) == {0: [0], 1: [0], 2: [0]}


def test_confluent_grows_a_topic_with_an_explicit_assignment(broker, topic):
    create_topic(broker.bootstrap, topic, num_partitions=4)
    admin = admin_client(broker.bootstrap)
    futures = admin.create_partitions([NewPartitions(topic, 6, replica_assignment=[[0], [0]])])
    futures[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert _replicas_by_partition(broker, topic) == {i: [0] for i in range(6)}


def test_confluent_assignment_naming_an_unknown_broker_is_refused(broker, topic):
    create_topic(broker.bootstrap, topic, num_partitions=1)
    admin = admin_client(broker.bootstrap)
    futures = admin.create_partitions([NewPartitions(topic, 2, replica_assignment=[[7]])])
    with pytest.raises(KafkaException) as raised:
        futures[topic].result(timeout=CLIENT_TIMEOUT_S)
    error = raised.value.args[0]
    assert error.code() == INVALID_REPLICA_ASSIGNMENT, error
    assert "broker 7" in error.str()
    assert len(_replicas_by_partition(broker, topic)) == 1


def test_kafka_python_creates_and_grows_with_explicit_assignments(broker, topic):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000)
    try:
        admin.create_topics(
            [KafkaPythonNewTopic(topic, -1, -1, replica_assignments={0: [0], 1: [0]})]
        )
        admin.create_partitions({topic: KafkaPythonNewPartitions(3, [[0]])})
        assert _replicas_by_partition(broker, topic) == {0: [0], 1: [0], 2: [0]}
        with pytest.raises(InvalidReplicationAssignmentError):
            admin.create_partitions({topic: KafkaPythonNewPartitions(5, [[0]])})
    finally:
        admin.close()
    assert len(_replicas_by_partition(broker, topic)) == 3


@pytest.mark.parametrize(
    ("assignments", "num_partitions", "replication_factor", "error_code", "message"),
    [
        ([(0, [0])], 1, -1, INVALID_REQUEST, "numPartitions was not set to -1"),
        ([(0, [0])], -1, 1, INVALID_REQUEST, "replication factor was not set to -1"),
        ([(0, [0])], 1, 1, INVALID_REQUEST, "replication factor was not set to -1"),
        ([(0, [0]), (0, [0])], -1, -1, INVALID_REPLICA_ASSIGNMENT, "multiple manual"),
        ([(0, [0, 0])], -1, -1, INVALID_REPLICA_ASSIGNMENT, "broker 0 more than once"),
        ([(0, [])], -1, -1, INVALID_REPLICA_ASSIGNMENT, "empty replica list"),
        ([(0, [7])], -1, -1, INVALID_REPLICA_ASSIGNMENT, "broker 7, but no such broker"),
        ([(1, [0])], -1, -1, INVALID_REPLICA_ASSIGNMENT, "consecutive 0-based"),
        ([(0, [0]), (2, [0])], -1, -1, INVALID_REPLICA_ASSIGNMENT, "consecutive 0-based"),
    ],
    ids=[
        "with-partition-count",
        "with-replication-factor",
        "with-both",
        "partition-twice",
        "broker-twice",
        "no-replicas",
        "unknown-broker",
        "not-from-zero",
        "gap",
    ],
)
def test_bad_create_topics_assignments_are_refused_and_create_nothing(
    broker, topic, assignments, num_partitions, replication_factor, error_code, message
):
    result = _create_raw(
        broker,
        topic,
        assignments,
        num_partitions=num_partitions,
        replication_factor=replication_factor,
    )
    assert (int(result.error_code), message in (result.error_message or "")) == (
        error_code,
        True,
    ), result
    assert _replicas_by_partition(broker, topic) == {}


def test_validate_only_checks_an_assignment_and_creates_nothing(broker, topic):
    result = _create_raw(broker, topic, [(0, [0]), (1, [0])], validate_only=True)
    assert int(result.error_code) == NONE, result
    assert _replicas_by_partition(broker, topic) == {}


@pytest.mark.parametrize(
    ("count", "assignments", "message"),
    [
        (4, [[0]], "add 3 additional partition(s), but only 1 assignment(s)"),
        (2, [[0], [0]], "add 1 additional partition(s), but only 2 assignment(s)"),
        (2, [], "add 1 additional partition(s), but only 0 assignment(s)"),
        (2, [[0, 0]], "broker 0 more than once"),
        (2, [[]], "empty replica list"),
    ],
    ids=["too-few", "too-many", "empty-list", "broker-twice", "no-replicas"],
)
def test_bad_create_partitions_assignments_are_refused(broker, topic, count, assignments, message):
    create_topic(broker.bootstrap, topic, num_partitions=1)
    result = _add_partitions_raw(broker, topic, count, assignments)
    assert int(result.error_code) == INVALID_REPLICA_ASSIGNMENT, result
    assert message in (result.error_message or ""), result
    assert len(_replicas_by_partition(broker, topic)) == 1
