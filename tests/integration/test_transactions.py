"""Transactions with real clients against one broker: commits and aborts as each
client's read_committed and read_uncommitted consumers see them, zombies fenced,
offsets committed inside a transaction, timeouts, and restarts.

A consumer knows it has read everything when it reaches an ``end`` record that a last
committed transaction wrote to every partition: nothing is inferred from silence.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from client_helpers import create_topic, unique_group_id
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

PARTITIONS = 3
END = b"end"
CLIENT_TIMEOUT_S = 30.0
NO_OFFSET = -1001
"""librdkafka's committed offset when the group has none."""
TRANSACTION_TIMEOUT_S = 30.0

Read = list[tuple[int, bytes]]
"""(partition, value) in the order a consumer returned them."""


def transactional_producer(bootstrap: str, transactional_id: str, **overrides: Any) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **overrides,
        }
    )
    producer.init_transactions(TRANSACTION_TIMEOUT_S)
    return producer


def write_transaction(
    producer: Producer, topic: str, values: list[bytes], *, commit: bool, end: bool = False
) -> None:
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % PARTITIONS)
    if end:
        for partition in range(PARTITIONS):
            producer.produce(topic, value=END, partition=partition)
    if commit:
        producer.commit_transaction(TRANSACTION_TIMEOUT_S)
    else:
        producer.flush(TRANSACTION_TIMEOUT_S)
        producer.abort_transaction(TRANSACTION_TIMEOUT_S)


def committed_then_aborted_then_committed(bootstrap: str, topic: str) -> None:
    producer = transactional_producer(bootstrap, f"writer-{topic}")
    write_transaction(producer, topic, [b"c-%d" % i for i in range(12)], commit=True)
    write_transaction(producer, topic, [b"a-%d" % i for i in range(12)], commit=False)
    write_transaction(producer, topic, [b"c-%d" % i for i in range(12, 18)], commit=True, end=True)


def until_end(read: Read) -> bool:
    return sum(1 for _, value in read if value == END) >= PARTITIONS


# ---------------------------------------------------------------- the readers


