"""Helpers the lag tests share (``sluice top``, the console's groups pages): a topic
with records, and a real confluent-kafka group member that reads everything and never
commits."""

from __future__ import annotations

import time

from broker_process import BrokerProcess
from client_helpers import (
    CLIENT_TIMEOUT_S,
    create_topic,
    produce_and_flush,
    producer_config,
    unique_topic_name,
)
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

RECORDS = 10
"""Records in each partition of :func:`topic_with_records`."""


def topic_with_records(broker: BrokerProcess, partitions: int = 2) -> str:
    """A new topic with ``RECORDS`` records in each of its ``partitions``."""
    topic = unique_topic_name("lag")
    create_topic(broker.bootstrap, topic, num_partitions=partitions)
    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    produce_and_flush(
        producer,
        topic,
        ({"value": b"x", "partition": p} for p in range(partitions) for _ in range(RECORDS)),
    )
    return topic


class NeverCommits:
    """A confluent-kafka group member with enable.auto.commit=false that reads every
    record of its partitions and never commits."""

    def __init__(self, broker: BrokerProcess, group: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6_000,
                "heartbeat.interval.ms": 1_000,
                "fetch.wait.max.ms": 100,
            }
        )
        self.consumer.subscribe([topic])
        received = 0
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while received < RECORDS * partitions:
            assert time.monotonic() < deadline, f"read {received} records only"
            message = self.consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                received += 1

    def commit(self, topic: str, offsets: dict[int, int]) -> None:
        self.consumer.commit(
            offsets=[ConfluentTopicPartition(topic, p, o) for p, o in offsets.items()],
            asynchronous=False,
        )

    def close(self) -> None:
        self.consumer.close()
