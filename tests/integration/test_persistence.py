"""What survives a restart: a clean SIGTERM, and a kill -9 in the middle of production.

A record the broker acknowledged with acks=all must be readable, at the offset it was
acknowledged with, after the process is killed and started again (the page cache
survives a process kill; a broker that acks before writing does not pass).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from client_helpers import (
    CLIENT_TIMEOUT_S,
    admin_client,
    consume_exactly,
    create_topic,
    produce_and_flush,
    producer_config,
)
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType

SMALL_SEGMENT_BYTES = 32 * 1024


@pytest.fixture
def small_segment_broker(broker_factory):
    """A broker whose partitions roll a new segment every 32 KiB, so that restarts have
    several segments and indexes to reopen."""
    return broker_factory({"log.segment.bytes": str(SMALL_SEGMENT_BYTES)})


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def read_whole_topic(bootstrap: str, topic: str, partitions: int) -> dict[tuple[int, int], bytes]:
    """Every record between each partition's log start and high watermark, by
    (partition, offset)."""
    total = 0
    for partition in range(partitions):
        low, high = watermarks(bootstrap, topic, partition)
        total += high - low
    messages = consume_exactly(
        bootstrap, [(topic, p) for p in range(partitions)], total, timeout_s=60
    )
    return {(m.partition(), m.offset()): m.value() for m in messages}


def test_sigterm_stops_the_broker_with_exit_code_zero(small_segment_broker):
    assert "ready" in small_segment_broker.log_text().lower()
    assert small_segment_broker.stop() == 0


def test_clean_restart_keeps_every_record_across_segments(small_segment_broker, topic):
    broker = small_segment_broker
    create_topic(broker.bootstrap, topic, num_partitions=3)
    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    sent = [
        {"partition": i % 3, "key": str(i).encode(), "value": b"%06d" % i * 20} for i in range(3000)
    ]
    delivered = produce_and_flush(producer, topic, sent)

    broker.restart()

    stored = read_whole_topic(broker.bootstrap, topic, 3)
    assert len(stored) == 3000
    for report in delivered:
        assert stored[(report.partition, report.offset)] == report.value
    assert [watermarks(broker.bootstrap, topic, p) for p in range(3)] == [(0, 1000)] * 3

    # Appends continue after the recovered log end.
    (after,) = produce_and_flush(producer, topic, [{"partition": 1, "value": b"after"}])
    assert after.offset == 1000


def test_topic_layout_configs_deletions_and_log_start_survive_restart(broker, topic):
    create_topic(broker.bootstrap, topic, num_partitions=4, config={"retention.ms": "4321000"})
    doomed = f"{topic}-doomed"
    create_topic(broker.bootstrap, doomed)
    producer = Producer(producer_config(broker.bootstrap))
    produce_and_flush(producer, topic, [{"partition": 0, "value": b"v"}] * 10)
    admin = admin_client(broker.bootstrap)
    next(iter(admin.delete_records([TopicPartition(topic, 0, 6)]).values())).result(timeout=30)
    admin.delete_topics([doomed], operation_timeout=10)[doomed].result(timeout=30)

    broker.restart()

    admin = admin_client(broker.bootstrap)
    topics = admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics
    assert doomed not in topics
    assert sorted(topics[topic].partitions) == [0, 1, 2, 3]
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)
    assert configs["retention.ms"].value == "4321000"
    assert watermarks(broker.bootstrap, topic, 0) == (6, 10)


@dataclass
class AckLedger:
    """Every acknowledged (partition, offset) -> value, and every delivery failure."""

    acknowledged: dict[tuple[int, int], bytes] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def record(self, error: KafkaError | None, message: Message) -> None:
        with self.changed:
            if error is None:
                self.acknowledged[(message.partition(), message.offset())] = message.value()
            else:
                self.failures.append(str(error))
            self.changed.notify_all()

    def wait_for(self, count: int, timeout_s: float) -> None:
        with self.changed:
            satisfied = self.changed.wait_for(lambda: len(self.acknowledged) >= count, timeout_s)
        assert satisfied, f"only {len(self.acknowledged)} of {count} acks after {timeout_s}s"


class BackgroundProducer:
    """Produces numbered values in a thread until stopped (or until ``limit``)."""

    def __init__(
        self, config: dict, topic: str, partitions: int, ledger: AckLedger, limit: int | None = None
    ) -> None:
        self._producer = Producer(config)
        self._topic = topic
        self._partitions = partitions
        self._ledger = ledger
        self._limit = limit
        self._stop = threading.Event()
        self.produced = 0
        self.remaining_after_flush: int | None = None
        self._thread = threading.Thread(target=self._run, name="background-producer", daemon=True)

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set() and (self._limit is None or self.produced < self._limit):
            index = self.produced
            try:
                self._producer.produce(
                    self._topic,
                    value=b"value-%08d" % index,
                    partition=index % self._partitions,
                    on_delivery=self._ledger.record,
                )
                self.produced += 1
            except BufferError:
                self._producer.poll(0.05)
            self._producer.poll(0)
        while not self._stop.is_set():
            self._producer.poll(0.1)

    def stop(self, flush_timeout_s: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.remaining_after_flush = self._producer.flush(flush_timeout_s)


@pytest.mark.slow
def test_every_acknowledged_record_survives_repeated_kill9(small_segment_broker, topic):
    broker = small_segment_broker
    create_topic(broker.bootstrap, topic, num_partitions=2)
    ledger = AckLedger()
    config = producer_config(
        broker.bootstrap,
        acks="all",
        **{
            "enable.idempotence": False,
            "message.timeout.ms": 120_000,
            "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
            "queue.buffering.max.messages": 2000,
        },
    )
    kills = 3
    acks_between_kills = 3000
    with BackgroundProducer(config, topic, 2, ledger) as producer:
        for round_number in range(1, kills + 1):
            ledger.wait_for(round_number * acks_between_kills, timeout_s=90)
            broker.kill9()
        ledger.wait_for((kills + 1) * acks_between_kills, timeout_s=90)
    assert producer.remaining_after_flush == 0

    stored = read_whole_topic(broker.bootstrap, topic, 2)
    missing = {
        position: value
        for position, value in ledger.acknowledged.items()
        if stored.get(position) != value
    }
    assert not missing, (
        f"{len(missing)} of {len(ledger.acknowledged)} acknowledged records lost or changed, "
        f"e.g. {sorted(missing.items())[:5]}"
    )


def _assert_exactly_once_in_order(bootstrap: str, topic: str, partitions: int, total: int) -> None:
    stored = read_whole_topic(bootstrap, topic, partitions)
    for partition in range(partitions):
        values = [v for (p, _o), v in sorted(stored.items()) if p == partition]
        expected = [b"value-%08d" % i for i in range(partition, total, partitions)]
        assert values == expected, f"partition {partition}: duplicates, gaps or reordering"


@pytest.mark.slow
@pytest.mark.parametrize("interrupt", ["restart", "kill9"])
def test_idempotent_producer_survives_broker_restarts_without_duplicates(
    small_segment_broker, topic, interrupt
):
    """librdkafka retries the batches in flight when the broker goes away; the restarted
    broker must recognise the ones it already wrote (producer state is recovered from
    the log or a snapshot) and write the others exactly once."""
    broker = small_segment_broker
    create_topic(broker.bootstrap, topic, num_partitions=2)
    ledger = AckLedger()
    config = producer_config(
        broker.bootstrap,
        **{
            "enable.idempotence": True,
            "message.timeout.ms": 120_000,
            "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
            "queue.buffering.max.messages": 2000,
        },
    )
    total = 9000
    interrupt_broker: Callable[[], None] = broker.kill9 if interrupt == "kill9" else broker.restart
    with BackgroundProducer(config, topic, 2, ledger, limit=total) as producer:
        ledger.wait_for(3000, timeout_s=90)
        interrupt_broker()
        ledger.wait_for(6000, timeout_s=90)
        interrupt_broker()
        ledger.wait_for(total, timeout_s=120)
    assert producer.remaining_after_flush == 0
    assert ledger.failures == []
    _assert_exactly_once_in_order(broker.bootstrap, topic, 2, total)
