"""Topic deletion racing the broker's own work on the same partitions.

A deleted partition's directory is renamed at once to ``<topic>-<partition>.<id>-delete``
and removed after ``log.segment.delete.delay.ms``; the flusher, the cleaner and
retention let go of the partition first, and nothing that happens to a partition being
deleted stops the broker. The workload (``deletion_workload``) is librdkafka's test 0011
pattern in a tight loop, raced by producers auto-creating the names it deletes.
"""

from __future__ import annotations

import random
import time

from broker_process import BrokerProcess
from client_helpers import (
    CLIENT_TIMEOUT_S,
    admin_client,
    create_topic,
    producer_config,
    wait_until,
)
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from deletion_workload import (
    RACING_OVERRIDES,
    cycle,
    deletion_directories,
    racing_producers,
    storage_trouble,
    tolerant,
)

CYCLES = 300
"""Create/produce/reconfigure/delete cycles, each also raced by automatic creations."""
TOPIC_NAMES = 3
"""Names the cycles and the producers share (few, so that they collide often)."""
TEST_DEADLINE_S = 150.0
"""The loop's bound on a loaded machine (300 cycles take about a minute on two busy
cores); the test needs a third of the cycles within it."""


def test_deletions_racing_flushes_cleaning_and_auto_creation_never_stop_the_broker(
    broker_factory,
):
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    broker: BrokerProcess = broker_factory(RACING_OVERRIDES)
    names = [f"deletion-race-{seed}-{i}" for i in range(TOPIC_NAMES)]
    admin = admin_client(broker.bootstrap)
    producer = Producer(producer_config(broker.bootstrap, **{"message.timeout.ms": 5_000}))
    deadline = time.monotonic() + TEST_DEADLINE_S
    cycles = 0
    with racing_producers(broker.bootstrap, names, seed) as sent:
        while cycles < CYCLES and time.monotonic() < deadline:
            cycle(admin, producer, names[cycles % TOPIC_NAMES], replication_factor=1)
            cycles += 1
            assert broker.is_running, broker.log_tail()
    print(f"{cycles} cycles, {sum(sent)} records sent by the racing producers")
    assert cycles >= CYCLES // 3, f"only {cycles} cycles ran within {TEST_DEADLINE_S}s"
    assert broker.is_running, broker.log_tail()
    trouble = storage_trouble(broker)
    assert trouble == [], "\n".join(trouble[:20])
    # Every renamed directory goes (a second after its deletion), and with it the data.
    tolerant(admin.delete_topics(names, operation_timeout=10))
    wait_until(lambda: deletion_directories(broker.data_dir) == [], "the -delete directories go")
    assert not any(broker.data_dir.glob("deletion-race-*"))
    assert broker.stop() == 0


def test_a_deleted_partition_is_renamed_at_once_and_removed_at_the_next_start(
    broker_factory, topic
):
    broker: BrokerProcess = broker_factory({"log.segment.delete.delay.ms": "600000"})
    create_topic(broker.bootstrap, topic, num_partitions=2)
    producer = Producer(producer_config(broker.bootstrap))
    for partition in range(2):
        producer.produce(topic, b"before", partition=partition)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    admin = admin_client(broker.bootstrap)
    admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=CLIENT_TIMEOUT_S)

    # The name is free at once: the data waits under a unique -delete name.
    assert not (broker.data_dir / f"{topic}-0").exists()
    assert len(deletion_directories(broker.data_dir, topic)) == 2
    create_topic(broker.bootstrap, topic, num_partitions=1)
    assert (broker.data_dir / f"{topic}-0").is_dir()
    admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert len(deletion_directories(broker.data_dir, topic)) == 3

    # A restart never loads them as partitions, and removes them.
    assert broker.stop() == 0
    broker.start()
    wait_until(
        lambda: deletion_directories(broker.data_dir, topic) == [],
        "the -delete directories go at start",
    )
    assert topic not in admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics
    create_topic(broker.bootstrap, topic, num_partitions=2)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic})
    try:
        for partition in range(2):
            watermarks = consumer.get_watermark_offsets(
                ConfluentTopicPartition(topic, partition), timeout=CLIENT_TIMEOUT_S
            )
            assert watermarks == (0, 0), (partition, watermarks)
    finally:
        consumer.close()
    assert broker.stop() == 0
    assert storage_trouble(broker) == []
