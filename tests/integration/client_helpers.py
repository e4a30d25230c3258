"""Small helpers around confluent-kafka shared by the integration tests.

Every wait is bounded by a deadline and driven by the client's own events (delivery
callbacks, polled messages), never by sleeping.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CLIENT_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 60.0

_ILLEGAL_TOPIC_CHARACTERS = re.compile(r"[^a-zA-Z0-9._-]+")


def unique_topic_name(hint: str = "t") -> str:
    readable = _ILLEGAL_TOPIC_CHARACTERS.sub("-", hint).strip("-.")[:60] or "t"
    return f"{readable}-{uuid.uuid4().hex[:10]}"


def unique_group_id() -> str:
    return f"sluice-tests-{uuid.uuid4().hex}"


def producer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": 10_000,
        "message.timeout.ms": 30_000,
        "linger.ms": 5,
        **overrides,
    }


def consumer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """A consumer that reads assigned partitions only: consumer groups are not used."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": unique_group_id(),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "socket.timeout.ms": 10_000,
        "fetch.wait.max.ms": 100,
        **overrides,
    }


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000})


@dataclass(frozen=True)
class Delivered:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


WAIT_POLL_INTERVAL_S = 0.1
"""How often :func:`wait_until` looks again."""


def wait_until(
    condition: Callable[[], bool], what: str, timeout_s: float = CLIENT_TIMEOUT_S
) -> None:
    """Return once ``condition()`` holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what} ({timeout_s}s)"
        time.sleep(WAIT_POLL_INTERVAL_S)  # polling interval of a bounded wait, not a sync


class DeliveryFailedError(AssertionError):
    pass


def produce_and_flush(
    producer: Producer,
    topic: str,
    messages: Iterable[dict[str, Any]],
    timeout_s: float = CLIENT_TIMEOUT_S,
) -> list[Delivered]:
    """Produce each message (kwargs of ``Producer.produce``), wait for every delivery
    report, and return them in produce order. Raises if any delivery failed."""
    reports: dict[int, Delivered] = {}
    errors: list[str] = []

    def on_delivery_for(index: int) -> Any:
        def on_delivery(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                errors.append(f"message {index}: {error}")
                return
            reports[index] = Delivered(
                message.topic(),
                message.partition(),
                message.offset(),
                message.key(),
                message.value(),
            )

        return on_delivery

    count = 0
    for index, kwargs in enumerate(messages):
        while True:
            try:
                producer.produce(topic, on_delivery=on_delivery_for(index), **kwargs)
                break
            except BufferError:
                producer.poll(0.1)  # local queue full: serve callbacks to make room
        producer.poll(0)
        count += 1
    remaining = producer.flush(timeout_s)
    if remaining:
        raise DeliveryFailedError(f"{remaining} messages still undelivered after {timeout_s}s")
    if errors:
        raise DeliveryFailedError("; ".join(errors[:10]))
    assert len(reports) == count
    return [reports[i] for i in range(count)]


def consume_exactly(
    bootstrap: str,
    partitions: Sequence[tuple[str, int]],
    count: int,
    *,
    start_offset: int = OFFSET_BEGINNING,
    timeout_s: float = CLIENT_TIMEOUT_S,
    extra_wait_s: float = 0.0,
    **config: Any,
) -> list[Message]:
    """Assign the partitions from ``start_offset`` and read until ``count`` messages have
    arrived; then poll ``extra_wait_s`` more to catch any unexpected extra message."""
    consumer = Consumer(consumer_config(bootstrap, **config))
    try:
        consumer.assign([ConfluentTopicPartition(t, p, start_offset) for t, p in partitions])
        messages: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while len(messages) < count and time.monotonic() < deadline:
            messages.extend(_checked(consumer.consume(count - len(messages), 0.5)))
        if extra_wait_s:
            extra_deadline = time.monotonic() + extra_wait_s
            while time.monotonic() < extra_deadline:
                messages.extend(_checked(consumer.consume(100, 0.2)))
        assert len(messages) >= count, (
            f"consumed {len(messages)} of {count} messages in {timeout_s}s"
        )
        return messages
    finally:
        consumer.close()


def _checked(messages: list[Message]) -> list[Message]:
    for message in messages:
        error = message.error()
        if error is not None:
            raise AssertionError(f"consumer error: {error}")
    return messages


def create_topic(
    bootstrap: str,
    name: str,
    num_partitions: int = 1,
    config: dict[str, str] | None = None,
) -> None:
    admin = admin_client(bootstrap)
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=num_partitions, replication_factor=1, config=config or {})],
        operation_timeout=10,
        request_timeout=15,
    )
    futures[name].result(timeout=CLIENT_TIMEOUT_S)


def recreate_topic(bootstrap: str, name: str, num_partitions: int = 1) -> None:
    """Delete the topic and create it again (a new topic id), once the deletion is done."""
    admin = admin_client(bootstrap)
    admin.delete_topics([name], operation_timeout=10)[name].result(timeout=CLIENT_TIMEOUT_S)
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while True:
        try:
            create_topic(bootstrap, name, num_partitions)
            return
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            assert time.monotonic() < deadline, f"{name} still exists after its deletion"
            time.sleep(0.05)  # polling for the deletion's end, bounded by the deadline


def round_trip_one_message(bootstrap: str) -> None:
    """Produce one message with acks=all to a new auto-created topic and read it back: the
    proof that the broker still serves a real client."""
    name = unique_topic_name("still-serving")
    producer = Producer(producer_config(bootstrap, acks="all"))
    value = uuid.uuid4().bytes
    (delivered,) = produce_and_flush(producer, name, [{"value": value, "partition": 0}])
    (message,) = consume_exactly(bootstrap, [(name, 0)], 1)
    assert message.value() == value
    assert message.offset() == delivered.offset == 0


def run_sluice(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``sluice ARGS…`` as a user runs it (a process of this interpreter), against
    ``bootstrap``; the caller checks the exit status and the output."""
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "SLUICE_BOOTSTRAP_SERVER": bootstrap},
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
