"""The deletion workload shared by the single-node and cluster tests: librdkafka's test
0011 pattern (create, produce, change ``cleanup.policy``, delete) in a tight loop, raced
by producers that keep writing to (and so auto-creating) the same names, and what the
brokers' logs must not say afterwards."""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from broker_process import BrokerProcess
from client_helpers import CLIENT_TIMEOUT_S, producer_config
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

PARTITIONS = 4
PRODUCERS = 2
"""Threads producing to the shared names while the cycles run."""
REQUEST_TIMEOUT_S = 15.0

RACING_OVERRIDES = {
    # Flush, clean and check retention as often as the broker allows, so that every
    # deletion finds them at work on its partitions; remove renamed directories soon
    # (reads in flight keep sending from their files until then).
    "log.flush.scheduler.interval.ms": "10",
    "log.flush.interval.ms": "1",
    "log.cleaner.backoff.ms": "10",
    "log.retention.check.interval.ms": "10",
    "log.segment.delete.delay.ms": "1000",
    "num.partitions": str(PARTITIONS),
}

STORAGE_TROUBLE = re.compile(
    r"could not write|No such file or directory|Directory not empty|KAFKA_STORAGE_ERROR"
    r"|Traceback|closing .*: |stops without the clean-shutdown marker"
)
"""What a broker's log must not say after the loop: a storage error, a failed close, a
fatal stop, or an unhandled exception."""

DELETE_DIRECTORY = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.[0-9a-f]{32}-delete$")


def deletion_directories(data_dir: Path, topic: str | None = None) -> list[str]:
    """Directories of ``data_dir`` renamed for deletion (of ``topic``, if given)."""
    return sorted(
        entry.name
        for entry in data_dir.iterdir()
        if (match := DELETE_DIRECTORY.match(entry.name)) is not None
        and (topic is None or match["topic"] == topic)
    )


def storage_trouble(broker: BrokerProcess) -> list[str]:
    return [line for line in broker.log_text().splitlines() if STORAGE_TROUBLE.search(line)]


@contextmanager
def racing_producers(bootstrap: str, names: list[str], seed: int) -> Iterator[list[int]]:
    """PRODUCERS threads producing to ``names`` (auto-creating them) until the block
    ends; yields the count each has handed to its client."""
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
                    pass  # the local queue is full: the poll below drains it
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


def tolerant(futures: dict[str, object]) -> None:
    """Wait for an admin operation; the races make "already exists" and "unknown topic"
    normal answers (a producer auto-created the name, or it is gone again)."""
    for future in futures.values():
        try:
            future.result(timeout=REQUEST_TIMEOUT_S)  # type: ignore[attr-defined]
        except KafkaException as e:
            assert e.args[0].name() in (
                "TOPIC_ALREADY_EXISTS",
                "UNKNOWN_TOPIC_OR_PART",
                "UNKNOWN_TOPIC_ID",
            ), e


def cycle(admin: AdminClient, producer: Producer, name: str, replication_factor: int) -> None:
    """librdkafka's test 0011 in one go: create, produce, change cleanup.policy, delete."""
    new = NewTopic(name, num_partitions=PARTITIONS, replication_factor=replication_factor)
    tolerant(admin.create_topics([new]))
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
    tolerant(admin.incremental_alter_configs([resource]))
    tolerant(admin.delete_topics([name], operation_timeout=10))