def read_confluent(bootstrap: str, topic: str, isolation: str) -> Read:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_group_id(),
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.assign([ConfluentTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        read: Read = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while not until_end(read) and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, message.error()
                read.append((message.partition(), message.value()))
        return read
    finally:
        consumer.close()


def read_kafka_python(bootstrap: str, topic: str, isolation: str) -> Read:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        fetch_max_wait_ms=100,
    )
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        read: Read = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while not until_end(read) and time.monotonic() < deadline:
            for tp, records in consumer.poll(500).items():
                read.extend((tp.partition, record.value) for record in records)
        return read
    finally:
        consumer.close()


def read_aiokafka(bootstrap: str, topic: str, isolation: str) -> Read:
    async def run() -> Read:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            isolation_level=isolation,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            read: Read = []
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while not until_end(read) and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for tp, records in batches.items():
                    read.extend((tp.partition, record.value) for record in records)
            return read
        finally:
            await consumer.stop()

    return asyncio.run(run())


READERS: dict[str, Callable[[str, str, str], Read]] = {
    "confluent-kafka": read_confluent,
    "kafka-python": read_kafka_python,
    "aiokafka": read_aiokafka,
}


def values_by_partition(read: Read) -> dict[int, list[bytes]]:
    by_partition: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for partition, value in read:
        by_partition[partition].append(value)
    return by_partition


def expected(prefix: bytes, numbers: range) -> dict[int, list[bytes]]:
    by_partition: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in numbers:
        by_partition[i % PARTITIONS].append(b"%s-%d" % (prefix, i))
    return by_partition


# ------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def written(broker) -> str:
    """A topic with a committed, an aborted and a committed transaction."""
    topic = f"txn-{unique_group_id()[-8:]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    committed_then_aborted_then_committed(broker.bootstrap, topic)
    return topic


@pytest.mark.parametrize("client", sorted(READERS))
def test_read_committed_sees_only_committed_records_in_order(
    broker, written: str, client: str
) -> None:
    read = READERS[client](broker.bootstrap, written, "read_committed")
    assert until_end(read), f"{client} did not reach the end: {read}"
    by_partition = values_by_partition(read)
    want = expected(b"c", range(18))
    for partition in range(PARTITIONS):
        assert by_partition[partition] == [*want[partition], END], partition


@pytest.mark.parametrize("client", sorted(READERS))
def test_read_uncommitted_sees_aborted_records_too(broker, written: str, client: str) -> None:
    read = READERS[client](broker.bootstrap, written, "read_uncommitted")
    assert until_end(read)
    by_partition = values_by_partition(read)
    committed, aborted = expected(b"c", range(18)), expected(b"a", range(12))
    for partition in range(PARTITIONS):
        values = by_partition[partition]
        assert [v for v in values if v.startswith(b"c-")] == committed[partition]
        assert [v for v in values if v.startswith(b"a-")] == aborted[partition]


def test_kafka_python_transactional_producer(broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, transactional_id=f"kp-{topic}", linger_ms=5
    )
    try:
        producer.init_transactions()
        for prefix, commit in ((b"c", True), (b"a", False)):
            producer.begin_transaction()
            for i in range(9):
                producer.send(topic, value=b"%s-%d" % (prefix, i), partition=i % PARTITIONS)
            if commit:
                producer.commit_transaction()
            else:
                producer.flush()
                producer.abort_transaction()
        producer.begin_transaction()
        for partition in range(PARTITIONS):
            producer.send(topic, value=END, partition=partition)
        producer.commit_transaction()
    finally:
        producer.close()
    by_partition = values_by_partition(read_confluent(broker.bootstrap, topic, "read_committed"))
    want = expected(b"c", range(9))
    for partition in range(PARTITIONS):
        assert by_partition[partition] == [*want[partition], END]


def test_a_zombie_producer_is_fenced_and_its_transaction_aborted(broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    transactional_id = f"zombie-{topic}"
    zombie = transactional_producer(broker.bootstrap, transactional_id)
    zombie.begin_transaction()
    for i in range(6):
        zombie.produce(topic, value=b"z-%d" % i, partition=i % PARTITIONS)
    zombie.flush(TRANSACTION_TIMEOUT_S)
    successor = transactional_producer(broker.bootstrap, transactional_id)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(TRANSACTION_TIMEOUT_S)
    error: KafkaError = raised.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED), error
    write_transaction(successor, topic, [b"c-%d" % i for i in range(3)], commit=True, end=True)
    by_partition = values_by_partition(read_confluent(broker.bootstrap, topic, "read_committed"))
    want = expected(b"c", range(3))
    for partition in range(PARTITIONS):
        assert by_partition[partition] == [*want[partition], END]


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (found,) = consumer.committed([ConfluentTopicPartition(topic, 0)], CLIENT_TIMEOUT_S)
        return int(found.offset)
    finally:
        consumer.close()


def test_offsets_sent_to_a_transaction_take_effect_only_when_it_commits(broker, topic: str) -> None:
    source, sink = f"{topic}-in", f"{topic}-out"
    create_topic(broker.bootstrap, source, 1)
    create_topic(broker.bootstrap, sink, PARTITIONS)
    group = unique_group_id()
    producer = transactional_producer(broker.bootstrap, f"ctp-{topic}")
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.assign([ConfluentTopicPartition(source, 0, 0)])
        metadata = consumer.consumer_group_metadata()
        committed = NO_OFFSET
        for offset, commit in ((10, False), (20, True), (30, False)):
            producer.begin_transaction()
            producer.produce(sink, value=b"out-%d" % offset, partition=0)
            producer.send_offsets_to_transaction(
                [ConfluentTopicPartition(source, 0, offset)], metadata, TRANSACTION_TIMEOUT_S
            )
            if commit:
                producer.commit_transaction(TRANSACTION_TIMEOUT_S)
                committed = offset
            else:
                producer.abort_transaction(TRANSACTION_TIMEOUT_S)
            assert committed_offset(broker.bootstrap, group, source) == committed, offset
    finally:
        consumer.close()


def test_an_open_transaction_past_its_timeout_is_aborted(broker_factory, topic: str) -> None:
    broker = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    create_topic(broker.bootstrap, topic, PARTITIONS)
    stalled = transactional_producer(
        broker.bootstrap, f"slow-{topic}", **{"transaction.timeout.ms": 2_000}
    )
    stalled.begin_transaction()
    for i in range(6):
        stalled.produce(topic, value=b"late-%d" % i, partition=i % PARTITIONS)
    stalled.flush(TRANSACTION_TIMEOUT_S)
    # Another producer commits after it; read_committed readers reach that only once the
    # stalled transaction is aborted by the coordinator.
    other = transactional_producer(broker.bootstrap, f"other-{topic}")
    write_transaction(other, topic, [b"c-%d" % i for i in range(3)], commit=True, end=True)
    by_partition = values_by_partition(read_confluent(broker.bootstrap, topic, "read_committed"))
    want = expected(b"c", range(3))
    for partition in range(PARTITIONS):
        assert by_partition[partition] == [*want[partition], END]
    with pytest.raises(KafkaException):
        stalled.commit_transaction(TRANSACTION_TIMEOUT_S)


def test_read_committed_end_offsets_stop_at_the_open_transaction(broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(4):
        plain.produce(topic, value=b"plain-%d" % i, partition=0)
    plain.flush(TRANSACTION_TIMEOUT_S)
    producer = transactional_producer(broker.bootstrap, f"lso-{topic}")
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=b"open-%d" % i, partition=0)
    producer.flush(TRANSACTION_TIMEOUT_S)
    partition = TopicPartition(topic, 0)
    ends = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = KafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=None, isolation_level=isolation
        )
        try:
            ends[isolation] = consumer.end_offsets([partition])[partition]
        finally:
            consumer.close()
    assert ends == {"read_committed": 4, "read_uncommitted": 9}
    producer.commit_transaction(TRANSACTION_TIMEOUT_S)


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_transactions_survive_a_broker_restart(broker_factory, topic: str, stop: str) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, topic, PARTITIONS)
    transactional_id = f"restart-{topic}"
    producer = transactional_producer(broker.bootstrap, transactional_id)
    write_transaction(producer, topic, [b"c-%d" % i for i in range(6)], commit=True)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, value=b"open-%d" % i, partition=i % PARTITIONS)
    producer.flush(TRANSACTION_TIMEOUT_S)
    if stop == "SIGKILL":
        broker.kill()
    else:
        broker.stop()
    broker.start()
    # The new instance fences the old one; the coordinator aborts the open transaction.
    successor = transactional_producer(broker.bootstrap, transactional_id)
    write_transaction(successor, topic, [b"c-%d" % i for i in range(6, 9)], commit=True, end=True)
    by_partition = values_by_partition(read_confluent(broker.bootstrap, topic, "read_committed"))
    want = expected(b"c", range(9))
    for partition in range(PARTITIONS):
        assert by_partition[partition] == [*want[partition], END]
