"""The workload of the replication fault tests: idempotent acks=all producers and reading
consumers against a real cluster, every outcome recorded in a :class:`history.History`.

::

    producer threads ──produce(value "p<process>-<n>", random partition)──▶ cluster
        └ delivery callback: Send ok (offset) / info (any error: it may be written;
          or acknowledged without an offset, then checked at the end: see Deliveries)
    consumer threads ◀──consume──  each poll's records; a new consumer is a new session
    faults (the test) ──kill -9, SIGSTOP/SIGCONT, partitions, truncated tails──▶ brokers
    finish(): stop clients, bring every broker back, wait until every ISR is whole, read
              everything below the high watermark once more, stop the brokers cleanly,
              read every replica's directory, check

Every loop is bounded in time and count; the random choices come from the test's seed.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cluster_processes import Cluster
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import NewTopic
from history import (
    LOST_WRITE,
    Anomaly,
    CheckResult,
    History,
    Send,
    TopicPartition,
    check,
    read_replica_log,
)
from netns import TestNetwork

SENDS_PER_PRODUCER_MAX = 60_000
"""A bound on each producer's sends, whatever the test's duration (five minutes of
sending at the pace below)."""
PRODUCER_QUEUE_MAX = 200
"""Messages a producer has in flight before it waits for deliveries."""
SEND_INTERVAL_S = 0.005
"""Pause between two sends of one producer: a steady load, not a flood."""
CLIENT_TIMEOUT_S = 60.0
HEAL_TIMEOUT_S = 90.0
FINAL_READ_TIMEOUT_S = 60.0
PROGRESS_POLL_INTERVAL_S = 0.1


def producer_settings(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 2,
        "message.timeout.ms": 20_000,
        "socket.timeout.ms": 5_000,
        "retry.backoff.ms": 100,
        "topic.metadata.refresh.interval.ms": 1_000,
    }


def consumer_settings(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": "fault-readers",  # never joins: partitions are assigned
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "socket.timeout.ms": 5_000,
        "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 1_000,
    }


@dataclass
class Deliveries:
    """The producers' delivery reports, into a history.

    librdkafka reports success without an offset (``Message.offset()`` None) for the
    messages of an idempotent producer's request whose outcome it never learned (the
    leader died, the connection dropped, the request timed out) once a later batch of the
    same producer is acknowledged: sequence numbers tell it they were written, not where.
    Kafka's brokers and Java producer do the same. Such a send is recorded with an
    unknown outcome (the history's acks name an offset) and checked at the end like any
    acknowledged one: :meth:`check_acknowledged_without_offset`."""

    history: History
    acknowledged_without_offset: list[tuple[int, TopicPartition, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on_delivery(self, process: int, error: KafkaError | None, message: Message) -> None:
        partition = TopicPartition(message.topic(), message.partition())
        value = message.value().decode()
        offset = message.offset()
        if error is None and offset is not None:
            self.history.send(process, "ok", partition, value, offset)
            return
        self.history.send(process, "info", partition, value)
        if error is None:
            with self._lock:
                self.acknowledged_without_offset.append((process, partition, value))

    def check_acknowledged_without_offset(self, result: CheckResult) -> None:
        """Report as lost each value acknowledged without an offset that no replica's
        final log holds below its high watermark (everything acknowledged is committed)."""
        committed = {
            (read.partition, value)
            for read in self.history.final_reads
            for offset, value in read.records
            if offset < read.high_watermark
        }
        for process, partition, value in self.acknowledged_without_offset:
            if (partition, value) not in committed:
                result.report(
                    Anomaly(
                        LOST_WRITE,
                        partition,
                        None,
                        value,
                        f"{value!r} acknowledged to process {process} (without an offset) "
                        "is in no replica's committed log",
                    )
                )


@dataclass
class Workload:
    cluster: Cluster
    seed: int
    topic: str = "jepsen"
    partitions: int = 3
    producers: int = 2
    consumers: int = 1
    network: TestNetwork | None = None
    """The namespaces the brokers run in, for partition faults (None: loopback)."""
    history: History = field(default_factory=History)
    deliveries: Deliveries = field(init=False)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _failures: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.deliveries = Deliveries(self.history)

    def create_topic(self) -> None:
        admin = self.cluster.admin(self.cluster.running()[0])
        topic = NewTopic(self.topic, self.partitions, 3, config={"min.insync.replicas": "2"})
        admin.create_topics([topic])[self.topic].result(CLIENT_TIMEOUT_S)
        self.cluster.wait_for(self.isr_whole)

    def isr_whole(self, status: dict[str, Any]) -> bool:
        """Every partition of the topic led, with all three replicas in sync."""
        partitions = status["topics"].get(self.topic, [])
        return len(partitions) == self.partitions and all(
            p["leader"] >= 0 and len(p["isr"]) == 3 for p in partitions
        )

    def leader_of(self, partition: int) -> int:
        status = self.cluster.wait_for(
            lambda s: any(
                p["partition"] == partition and p["leader"] >= 0
                for p in s["topics"].get(self.topic, [])
            )
        )
        return int(
            next(p["leader"] for p in status["topics"][self.topic] if p["partition"] == partition)
        )

    # ── clients ────────────────────────────────────────────────────────────────────

    def start(self) -> None:
        for index in range(self.producers):
            self._spawn(f"producer-{index}", self._produce, index)
        for index in range(self.consumers):
            self._spawn(f"consumer-{index}", self._consume, 100 + index)

    def _spawn(self, name: str, target: Callable[[int], None], process: int) -> None:
        def run() -> None:
            try:
                target(process)
            except BaseException as e:  # reported by finish(), never lost
                self._failures.append(e)

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _produce(self, process: int) -> None:
        rng = random.Random(f"{self.seed}-{process}")
        producer = Producer(producer_settings(self.cluster.bootstrap))

        def on_delivery(error: KafkaError | None, message: Message) -> None:
            self.deliveries.on_delivery(process, error, message)

        sent = 0
        while not self._stop.is_set() and sent < SENDS_PER_PRODUCER_MAX:
            while len(producer) >= PRODUCER_QUEUE_MAX and not self._stop.is_set():
                producer.poll(0.05)
            value = f"p{process}-{sent}"
            producer.produce(
                self.topic,
                value.encode(),
                partition=rng.randrange(self.partitions),
                on_delivery=on_delivery,
            )
            sent += 1
            producer.poll(SEND_INTERVAL_S)
        # Every outstanding send gets its outcome (ok, or info after message.timeout.ms).
        remaining = producer.flush(CLIENT_TIMEOUT_S)
        assert remaining == 0, f"producer {process}: {remaining} sends never completed"

    def _consume(self, process: int) -> None:
        while not self._stop.is_set():
            consumer = Consumer(consumer_settings(self.cluster.bootstrap))
            self._begin_session(consumer, process)
            try:
                self._poll_until_error(consumer, process)
            finally:
                consumer.close()

    def _begin_session(self, consumer: Consumer, process: int) -> None:
        """Assign every partition from its start: a new session in the history."""
        self.history.assign(process)
        consumer.assign(
            [
                ConfluentTopicPartition(self.topic, p, OFFSET_BEGINNING)
                for p in range(self.partitions)
            ]
        )

    def _record_poll(self, process: int, messages: list[Message]) -> None:
        """Record the records one poll returned (its errors are not records)."""
        records = [
            (TopicPartition(self.topic, m.partition()), m.offset(), m.value().decode())
            for m in messages
            if m.error() is None
        ]
        if records:
            self.history.poll(process, records)

    def _poll_until_error(self, consumer: Consumer, process: int) -> None:
        while not self._stop.is_set():
            messages = consumer.consume(500, 0.2)
            self._record_poll(process, messages)
            if any(m.error() is not None and m.error().fatal() for m in messages):
                return  # a new session

    def wait_for_progress(self, acknowledged: int, timeout_s: float = CLIENT_TIMEOUT_S) -> None:
        """Wait until ``acknowledged`` more sends were acknowledged (the cluster takes
        writes), checking the client threads are alive."""
        target = self.acknowledged() + acknowledged
        deadline = time.monotonic() + timeout_s
        while self.acknowledged() < target:
            if self._failures:
                raise self._failures[0]
            assert time.monotonic() < deadline, (
                f"only {self.acknowledged()} of {target} sends acknowledged in {timeout_s}s"
            )
            time.sleep(PROGRESS_POLL_INTERVAL_S)  # polling a counter, not a sync

    def acknowledged(self) -> int:
        return sum(
            1 for op in self.history.operations if isinstance(op, Send) and op.outcome == "ok"
        )

    # ── the end ────────────────────────────────────────────────────────────────────

    def finish(self) -> CheckResult:
        """Stop the clients, heal the cluster, read everything, check the history."""
        self._stop.set()
        for thread in self._threads:
            thread.join(CLIENT_TIMEOUT_S)
            assert not thread.is_alive(), f"{thread.name} did not stop"
        if self._failures:
            raise self._failures[0]
        for broker in self.cluster.brokers:
            if not broker.is_running:
                broker.start()
        self.cluster.wait_for(
            lambda s: len(s["brokers"]) == 3 and self.isr_whole(s), HEAL_TIMEOUT_S
        )
        self._final_poll(process=999)
        self.cluster.stop()
        for broker in self.cluster.brokers:
            for index in range(self.partitions):
                directory = broker.data_dir / f"{self.topic}-{index}"
                replica = read_replica_log(directory)
                self.history.final_read(
                    replica.final_read(
                        TopicPartition(self.topic, index),
                        broker.node_id,
                        lambda value: (value or b"").decode(),
                    )
                )
        result = check(self.history)
        self.deliveries.check_acknowledged_without_offset(result)
        return result

    def _final_poll(self, process: int) -> None:
        """One more session reading every partition from the start to its high
        watermark: every committed record is read at least once."""
        consumer = Consumer(consumer_settings(self.cluster.bootstrap))
        try:
            ends = {}
            for index in range(self.partitions):
                _, high = consumer.get_watermark_offsets(
                    ConfluentTopicPartition(self.topic, index), CLIENT_TIMEOUT_S
                )
                ends[index] = high
            self._begin_session(consumer, process)
            positions = dict.fromkeys(ends, 0)
            deadline = time.monotonic() + FINAL_READ_TIMEOUT_S
            while any(positions[p] < ends[p] for p in ends):
                assert time.monotonic() < deadline, f"final read stuck at {positions} < {ends}"
                messages = consumer.consume(1000, 0.5)
                for message in messages:
                    if message.error() is None:
                        positions[message.partition()] = message.offset() + 1
                self._record_poll(process, messages)
        finally:
            consumer.close()
