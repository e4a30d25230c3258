"""The admin APIs tools call on any cluster, against one real broker: DescribeCluster,
DescribeLogDirs, AlterReplicaLogDirs, DescribeQuorum, ListConfigResources,
DescribeProducers, ElectLeaders, AlterPartitionReassignments and
ListPartitionReassignments.

Driven through confluent-kafka's and kafka-python's admin clients where they expose the
call, and with raw requests for every advertised version and for inputs no client sends.
The answers are Kafka's for a single node: every leader is already the preferred one,
the only valid replica set is this broker, and nothing is ever being reassigned.
"""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path
from typing import Any

import pytest
from client_helpers import admin_client
from confluent_kafka import ElectionType, KafkaError, TopicCollection, TopicPartition
from confluent_kafka.admin import AclOperation
from kafka import KafkaAdminClient, KafkaProducer, TopicPartitionReplica
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.errors import (
    InvalidReplicationAssignmentError,
    LogDirNotFoundError,
    NoError,
    NoReassignmentInProgressError,
    ReplicaNotAvailableError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from kafka_wire import KafkaConnection, advertised_versions, create_topics_request
from kio.index import load_payload_module
from kio.static.constants import EntityType

ALTER_REPLICA_LOG_DIRS = 34
DESCRIBE_LOG_DIRS = 35
DESCRIBE_QUORUM = 55
ELECT_LEADERS = 43
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
DESCRIBE_CLUSTER = 60
DESCRIBE_PRODUCERS = 61
LIST_CONFIG_RESOURCES = 74

EXPECTED_RANGES = {
    ALTER_REPLICA_LOG_DIRS: (1, 2),
    DESCRIBE_LOG_DIRS: (1, 4),
    DESCRIBE_QUORUM: (0, 2),
    ELECT_LEADERS: (0, 2),
    ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    LIST_PARTITION_REASSIGNMENTS: (0, 0),
    DESCRIBE_CLUSTER: (0, 2),
    DESCRIBE_PRODUCERS: (0, 0),
    LIST_CONFIG_RESOURCES: (0, 1),
}

ELECTION_NOT_NEEDED = 84
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUEST = 42
INVALID_REPLICA_ASSIGNMENT = 39
NO_REASSIGNMENT_IN_PROGRESS = 85
NOT_LEADER_OR_FOLLOWER = 6
INVALID_TOPIC_EXCEPTION = 17
MISMATCHED_ENDPOINT_TYPE = 114
UNSUPPORTED_ENDPOINT_TYPE = 115
UNSUPPORTED_VERSION = 35
REPLICA_NOT_AVAILABLE = 9
LOG_DIR_NOT_FOUND = 57

CLUSTER_OPERATIONS = {
    AclOperation.CREATE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
    AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE,
}
"""What Kafka without an authorizer grants on the cluster."""

TOPIC_OPERATIONS = {
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
}
"""What Kafka without an authorizer grants on a topic."""


def request_class(api_key: int, version: int, name: str) -> Any:
    """kio's request class (or nested request entity) ``name`` of one version."""
    return getattr(load_payload_module(api_key, version, EntityType.request), name)


def create_topic(broker: Any, name: str, partitions: int = 1) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(create_topics_request(name, partitions))
    assert int(response.topics[0].error_code) == 0, response


@pytest.fixture
def kafka_python_admin(broker: Any) -> Any:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000)
    try:
        yield admin
    finally:
        admin.close()


def test_the_admin_apis_are_advertised_at_kafka_4_ranges(broker: Any) -> None:
    advertised = advertised_versions(broker.host, broker.port)
    assert {key: advertised.get(key) for key in EXPECTED_RANGES} == EXPECTED_RANGES


# ── DescribeCluster ────────────────────────────────────────────────────────────────────


def test_confluent_describe_cluster(broker: Any) -> None:
    admin = admin_client(broker.bootstrap)
    described = admin.describe_cluster(include_authorized_operations=True).result(timeout=30)
    assert [(node.id, node.host, node.port) for node in described.nodes] == [
        (0, broker.host, broker.port)
    ]
    assert described.controller.id == 0
    assert described.cluster_id
    assert set(described.authorized_operations) == CLUSTER_OPERATIONS


def test_confluent_describe_topics_authorized_operations(broker: Any, topic: str) -> None:
    """librdkafka asks Metadata v8+ for them; without an authorizer every topic operation
    is granted."""
    create_topic(broker, topic)
    admin = admin_client(broker.bootstrap)
    futures = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)
    described = futures[topic].result(timeout=30)
    assert set(described.authorized_operations) == TOPIC_OPERATIONS


