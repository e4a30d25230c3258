"""Topic deletion racing the broker's own work on the same partitions.

A deleted partition's directory is renamed at once to ``<topic>-<partition>.<id>-delete``
and removed after ``log.segment.delete.delay.ms``; the flusher, the cleaner and
retention let go of the partition first, and nothing that happens to a partition being
deleted stops the broker. These tests drive that with real clients: librdkafka's test
0011 pattern (create, produce, change ``cleanup.policy``, delete) in a tight loop, with
producers that keep writing to the same names, so each deletion also races the
auto-creation of the name it frees.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from broker_process import BrokerProcess
from client_helpers import CLIENT_TIMEOUT_S, admin_client, create_topic, producer_config
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

PARTITIONS = 4
CYCLES = 150
"""Create/produce/reconfigure/delete cycles, each also raced by the producers' automatic
creations of the same names."""
TOPIC_NAMES = 3
"""Names the cycles and the producers share (few, so they collide often)."""
PRODUCERS = 2
TEST_DEADLINE_S = 150.0
"""The whole loop's bound on a loaded machine (it usually takes well under a minute)."""
REQUEST_TIMEOUT_S = 15.0

STORAGE_TROUBLE = re.compile(
    r"could not write|No such file or directory|Directory not empty|KAFKA_STORAGE_ERROR"
    r"|Traceback|closing .*: |stops without the clean-shutdown marker",
)
"""What the broker's log must not say after the loop: a storage error, a failed close,
a fatal stop, or an unhandled exception."""

DELETE_DIRECTORY = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.[0-9a-f]{32}-delete$")


def _deletion_directories(data_dir: Path, topic: str | None = None) -> list[str]:
    return sorted(
        entry.name
        for entry in data_dir.iterdir()
        if (match := DELETE_DIRECTORY.match(entry.name)) is not None
        and (topic is None or match["topic"] == topic)
    )


def _wait_until(condition: object, timeout_s: float, what: str) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling interval of a bounded wait, not a synchronization


@contextmanager
def _producing(bootstrap: str, names: list[str], seed: int) -> Iterator[list[int]]:
    """PRODUCERS threads producing to ``names`` (auto-creating them) until the block ends;
    yields the count each has sent."""
    stop = threading.Event()
    sent = [0] * PRODUCERS
    failures: list[BaseException] = []

    def produce(index: int) -> None:
        chooser = random.Random(seed + index)
        producer = Producer(
            producer_config(bootstrap, **{"linger.ms": 1, "message.timeout.ms": 5_000})
        )
        try:
            while not stop.is_set():
                try:
                    producer.produce(chooser.choice(names), b"x" * chooser.randrange(1, 200))
                    sent[index] += 1
                except BufferError:
                    pass  # the local queue is full: poll below drains it
                producer.poll(0.001)
            producer.flush(CLIENT_TIMEOUT_S)
        except BaseException as e:  # reported by the test, not lost in the thread
            failures.append(e)

    threads = [threading.Thread(target=produce, args=(i,), daemon=True) for i in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    try:
        yield sent
    finally:
        stop.set()
        for thread in threads:
            thread.join(CLIENT_TIMEOUT_S + 10)
        assert not any(thread.is_alive() for thread in threads), "a producer did not stop"
        assert not failures, failures


def _tolerant(futures: dict[str, object]) -> None:
    """Wait for an admin operation; the races make "already exists" and "unknown topic"
    normal answers, and a deletion may find the topic still being created."""
    for future in futures.values():
        try:
            future.result(timeout=REQUEST_TIMEOUT_S)  # type: ignore[attr-defined]
        except KafkaException as e:
            assert e.args[0].name() in (
                "TOPIC_ALREADY_EXISTS",
                "UNKNOWN_TOPIC_OR_PART",
                "UNKNOWN_TOPIC_ID",
            ), e


def _cycle(admin: AdminClient, producer: Producer, name: str) -> None:
    """librdkafka's test 0011 in one go: create, produce, change cleanup.policy, delete."""
    _tolerant(admin.create_topics([NewTopic(name, num_partitions=PARTITIONS)]))
    for partition in range(PARTITIONS):
        try:
            producer.produce(name, b"value", key=b"key", partition=partition)
        except KafkaException:
            pass  # the producer's metadata may still know the topic as deleted
    producer.flush(REQUEST_TIMEOUT_S)
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    _tolerant(admin.incremental_alter_configs([resource]))
    _tolerant(admin.delete_topics([name], operation_timeout=10))


def test_deletions_racing_flushes_cleaning_and_auto_creation_never_stop_the_broker(
    broker_factory,
):
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    broker: BrokerProcess = broker_factory(
        {
            # Flush, clean and check retention as often as the broker allows, so every
            # deletion finds them at work on its partitions.
            "log.flush.scheduler.interval.ms": "10",
            "log.flush.interval.ms": "1",
            "log.cleaner.backoff.ms": "10",
            "log.retention.check.interval.ms": "10",
            "log.segment.delete.delay.ms": "0",
            "num.partitions": str(PARTITIONS),
        }
    )
    names = [f"deletion-race-{seed}-{i}" for i in range(TOPIC_NAMES)]
    admin = admin_client(broker.bootstrap)
    producer = Producer(producer_config(broker.bootstrap, **{"message.timeout.ms": 5_000}))
    deadline = time.monotonic() + TEST_DEADLINE_S
    cycles = 0
    with _producing(broker.bootstrap, names, seed) as sent:
        for cycle in range(CYCLES):
            if time.monotonic() > deadline:
                break
            _cycle(admin, producer, names[cycle % TOPIC_NAMES])
            cycles += 1
            assert broker.is_running, broker.log_tail()
    print(f"{cycles} cycles, {sum(sent)} records sent by the racing producers")
    assert cycles >= CYCLES // 3, f"only {cycles} cycles ran within {TEST_DEADLINE_S}s"
    assert broker.is_running, broker.log_tail()
    trouble = [line for line in broker.log_text().splitlines() if STORAGE_TROUBLE.search(line)]
    assert trouble == [], "\n".join(trouble[:20])
    # Every renamed directory goes (log.segment.delete.delay.ms=0), the live ones stay.
    _tolerant(admin.delete_topics(names, operation_timeout=10))
    _wait_until(lambda: _deletion_directories(broker.data_dir) == [], 30, "the -delete directories")
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
    renamed = _deletion_directories(broker.data_dir, topic)
    assert len(renamed) == 2, renamed
    create_topic(broker.bootstrap, topic, num_partitions=1)
    assert (broker.data_dir / f"{topic}-0").is_dir()
    admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert len(_deletion_directories(broker.data_dir, topic)) == 3

    # A restart never loads them as partitions, and removes them.
    assert broker.stop() == 0
    broker.start()
    _wait_until(
        lambda: _deletion_directories(broker.data_dir, topic) == [],
        30,
        "the -delete directories to go at start",
    )
    metadata = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
    assert topic not in metadata.topics
    create_topic(broker.bootstrap, topic, num_partitions=2)
    consumer_view = admin.list_topics(topic, timeout=CLIENT_TIMEOUT_S).topics[topic]
    assert sorted(consumer_view.partitions) == [0, 1]
    assert broker.is_running
