"""Dynamic broker configs in a cluster: two brokers on ZooKeeper. A cluster-wide default
set through one broker reaches the other; a per-broker value (set with confluent-kafka,
which asks that broker) wins over it there only. Shown by what each broker's produce
accepts for the partition it leads."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from client_helpers import (
    CLIENT_TIMEOUT_S,
    admin_client,
    create_topic,
    unique_topic_name,
    wait_until,
)
from cluster_processes import Cluster
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kafka_wire import (
    KafkaConnection,
    Record,
    encode_batch,
    metadata_request,
    only_partition,
    produce_request,
)
from kio.schema.describe_configs.v1 import request as describe_v1
from kio.schema.incremental_alter_configs.v0 import request as alter_v0

from sluice.cli.local_zookeeper import LocalZooKeeper

pytestmark = pytest.mark.integration

BROKER = 4
MESSAGE_TOO_LARGE = 10
RECORD_VALUE_BYTES = 5_000
"""Above the cluster-wide message.max.bytes set here, below broker 1's own."""


def set_cluster_default(connection: KafkaConnection, name: str, value: str) -> None:
    request = alter_v0.IncrementalAlterConfigsRequest(
        resources=(
            alter_v0.AlterConfigsResource(
                resource_type=BROKER,
                resource_name="",
                configs=(alter_v0.AlterableConfig(name=name, config_operation=0, value=value),),
            ),
        ),
        validate_only=False,
    )
    (response,) = connection.request(request).responses
    assert int(response.error_code) == 0, response


def cluster_default_seen(connection: KafkaConnection) -> dict[str, str | None]:
    request = describe_v1.DescribeConfigsRequest(
        resources=(
            describe_v1.DescribeConfigsResource(
                resource_type=BROKER, resource_name="", configuration_keys=None
            ),
        ),
        include_synonyms=False,
    )
    (result,) = connection.request(request).results
    assert int(result.error_code) == 0, result
    return {entry.name: entry.value for entry in result.configs}


def produce_error(connection: KafkaConnection, topic: str, partition: int) -> int:
    batch = encode_batch([Record(None, b"x" * RECORD_VALUE_BYTES)])
    result = only_partition(connection.request(produce_request(topic, partition, batch)))
    return int(result.error_code)


def test_cluster_default_reaches_every_broker_and_a_per_broker_value_wins_there(
    tmp_path: Path, zookeeper: LocalZooKeeper
) -> None:
    cluster = Cluster(tmp_path, f"{zookeeper.connect}/{uuid.uuid4().hex}", 2, {})
    cluster.start()
    try:
        first, second = cluster.brokers
        topic = unique_topic_name("dynamic")
        create_topic(first.bootstrap, topic, num_partitions=2)
        with KafkaConnection(first.host, first.port) as connection:
            (described,) = connection.request(metadata_request([topic])).topics
        leaders = {int(p.partition_index): int(p.leader_id) for p in described.partitions}
        assert sorted(leaders.values()) == [0, 1], "one partition led by each broker"
        led_by = {leader: partition for partition, leader in leaders.items()}

        # broker 1's own level, through confluent-kafka (which sends it to broker 1)
        admin = admin_client(first.bootstrap)
        own = ConfigResource(
            ResourceType.BROKER,
            "1",
            incremental_configs=[
                ConfigEntry(
                    "message.max.bytes", "100000", incremental_operation=AlterConfigOpType.SET
                )
            ],
        )
        admin.incremental_alter_configs([own])[own].result(timeout=CLIENT_TIMEOUT_S)

        with (
            KafkaConnection(first.host, first.port) as to_first,
            KafkaConnection(second.host, second.port) as to_second,
        ):
            assert produce_error(to_first, topic, led_by[0]) == 0
            set_cluster_default(to_first, "message.max.bytes", "3000")
            # Broker 0 answered once it applied the default: its partition refuses now.
            assert produce_error(to_first, topic, led_by[0]) == MESSAGE_TOO_LARGE
            wait_until(
                lambda: cluster_default_seen(to_second) == {"message.max.bytes": "3000"},
                "broker 1 sees the cluster-wide default",
            )
            # Broker 1's own value wins over the default there.
            assert produce_error(to_second, topic, led_by[1]) == 0

            # Removing broker 1's own value leaves the default in force there too.
            removal = ConfigResource(
                ResourceType.BROKER,
                "1",
                incremental_configs=[
                    ConfigEntry(
                        "message.max.bytes", None, incremental_operation=AlterConfigOpType.DELETE
                    )
                ],
            )
            admin.incremental_alter_configs([removal])[removal].result(timeout=CLIENT_TIMEOUT_S)
            assert produce_error(to_second, topic, led_by[1]) == MESSAGE_TOO_LARGE
    finally:
        cluster.stop()
