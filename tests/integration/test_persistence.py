"""What survives a restart: a clean SIGTERM, and a kill -9 in the middle of production.

A record the broker acknowledged with acks=all must be readable, at the offset it was
acknowledged with, after the process is killed and started again (the page cache
survives a process kill; a broker that acks before writing does not pass).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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
from kafka_wire import (
    KafkaConnection,
    Record,
    api_versions_request,
    create_topics_request,
    decode_batches,
    encode_batch,
    fetch_request,
    list_offsets_request,
    only_partition,
    produce_request,
)

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


def test_sigterm_with_open_and_waiting_connections_exits_cleanly_without_errors(
    small_segment_broker, topic
):
    broker = small_segment_broker
    with (
        KafkaConnection(broker.host, broker.port) as idle,
        KafkaConnection(broker.host, broker.port) as long_polling,
    ):
        idle.request(api_versions_request())
        create_topic_raw(long_polling, topic)
        long_polling.send(fetch_request(topic, 0, 0, max_wait_ms=30_000))
        exit_code = broker.stop()
    assert exit_code == 0
    errors = [line for line in broker.log_text().splitlines() if " ERROR " in line]
    assert errors == [], "a clean shutdown logged errors:\n" + "\n".join(errors)


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
    kills = 5
    acks_between_kills = 4000
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


# ── recovery of a damaged log tail ─────────────────────────────────────────────────────


def create_topic_raw(connection: KafkaConnection, name: str) -> None:
    (result,) = connection.request(create_topics_request(name)).topics
    assert result.error_code == 0, result


def active_segment_file(broker, topic: str, partition: int = 0) -> Path:
    directory = broker.data_dir / f"{topic}-{partition}"
    segments = sorted(directory.glob("*.log"))
    assert segments, f"no segment files in {directory}"
    return segments[-1]


def produce_numbered_batches(connection: KafkaConnection, topic: str, count: int) -> None:
    for i in range(count):
        batch = encode_batch([Record(None, b"batch-%d" % i)])
        result = only_partition(connection.request(produce_request(topic, 0, batch)))
        assert (result.error_code, result.base_offset) == (0, i)


def values_from(connection: KafkaConnection, topic: str, offset: int = 0) -> list[bytes]:
    result = only_partition(connection.request(fetch_request(topic, 0, offset)))
    assert result.error_code == 0, result
    return [record.value for batch in decode_batches(result.records) for record in batch.records]


def torn_batch() -> bytes:
    batch = bytearray(encode_batch([Record(None, b"never acknowledged " * 20)]))
    struct.pack_into(">q", batch, 0, 10)  # as the broker would have numbered it
    return bytes(batch[: len(batch) // 2])


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(torn_batch(), id="half-written-batch"),
        pytest.param(b"\x00" * 4096, id="zero-filled-tail"),
        pytest.param(b"\xff" * 100, id="garbage-tail"),
    ],
)
def test_a_damaged_tail_after_kill9_is_truncated_and_appends_continue(
    broker_factory, topic, damage
):
    broker = broker_factory()
    with KafkaConnection(broker.host, broker.port) as connection:
        create_topic_raw(connection, topic)
        produce_numbered_batches(connection, topic, 10)
    broker.kill()
    with active_segment_file(broker, topic).open("ab") as segment:
        segment.write(damage)

    broker.start()

    with KafkaConnection(broker.host, broker.port) as connection:
        assert values_from(connection, topic) == [b"batch-%d" % i for i in range(10)]
        result = only_partition(
            connection.request(produce_request(topic, 0, encode_batch([Record(None, b"next")])))
        )
        assert (result.error_code, result.base_offset) == (0, 10)
        assert values_from(connection, topic, 10) == [b"next"]


def test_a_batch_with_a_bad_crc_at_the_tail_is_dropped_on_recovery(broker_factory, topic):
    broker = broker_factory()
    with KafkaConnection(broker.host, broker.port) as connection:
        create_topic_raw(connection, topic)
        produce_numbered_batches(connection, topic, 10)
    broker.kill()
    segment_path = active_segment_file(broker, topic)
    data = bytearray(segment_path.read_bytes())
    data[-2] ^= 0xFF  # inside the last batch's records: its CRC no longer matches
    segment_path.write_bytes(bytes(data))

    broker.start()

    with KafkaConnection(broker.host, broker.port) as connection:
        assert values_from(connection, topic) == [b"batch-%d" % i for i in range(9)]
        latest = only_partition(connection.request(list_offsets_request(topic, 0, -1)))
        assert latest.offset == 9
        result = only_partition(
            connection.request(produce_request(topic, 0, encode_batch([Record(None, b"next")])))
        )
        assert (result.error_code, result.base_offset) == (0, 9)
