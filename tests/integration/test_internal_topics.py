"""``__consumer_offsets`` is the broker's own: clients cannot produce to it, grow it or
delete it, while the broker's writes to it (offset commits) keep working.

Producing into it could corrupt committed offsets; more partitions re-hash every group
onto another partition (committed offsets were gone after a restart); deleting it made
every commit time out. Kafka's broker refuses the produce with INVALID_TOPIC_EXCEPTION;
its tools refuse the other two, and Sluice's broker refuses them too, with the same code.
"""

from __future__ import annotations

import datetime

import pytest
from client_helpers import (
    CLIENT_TIMEOUT_S,
    DeliveryFailedError,
    admin_client,
    consumer_config,
    create_topic,
    produce_and_flush,
    producer_config,
)
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import NewPartitions
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions as KafkaPythonNewPartitions
from kafka.errors import InvalidTopicError
from kafka_wire import (
    LATEST_TIMESTAMP,
    KafkaConnection,
    list_offsets_request,
    metadata_request,
    only_partition,
    produce_request,
)
from kio.schema.create_partitions.v1 import request as create_partitions_v1
from kio.schema.delete_topics.v1 import request as delete_topics_v1

from sluice.protocol.records import RecordInput, build_batch

OFFSETS_TOPIC = "__consumer_offsets"
NONE = 0
INVALID_TOPIC_EXCEPTION = 17


def offsets_topic_partitions(connection: KafkaConnection) -> int:
    response = connection.request(metadata_request([OFFSETS_TOPIC]))
    (topic,) = response.topics
    assert topic.error_code == NONE and topic.is_internal
    return len(topic.partitions)


def log_end_offset(connection: KafkaConnection, partition: int) -> int:
    request = list_offsets_request(OFFSETS_TOPIC, partition, LATEST_TIMESTAMP)
    result = only_partition(connection.request(request))
    assert result.error_code == NONE
    return int(result.offset)


def commits_still_work(bootstrap: str, topic: str) -> None:
    """The broker's own writes to __consumer_offsets: a group commits an offset and
    reads it back."""
    create_topic(bootstrap, topic)
    consumer = Consumer(consumer_config(bootstrap))
    try:
        position = ConfluentTopicPartition(topic, 0, 7)
        consumer.commit(offsets=[position], asynchronous=False)
        (committed,) = consumer.committed([ConfluentTopicPartition(topic, 0)], CLIENT_TIMEOUT_S)
        assert committed.offset == 7
    finally:
        consumer.close()


# ── raw requests ─────────────────────────────────────────────────────────────────────────


def test_a_raw_produce_to_the_offsets_topic_is_refused(connection, broker, topic):
    before = log_end_offset(connection, 3)
    batch = build_batch([RecordInput(b"\x00\x01junk", b"junk")])
    result = only_partition(connection.request(produce_request(OFFSETS_TOPIC, 3, batch)))
    assert result.error_code == INVALID_TOPIC_EXCEPTION, result
    assert log_end_offset(connection, 3) == before
    commits_still_work(broker.bootstrap, topic)


def test_raw_create_partitions_on_the_offsets_topic_is_refused(connection, broker, topic):
    partitions = offsets_topic_partitions(connection)
    for validate_only in (True, False):
        request = create_partitions_v1.CreatePartitionsRequest(
            topics=(
                create_partitions_v1.CreatePartitionsTopic(
                    name=OFFSETS_TOPIC, count=partitions + 10, assignments=None
                ),
            ),
            timeout=datetime.timedelta(seconds=10),
            validate_only=validate_only,
        )
        (result,) = connection.request(request).results
        assert result.error_code == INVALID_TOPIC_EXCEPTION, result
        assert "internal" in result.error_message
    assert offsets_topic_partitions(connection) == partitions
    commits_still_work(broker.bootstrap, topic)


def test_raw_delete_topics_of_the_offsets_topic_is_refused(connection, broker, topic):
    request = delete_topics_v1.DeleteTopicsRequest(
        topic_names=(OFFSETS_TOPIC,), timeout=datetime.timedelta(seconds=10)
    )
    (result,) = connection.request(request).responses
    assert result.error_code == INVALID_TOPIC_EXCEPTION, result
    assert offsets_topic_partitions(connection) > 0
    commits_still_work(broker.bootstrap, topic)


# ── confluent-kafka ─────────────────────────────────────────────────────────────────────


def test_confluent_producer_cannot_write_the_offsets_topic(connection, broker, topic):
    before = log_end_offset(connection, 0)
    producer = Producer(producer_config(broker.bootstrap, retries=0))
    with pytest.raises(DeliveryFailedError, match=r"(?i)invalid topic|TOPIC_EXCEPTION"):
        produce_and_flush(producer, OFFSETS_TOPIC, [{"value": b"junk", "partition": 0}])
    assert log_end_offset(connection, 0) == before
    commits_still_work(broker.bootstrap, topic)


def test_confluent_admin_cannot_grow_or_delete_the_offsets_topic(connection, broker, topic):
    admin = admin_client(broker.bootstrap)
    partitions = offsets_topic_partitions(connection)
    grow = admin.create_partitions([NewPartitions(OFFSETS_TOPIC, partitions + 6)])
    with pytest.raises(KafkaException) as refused:
        grow[OFFSETS_TOPIC].result(timeout=CLIENT_TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    delete = admin.delete_topics([OFFSETS_TOPIC], operation_timeout=10)
    with pytest.raises(KafkaException) as refused:
        delete[OFFSETS_TOPIC].result(timeout=CLIENT_TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    assert offsets_topic_partitions(connection) == partitions
    commits_still_work(broker.bootstrap, topic)


# ── kafka-python ────────────────────────────────────────────────────────────────────────


def test_kafka_python_admin_cannot_grow_or_delete_the_offsets_topic(connection, broker, topic):
    """(kafka-python's producer does not send to internal topics at all: it leaves them
    out of its metadata.)"""
    partitions = offsets_topic_partitions(connection)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        with pytest.raises(InvalidTopicError):
            admin.create_partitions(
                {OFFSETS_TOPIC: KafkaPythonNewPartitions(partitions + 3)}, raise_errors=True
            )
        with pytest.raises(InvalidTopicError):
            admin.delete_topics([OFFSETS_TOPIC], raise_errors=True)
    finally:
        admin.close()
    assert offsets_topic_partitions(connection) == partitions
    commits_still_work(broker.bootstrap, topic)
