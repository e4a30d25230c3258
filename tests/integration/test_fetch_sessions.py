"""Fetch sessions (KIP-227) with a client that uses them: kafka-python's consumer opens a
session with its first full fetch and then fetches incrementally, naming only the
partitions whose position moved; it reads every record, in order, through them."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from broker_process import BrokerProcess
from client_helpers import create_topic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from metrics_scrape import scrape, total

pytestmark = pytest.mark.integration

TIMEOUT_S = 30.0
PARTITIONS = 3
ROUND_RECORDS = 30


def _read(consumer: KafkaConsumer, count: int) -> list[tuple[int, bytes]]:
    """Poll until ``count`` records came: (partition, value) in the order received."""
    records: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(records) < count and time.monotonic() < deadline:
        for partition, batch in consumer.poll(timeout_ms=500).items():
            records.extend((partition.partition, r.value) for r in batch)
    assert len(records) == count, f"read {len(records)} of {count} records"
    return records


def test_kafka_python_reads_through_an_incremental_session(
    broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    broker = broker_factory(http=True)
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=15_000,
        fetch_max_wait_ms=100,
    )
    try:
        for i in range(ROUND_RECORDS):
            producer.send(topic, value=f"first-{i}".encode(), partition=i % PARTITIONS)
        producer.flush(timeout=TIMEOUT_S)
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        first = _read(consumer, ROUND_RECORDS)
        # Only partition 1 moves now, a record at a time. The first fetch after the
        # first round names all three (each one's position moved); once its record is
        # read, every later fetch names partition 1 alone, or nothing.
        second: list[tuple[int, bytes]] = []
        before = None
        for i in range(ROUND_RECORDS):
            producer.send(topic, value=f"second-{i}".encode(), partition=1)
            producer.flush(timeout=TIMEOUT_S)
            second += _read(consumer, 1)
            before = before or scrape(broker.http_url)
        after = scrape(broker.http_url)
    finally:
        consumer.close()
        producer.close()

    for partition in range(PARTITIONS):
        expected = [f"first-{i}".encode() for i in range(partition, ROUND_RECORDS, PARTITIONS)]
        assert [v for p, v in first if p == partition] == expected
    assert second == [(1, f"second-{i}".encode()) for i in range(ROUND_RECORDS)]

    assert before is not None
    assert total(after, "sluice_incremental_fetch_sessions") >= 1
    assert total(after, "sluice_incremental_fetch_partitions_cached") >= PARTITIONS
    fetches = total(after, "sluice_incremental_fetches_total") - total(
        before, "sluice_incremental_fetches_total"
    )
    named = total(after, "sluice_incremental_fetch_partitions_named_total") - total(
        before, "sluice_incremental_fetch_partitions_named_total"
    )
    assert fetches >= ROUND_RECORDS - 1
    # Each incremental fetch named at most partition 1, never the session's three.
    assert named <= fetches