def test_group_authorized_operations(broker: Any) -> None:
    """DescribeGroups v3+ as Kafka without an authorizer answers: every group operation,
    the group-config ones included."""
    request = request_class(15, 3, "DescribeGroupsRequest")(
        groups=("sluice-tests-no-such-group",), include_authorized_operations=True
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(request)
    (group,) = response.groups
    granted = {bit for bit in range(32) if int(group.authorized_operations) >> bit & 1}
    assert granted == {
        int(AclOperation.READ.value),
        int(AclOperation.DESCRIBE.value),
        int(AclOperation.DELETE.value),
        int(AclOperation.DESCRIBE_CONFIGS.value),
        int(AclOperation.ALTER_CONFIGS.value),
    }


def test_kafka_python_describe_cluster_uses_describe_cluster(kafka_python_admin: Any) -> None:
    described = kafka_python_admin.describe_cluster()
    # is_fenced exists only in a DescribeCluster v2 answer (not in the Metadata fallback).
    assert described["brokers"] == [
        {
            "broker_id": 0,
            "host": "127.0.0.1",
            "port": described["brokers"][0]["port"],
            "rack": None,
            "is_fenced": False,
        }
    ]
    assert described["controller_id"] == 0
    assert described["cluster_id"]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster_every_version(broker: Any, version: int) -> None:
    fields: dict[str, Any] = {"include_cluster_authorized_operations": False}
    if version >= 2:
        fields["include_fenced_brokers"] = True
    request = request_class(DESCRIBE_CLUSTER, version, "DescribeClusterRequest")(**fields)
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(request)
    assert int(response.error_code) == 0
    assert [(int(b.broker_id), b.host, int(b.port)) for b in response.brokers] == [
        (0, broker.host, broker.port)
    ]
    assert int(response.controller_id) == 0
    assert int(response.cluster_authorized_operations) == -(2**31), "not asked for"


@pytest.mark.parametrize(
    ("endpoint_type", "error_code"),
    [(2, MISMATCHED_ENDPOINT_TYPE), (7, UNSUPPORTED_ENDPOINT_TYPE)],
)
def test_describe_cluster_refuses_other_endpoint_types(
    broker: Any, endpoint_type: int, error_code: int
) -> None:
    request = request_class(DESCRIBE_CLUSTER, 1, "DescribeClusterRequest")(
        include_cluster_authorized_operations=False, endpoint_type=endpoint_type
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(request)
    assert int(response.error_code) == error_code
    assert response.error_message
    assert response.brokers == ()


# ── DescribeLogDirs ────────────────────────────────────────────────────────────────────


def segment_bytes_on_disk(data_dir: Path, topic: str, partition: int) -> int:
    directory = data_dir / f"{topic}-{partition}"
    return sum(path.stat().st_size for path in directory.glob("*.log"))


def test_kafka_python_describe_log_dirs_reports_real_sizes(
    broker: Any, topic: str, kafka_python_admin: Any
) -> None:
    create_topic(broker, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    try:
        for index in range(20):
            producer.send(topic, b"x" * 1000, partition=0).get(timeout=15)
            if index % 4 == 0:
                producer.send(topic, b"y" * 100, partition=1).get(timeout=15)
    finally:
        producer.close(timeout=5)

    described = kafka_python_admin.describe_log_dirs({topic: [0, 1]})
    (only_broker,) = described
    assert only_broker["broker"] == 0
    (log_dir,) = only_broker["log_dirs"]
    assert log_dir["error_code"] == 0
    assert Path(log_dir["log_dir"]) == broker.data_dir.resolve()
    (described_topic,) = log_dir["topics"]
    assert described_topic["name"] == topic
    sizes = {p["partition_index"]: p["partition_size"] for p in described_topic["partitions"]}
    assert sizes == {
        0: segment_bytes_on_disk(broker.data_dir, topic, 0),
        1: segment_bytes_on_disk(broker.data_dir, topic, 1),
    }
    assert sizes[0] > 20_000 and 0 < sizes[1] < sizes[0]
    assert all(p["offset_lag"] == 0 for p in described_topic["partitions"])
    volume = os.statvfs(broker.data_dir)
    assert log_dir["total_bytes"] == volume.f_blocks * volume.f_frsize
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_log_dirs_every_version(broker: Any, topic: str, version: int) -> None:
    create_topic(broker, topic)
    with KafkaConnection(broker.host, broker.port) as connection:
        everything = connection.request(
            request_class(DESCRIBE_LOG_DIRS, version, "DescribeLogDirsRequest")(topics=None)
        )
        unhosted = connection.request(
            request_class(DESCRIBE_LOG_DIRS, version, "DescribeLogDirsRequest")(
                topics=(
                    request_class(DESCRIBE_LOG_DIRS, version, "DescribableLogDirTopic")(
                        topic="no-such-topic", partitions=(0,)
                    ),
                )
            )
        )
    (result,) = everything.results
    listed = {t.name: [int(p.partition_index) for p in t.partitions] for t in result.topics}
    assert listed[topic] == [0]
    assert "__consumer_offsets" in listed
    (empty,) = unhosted.results
    assert int(empty.error_code) == 0 and empty.topics == ()
    if version >= 4:
        assert int(result.total_bytes) > 0 and int(result.usable_bytes) > 0


# ── AlterReplicaLogDirs ────────────────────────────────────────────────────────────────


FLUSHER_FILES = ("partition.checkpoint", "partition.checkpoint.tmp")
"""Rewritten by the flusher on its worker thread on its own schedule (the recovery point
moves once a flush lands), whatever a request does: not part of what a move would change."""


def partition_files(data_dir: Path, topic: str, partition: int) -> dict[str, bytes]:
    directory = data_dir / f"{topic}-{partition}"
    return {
        path.name: path.read_bytes()
        for path in sorted(directory.iterdir())
        if path.name not in FLUSHER_FILES
    }


def test_kafka_python_alter_replica_log_dirs_within_the_one_log_dir_changes_nothing(
    broker: Any, topic: str, kafka_python_admin: Any
) -> None:
    """The broker has one log directory: moving a replica into it succeeds, whether it is
    named as DescribeLogDirs reports it or as configured, and leaves the files alone."""
    create_topic(broker, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    try:
        producer.send(topic, b"stays", partition=0).get(timeout=15)
    finally:
        producer.close(timeout=5)
    (described,) = kafka_python_admin.describe_log_dirs({topic: [0]})
    (log_dir,) = described["log_dirs"]
    before = partition_files(broker.data_dir, topic, 0)

    moved = kafka_python_admin.alter_replica_log_dirs(
        {
            TopicPartitionReplica(topic, 0, 0): log_dir["log_dir"],
            TopicPartitionReplica(topic, 1, 0): os.path.abspath(broker.data_dir),
        }
    )
    assert moved == {
        TopicPartitionReplica(topic, 0, 0): NoError,
        TopicPartitionReplica(topic, 1, 0): NoError,
    }
    assert partition_files(broker.data_dir, topic, 0) == before


def test_kafka_python_alter_replica_log_dirs_refuses_other_dirs_and_unhosted_partitions(
    broker: Any, topic: str, tmp_path: Path, kafka_python_admin: Any
) -> None:
    create_topic(broker, topic)
    elsewhere = tmp_path / "another-log-dir"
    elsewhere.mkdir()
    refused = kafka_python_admin.alter_replica_log_dirs(
        {
            TopicPartitionReplica(topic, 0, 0): str(elsewhere),
            TopicPartitionReplica(topic, 5, 0): str(broker.data_dir.resolve()),
            TopicPartitionReplica("no-such-topic", 0, 0): str(broker.data_dir.resolve()),
        }
    )
    assert refused == {
        TopicPartitionReplica(topic, 0, 0): LogDirNotFoundError,
        TopicPartitionReplica(topic, 5, 0): ReplicaNotAvailableError,
        TopicPartitionReplica("no-such-topic", 0, 0): ReplicaNotAvailableError,
    }
    assert not list(elsewhere.iterdir())  # nothing was moved there


@pytest.mark.parametrize("version", [1, 2])
def test_alter_replica_log_dirs_every_version(broker: Any, topic: str, version: int) -> None:
    """A relative path is not the log directory; a partition named twice is answered
    once, for the last directory naming it, as Kafka's map of moves keeps it."""
    create_topic(broker, topic, partitions=2)
    log_dir = request_class(ALTER_REPLICA_LOG_DIRS, version, "AlterReplicaLogDir")
    dir_topic = request_class(ALTER_REPLICA_LOG_DIRS, version, "AlterReplicaLogDirTopic")
    request = request_class(ALTER_REPLICA_LOG_DIRS, version, "AlterReplicaLogDirsRequest")(
        dirs=(
            log_dir(path="data", topics=(dir_topic(name=topic, partitions=(0, 1)),)),
            log_dir(
                path=str(broker.data_dir.resolve()),
                topics=(dir_topic(name=topic, partitions=(1,)),),
            ),
        )
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(request)
    (result,) = response.results
    assert result.topic_name == topic
    assert {int(p.partition_index): int(p.error_code) for p in result.partitions} == {
        0: LOG_DIR_NOT_FOUND,
        1: 0,
    }


# ── DescribeQuorum ─────────────────────────────────────────────────────────────────────


def test_kafka_python_describe_metadata_quorum_says_there_is_no_quorum(
    kafka_python_admin: Any,
) -> None:
    """Sluice keeps its metadata in ZooKeeper or a file: the metadata log a Kafka quorum
    describes does not exist, and the answer says so rather than failing the call."""
    described = kafka_python_admin.describe_metadata_quorum()
    (topic,) = described["topics"]
    assert topic["topic_name"] == "__cluster_metadata"
    (partition,) = topic["partitions"]
    assert partition["partition_index"] == 0
    assert "UnknownTopicOrPartitionError" in partition["error"]
    assert "no KRaft quorum" in partition["error"]
    assert partition["current_voters"] == [] and partition["observers"] == []
    assert described["nodes"] == []


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_quorum_every_version(broker: Any, version: int) -> None:
    topic_data = request_class(DESCRIBE_QUORUM, version, "TopicData")
    partition_data = request_class(DESCRIBE_QUORUM, version, "PartitionData")
    request = request_class(DESCRIBE_QUORUM, version, "DescribeQuorumRequest")(
        topics=(
            topic_data(
                topic_name="__cluster_metadata",
                partitions=(partition_data(partition_index=0), partition_data(partition_index=3)),
            ),
        )
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(request)
    assert int(response.error_code) == 0
    (topic,) = response.topics
    assert [(int(p.partition_index), int(p.error_code)) for p in topic.partitions] == [
        (0, UNKNOWN_TOPIC_OR_PARTITION),
        (3, UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert all(int(p.leader_id) == -1 and p.current_voters == () for p in topic.partitions)


# ── ListConfigResources ────────────────────────────────────────────────────────────────


def test_kafka_python_list_config_resources(
    broker: Any, topic: str, kafka_python_admin: Any
) -> None:
    create_topic(broker, topic)
    listed = kafka_python_admin.list_config_resources()
    assert listed["broker"] == ["0"]
    assert topic in listed["topic"] and "__consumer_offsets" in listed["topic"]
    assert kafka_python_admin.list_config_resources(["BROKER"]) == {"broker": ["0"]}
    with pytest.raises(UnsupportedVersionError):
        kafka_python_admin.list_config_resources(["BROKER_LOGGER"])


def test_kafka_python_list_config_resources_lists_groups_with_configs(
    broker: Any, kafka_python_admin: Any
) -> None:
    group = "sluice-tests-configured-group"
    request = request_class(44, 0, "IncrementalAlterConfigsRequest")
    resource = request_class(44, 0, "AlterConfigsResource")
    config = request_class(44, 0, "AlterableConfig")
    with KafkaConnection(broker.host, broker.port) as connection:
        altered = connection.request(
            request(
                resources=(
                    resource(
                        resource_type=32,
                        resource_name=group,
                        configs=(
                            config(
                                name="consumer.session.timeout.ms",
                                config_operation=0,
                                value="50000",
                            ),
                        ),
                    ),
                ),
                validate_only=False,
            )
        )
    if int(altered.responses[0].error_code) == INVALID_REQUEST:
        pytest.skip("this broker stores no group configs")
    assert int(altered.responses[0].error_code) == 0
    assert kafka_python_admin.list_config_resources(["GROUP"]) == {"group": [group]}


def test_list_config_resources_v0_lists_client_metrics_only(broker: Any) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(
            request_class(LIST_CONFIG_RESOURCES, 0, "ListConfigResourcesRequest")()
        )
    assert int(response.error_code) == 0
    assert response.config_resources == (), "no client-metrics subscriptions exist"


# ── DescribeProducers ──────────────────────────────────────────────────────────────────


def test_kafka_python_describe_producers(broker: Any, topic: str, kafka_python_admin: Any) -> None:
    create_topic(broker, topic, partitions=2)
    before_ms = int(time.time() * 1000)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, enable_idempotence=True, linger_ms=0
    )
    try:
        for _ in range(3):
            producer.send(topic, b"v", partition=0).get(timeout=15)
    finally:
        producer.close(timeout=5)
    after_ms = int(time.time() * 1000)

    described = kafka_python_admin.describe_producers(
        [KafkaPythonTopicPartition(topic, 0), KafkaPythonTopicPartition(topic, 1)]
    )
    (active,) = described[KafkaPythonTopicPartition(topic, 0)].active_producers
    assert active.producer_id >= 0 and active.producer_epoch == 0
    assert active.last_sequence == 2, "three single-record batches: sequences 0, 1, 2"
    assert before_ms <= active.last_timestamp <= after_ms
    assert active.coordinator_epoch == -1
    assert active.current_transaction_start_offset == -1
    assert described[KafkaPythonTopicPartition(topic, 1)].active_producers == []


def test_describe_producers_errors(broker: Any, topic: str) -> None:
    create_topic(broker, topic)
    topic_request = request_class(DESCRIBE_PRODUCERS, 0, "TopicRequest")
    request = request_class(DESCRIBE_PRODUCERS, 0, "DescribeProducersRequest")(
        topics=(
            topic_request(name=topic, partition_indexes=(0, 3)),
            topic_request(name="no-such-topic", partition_indexes=(0,)),
            topic_request(name="bad/name", partition_indexes=(0,)),
        )
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(request)
    codes = {
        (t.name, int(p.partition_index)): int(p.error_code)
        for t in response.topics
        for p in t.partitions
    }
    assert codes == {
        (topic, 0): 0,
        (topic, 3): UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION,
        ("bad/name", 0): INVALID_TOPIC_EXCEPTION,
    }


# ── ElectLeaders ───────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("election_type", [ElectionType.PREFERRED, ElectionType.UNCLEAN])
def test_confluent_elect_leaders(broker: Any, topic: str, election_type: ElectionType) -> None:
    create_topic(broker, topic, partitions=2)
    admin = admin_client(broker.bootstrap)
    results = admin.elect_leaders(
        election_type,
        [TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 9)],
    ).result(timeout=30)
    codes = {(tp.topic, tp.partition): error.code() for tp, error in results.items()}
    assert codes == {
        (topic, 0): KafkaError.ELECTION_NOT_NEEDED,
        (topic, 1): KafkaError.ELECTION_NOT_NEEDED,
        (topic, 9): KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
    # Every partition of the cluster: those already led by the right replica are left out.
    assert admin.elect_leaders(election_type, None).result(timeout=30) == {}


def test_kafka_python_elect_leaders(broker: Any, topic: str, kafka_python_admin: Any) -> None:
    create_topic(broker, topic, partitions=3)
    response = kafka_python_admin.elect_leaders(0, {topic: [0, 1, 2]})
    assert response.error_code == 0
    (result,) = response.replica_election_results
    assert result.topic == topic
    assert [(p.partition_id, p.error_code) for p in result.partition_result] == [
        (0, ELECTION_NOT_NEEDED),
        (1, ELECTION_NOT_NEEDED),
        (2, ELECTION_NOT_NEEDED),
    ]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_every_version(broker: Any, topic: str, version: int) -> None:
    create_topic(broker, topic)
    fields: dict[str, Any] = {"timeout": datetime.timedelta(seconds=10)}
    if version >= 1:
        fields["election_type"] = 0
    partitions = request_class(ELECT_LEADERS, version, "TopicPartitions")
    with KafkaConnection(broker.host, broker.port) as connection:
        named = connection.request(
            request_class(ELECT_LEADERS, version, "ElectLeadersRequest")(
                topic_partitions=(
                    partitions(topic=topic, partitions=(0,)),
                    partitions(topic="no-such-topic", partitions=(0,)),
                ),
                **fields,
            )
        )
        everything = connection.request(
            request_class(ELECT_LEADERS, version, "ElectLeadersRequest")(
                topic_partitions=None, **fields
            )
        )
    codes = {
        (r.topic, int(p.partition_id)): int(p.error_code)
        for r in named.replica_election_results
        for p in r.partition_result
    }
    assert codes == {(topic, 0): ELECTION_NOT_NEEDED, ("no-such-topic", 0): 3}
    listed = {r.topic: r.partition_result for r in everything.replica_election_results}
    assert listed[topic] == () and listed["__consumer_offsets"] == ()


def test_elect_leaders_refuses_an_unknown_election_type(broker: Any, topic: str) -> None:
    create_topic(broker, topic)
    request = request_class(ELECT_LEADERS, 1, "ElectLeadersRequest")(
        election_type=5,
        topic_partitions=(
            request_class(ELECT_LEADERS, 1, "TopicPartitions")(topic=topic, partitions=(0,)),
        ),
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(request)
    assert int(response.error_code) == INVALID_REQUEST
    (result,) = response.replica_election_results
    assert [(int(p.partition_id), int(p.error_code)) for p in result.partition_result] == [
        (0, INVALID_REQUEST)
    ]


# ── Partition reassignments ────────────────────────────────────────────────────────────


def test_kafka_python_partition_reassignments(
    broker: Any, topic: str, kafka_python_admin: Any
) -> None:
    create_topic(broker, topic, partitions=2)
    partition_0 = KafkaPythonTopicPartition(topic, 0)
    partition_1 = KafkaPythonTopicPartition(topic, 1)
    missing = KafkaPythonTopicPartition(topic, 7)
    results = kafka_python_admin.alter_partition_reassignments(
        {partition_0: [0], partition_1: [5], missing: [0]}
    )
    assert results == {
        partition_0: None,
        partition_1: InvalidReplicationAssignmentError,
        missing: UnknownTopicOrPartitionError,
    }
    assert kafka_python_admin.alter_partition_reassignments({partition_0: [0, 0]}) == {
        partition_0: InvalidReplicationAssignmentError
    }
    assert kafka_python_admin.alter_partition_reassignments({partition_0: None}) == {
        partition_0: NoReassignmentInProgressError
    }
    assert kafka_python_admin.list_partition_reassignments() == {}
    assert kafka_python_admin.list_partition_reassignments([partition_0]) == {}
    # The no-op changed nothing: same replicas, same leader, same epoch.
    (described,) = kafka_python_admin.describe_topics([topic])
    states = {
        p["partition_index"]: (p["leader_id"], p["leader_epoch"], p["replica_nodes"])
        for p in described["partitions"]
    }
    assert states == {0: (0, 0, [0]), 1: (0, 0, [0])}


@pytest.mark.parametrize("version", [0, 1])
def test_alter_partition_reassignments_every_version(broker: Any, topic: str, version: int) -> None:
    create_topic(broker, topic)
    reassignable = request_class(ALTER_PARTITION_REASSIGNMENTS, version, "ReassignablePartition")
    fields: dict[str, Any] = {}
    if version >= 1:
        fields["allow_replication_factor_change"] = False
    request = request_class(
        ALTER_PARTITION_REASSIGNMENTS, version, "AlterPartitionReassignmentsRequest"
    )(
        timeout=datetime.timedelta(seconds=10),
        topics=(
            request_class(ALTER_PARTITION_REASSIGNMENTS, version, "ReassignableTopic")(
                name=topic,
                partitions=(
                    reassignable(partition_index=0, replicas=(0,)),
                    reassignable(partition_index=0, replicas=()),
                    reassignable(partition_index=0, replicas=(0, 3)),
                    reassignable(partition_index=0, replicas=None),
                ),
            ),
        ),
        **fields,
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(request)
    assert int(response.error_code) == 0
    (answered,) = response.responses
    assert [int(p.error_code) for p in answered.partitions] == [
        0,
        INVALID_REPLICA_ASSIGNMENT,
        INVALID_REPLICA_ASSIGNMENT,
        NO_REASSIGNMENT_IN_PROGRESS,
    ]
    assert answered.partitions[0].error_message is None
    assert "broker 3" in answered.partitions[2].error_message


def test_list_partition_reassignments_raw(broker: Any, topic: str) -> None:
    create_topic(broker, topic)
    listed = request_class(LIST_PARTITION_REASSIGNMENTS, 0, "ListPartitionReassignmentsTopics")
    with KafkaConnection(broker.host, broker.port) as connection:
        for topics in (None, (listed(name=topic, partition_indexes=(0,)),)):
            response = connection.request(
                request_class(LIST_PARTITION_REASSIGNMENTS, 0, "ListPartitionReassignmentsRequest")(
                    timeout=datetime.timedelta(seconds=10), topics=topics
                )
            )
            assert int(response.error_code) == 0 and response.topics == ()
