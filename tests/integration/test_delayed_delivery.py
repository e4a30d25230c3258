"""Delayed and scheduled delivery with unmodified clients: records produced with a
delay header (or to a topic with a delay) appear in their topic when due and never
before; schedule ids replace and cancel; bad headers are refused; transactions decide;
a broker killed with records pending loses and repeats nothing.

"Never before" is checked against the producer's clock: the broker computes a record's
due time when it accepts it, which is after the producer sent it, so a record seen
before ``sent + delay`` would be early.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import metrics_scrape
import pytest
from broker_process import BrokerProcess
from client_helpers import (
    CLIENT_TIMEOUT_S,
    consumer_config,
    create_topic,
    produce_and_flush,
    producer_config,
    unique_topic_name,
)
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from readme_blocks import README_ADDRESS, blocks

Seen = dict[bytes, tuple[float, int, list[tuple[str, bytes]]]]
"""value → (time first seen, offset, headers)."""


def watch(
    bootstrap: str,
    topic: str,
    until: Callable[[Seen], bool],
    *,
    partitions: int = 1,
    timeout_s: float = CLIENT_TIMEOUT_S,
    **config: object,
) -> Seen:
    """Read the topic from the start, noting when each value first appears, until
    ``until(seen)``; fails on a value seen twice."""
    consumer = Consumer(consumer_config(bootstrap, **config))
    consumer.assign([ConfluentTopicPartition(topic, p, 0) for p in range(partitions)])
    seen: Seen = {}
    deadline = time.monotonic() + timeout_s
    try:
        while not until(seen):
            assert time.monotonic() < deadline, f"gave up waiting; saw {sorted(seen)}"
            for message in consumer.consume(100, 0.05):
                assert message.error() is None, message.error()
                value = message.value()
                assert value not in seen, f"{value!r} delivered twice"
                seen[value] = (time.time(), message.offset(), list(message.headers() or []))
    finally:
        consumer.close()
    return seen


def test_delayed_records_appear_when_due_and_never_before(broker: BrokerProcess) -> None:
    topic = unique_topic_name("delayed")
    create_topic(broker.bootstrap, topic)
    producer = Producer(producer_config(broker.bootstrap, **{"enable.idempotence": True}))
    delays_ms = [1500, 50, 800, 300, 0, 1200]
    sent = time.time()
    at = datetime.fromtimestamp(sent + 1.0, UTC).isoformat(timespec="milliseconds")
    messages: list[dict[str, object]] = [
        {
            "value": b"delay-%d" % delay,
            "key": b"k",
            "headers": [("x-sluice-delay-ms", str(delay).encode()), ("app", b"x")],
        }
        for delay in delays_ms
    ]
    messages.append({"value": b"at-iso", "headers": [("x-sluice-deliver-at", at.encode())]})
    reports = produce_and_flush(producer, topic, messages)
    # The producer is told the offset of each record's parked copy.
    assert [r.offset for r in reports] == list(range(len(messages)))
    # A batch without delayed records is stored as it came.
    produce_and_flush(producer, topic, [{"value": b"plain"}])
    seen = watch(broker.bootstrap, topic, lambda s: len(s) == len(messages) + 1)
    due = {b"delay-%d" % d: sent + d / 1000 for d in delays_ms}
    due[b"at-iso"] = sent + 1.0
    for value, due_s in due.items():
        assert seen[value][0] >= due_s, f"{value!r} seen {due_s - seen[value][0]:.3f}s early"
    # Fired records come in order of due time, with their headers and their origin.
    fired = sorted((offset, value) for value, (_, offset, _) in seen.items() if value in due)
    order = [value for _, value in fired]
    assert order.index(b"delay-50") < order.index(b"delay-300") < order.index(b"delay-800")
    assert order.index(b"delay-800") < order.index(b"delay-1200") < order.index(b"delay-1500")
    headers = dict(seen[b"delay-300"][2])
    assert headers["app"] == b"x" and headers["x-sluice-delay-ms"] == b"300"
    assert headers["x-sluice-delayed-from"] == str(reports[3].offset).encode()
    assert "x-sluice-delayed-from" not in dict(seen[b"plain"][2])


def test_kcat_and_kafka_python_ask_with_the_same_headers(broker: BrokerProcess) -> None:
    topic = unique_topic_name("delayed-clients")
    create_topic(broker.bootstrap, topic)
    sent = time.time()
    subprocess.run(
        [
            "kcat",
            "-b",
            broker.bootstrap,
            "-P",
            "-t",
            topic,
            "-p",
            "0",
            "-H",
            "x-sluice-delay-ms=400",
        ],
        input=b"from-kcat\n",
        check=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send(topic, b"from-kafka-python", partition=0, headers=[("x-sluice-delay-ms", b"300")])
    producer.flush(CLIENT_TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=int(CLIENT_TIMEOUT_S * 1000),
    )
    seen = {}
    for message in consumer:
        seen[message.value] = (time.time(), dict(message.headers))
        if len(seen) == 2:
            break
    consumer.close()
    assert seen[b"from-kcat"][0] >= sent + 0.4
    assert seen[b"from-kafka-python"][0] >= sent + 0.3
    assert b"x-sluice-delayed-from" not in seen[b"from-kcat"][1]  # header names are str
    assert "x-sluice-delayed-from" in seen[b"from-kcat"][1]


def test_a_schedule_id_replaces_and_cancels_a_pending_record(broker: BrokerProcess) -> None:
    topic = unique_topic_name("scheduled")
    create_topic(broker.bootstrap, topic)
    producer = Producer(producer_config(broker.bootstrap))

    def scheduled(
        value: bytes, schedule_id: bytes, delay_ms: int, cancel: bool = False
    ) -> dict[str, object]:
        headers = [
            ("x-sluice-schedule-id", schedule_id),
            ("x-sluice-delay-ms", str(delay_ms).encode()),
        ]
        if cancel:
            headers.append(("x-sluice-cancel", b""))
        return {"value": value, "key": schedule_id, "headers": headers}

    produce_and_flush(
        producer,
        topic,
        [
            scheduled(b"first-try", b"job", 500),
            scheduled(b"replaced-by-this", b"job", 200),
            scheduled(b"cancelled", b"other", 300),
            scheduled(b"the-cancel", b"other", 0, cancel=True),
            {"value": b"end", "headers": [("x-sluice-delay-ms", b"900")]},
        ],
    )
    seen = watch(broker.bootstrap, topic, lambda s: b"end" in s)
    assert sorted(seen) == [b"end", b"replaced-by-this"]


def test_a_topic_delay_holds_back_every_record(broker: BrokerProcess) -> None:
    topic = unique_topic_name("topic-delay")
    create_topic(broker.bootstrap, topic, config={"sluice.delivery.delay.ms": "400"})
    producer = Producer(producer_config(broker.bootstrap))
    sent = time.time()
    produce_and_flush(
        producer,
        topic,
        [{"value": b"held"}, {"value": b"not-held", "headers": [("x-sluice-delay-ms", b"0")]}],
    )
    seen = watch(broker.bootstrap, topic, lambda s: len(s) == 2)
    assert seen[b"held"][0] >= sent + 0.4
    assert seen[b"not-held"][1] < seen[b"held"][1]


@pytest.mark.parametrize(
    ("header", "value"),
    [("x-sluice-delay-ms", b"soon"), ("x-sluice-deliver-at", b"next tuesday")],
)
def test_a_bad_delay_header_is_refused_and_nothing_is_stored(
    broker: BrokerProcess, header: str, value: bytes
) -> None:
    topic = unique_topic_name("bad-delay")
    create_topic(broker.bootstrap, topic)
    producer = Producer(producer_config(broker.bootstrap, retries=0))
    errors: list[KafkaError] = []
    producer.produce(
        topic,
        value=b"bad",
        partition=0,
        headers=[(header, value)],
        on_delivery=lambda error, message: errors.append(error),
    )
    producer.flush(CLIENT_TIMEOUT_S)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.INVALID_RECORD
    good = produce_and_flush(producer, topic, [{"value": b"good", "partition": 0}])
    assert good[0].offset == 0


def test_delayed_records_of_a_transaction_fire_only_if_it_commits(broker: BrokerProcess) -> None:
    topic = unique_topic_name("delayed-txn")
    create_topic(broker.bootstrap, topic)
    producer = Producer(
        producer_config(broker.bootstrap, **{"transactional.id": unique_topic_name("txn")})
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    for value, commit in ((b"committed", True), (b"aborted", False)):
        producer.begin_transaction()
        producer.produce(topic, value=value, partition=0, headers=[("x-sluice-delay-ms", b"200")])
        if commit:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
        else:
            producer.flush(CLIENT_TIMEOUT_S)
            producer.abort_transaction(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"end", partition=0, headers=[("x-sluice-delay-ms", b"600")])
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    for isolation in ("read_committed", "read_uncommitted"):
        seen = watch(
            broker.bootstrap, topic, lambda s: b"end" in s, **{"isolation.level": isolation}
        )
        assert sorted(seen) == [b"committed", b"end"], isolation


@pytest.mark.slow
def test_kill_9_with_records_pending_loses_and_repeats_nothing(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory()
    topic = unique_topic_name("delayed-crash")
    create_topic(broker.bootstrap, topic, num_partitions=2)
    producer = Producer(
        producer_config(broker.bootstrap, **{"enable.idempotence": True, "acks": "all"})
    )
    count = 300
    produce_and_flush(
        producer,
        topic,
        [
            {
                "value": b"%d" % i,
                "partition": i % 2,
                "headers": [("x-sluice-delay-ms", str(200 + 10 * i).encode())],
            }
            for i in range(count)
        ],
    )
    # Kill the broker while it is firing: once some records have appeared, not all.
    watch(broker.bootstrap, topic, lambda s: len(s) >= count // 4, partitions=2)
    broker.kill9()  # and start again on the same data
    seen = watch(broker.bootstrap, topic, lambda s: len(s) == count, partitions=2)
    assert sorted(int(v) for v in seen) == list(range(count))
    # And nothing more comes after all were delivered: the end of each partition is
    # where the last delivered record is.
    consumer = Consumer(consumer_config(broker.bootstrap))
    try:
        ends = [
            consumer.get_watermark_offsets(ConfluentTopicPartition(topic, p), CLIENT_TIMEOUT_S)[1]
            for p in range(2)
        ]
    finally:
        consumer.close()
    # Each partition holds its parked batches and one fired copy per record.
    last_seen = [max(o for v, (_, o, _) in seen.items() if int(v) % 2 == p) for p in range(2)]
    assert all(last < end for last, end in zip(last_seen, ends, strict=True))
    with pytest.raises(AssertionError, match="gave up"):
        watch(broker.bootstrap, topic, lambda s: len(s) > count, partitions=2, timeout_s=1.0)


def test_the_readme_examples_run(broker: BrokerProcess) -> None:
    """The README's delayed-delivery examples, as a newcomer pastes them."""
    heading = "Delayed and scheduled delivery"
    (sh,) = [block.replace(README_ADDRESS, broker.bootstrap) for block in blocks("sh", heading)]
    (python_block,) = [
        block.replace(README_ADDRESS, broker.bootstrap) for block in blocks("python", heading)
    ]
    shell = subprocess.run(
        ["sh", "-e"], input=sh, capture_output=True, text=True, timeout=60, check=True
    )
    assert shell.stdout == ""  # due in 30 s: nothing to read yet
    python = subprocess.run(
        [sys.executable, "-c", python_block],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert python.returncode == 0, python.stderr
    # The parked copies are there, invisible: the end offset moved, nothing is readable.
    consumer = Consumer(consumer_config(broker.bootstrap))
    try:
        _, end = consumer.get_watermark_offsets(
            ConfluentTopicPartition("reminders", 0), CLIENT_TIMEOUT_S
        )
    finally:
        consumer.close()
    assert end >= 1


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_pending_records_wait_on_disk_not_in_memory(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """Pending records cost disk, not memory: with 100,000 records due tomorrow, the
    broker counts them all parked (its delay index, on disk) and holds none of them in
    memory (its scheduler loads only what falls due within its window). Asked of the
    broker itself, not read off its resident size, which moves with allocator and
    scheduling noise on a busy machine; the size is printed for information."""
    broker = broker_factory(http=True)
    topic = unique_topic_name("many-pending")
    create_topic(broker.bootstrap, topic, num_partitions=4)
    producer = Producer(producer_config(broker.bootstrap, **{"linger.ms": 20}))
    tomorrow = [("x-sluice-delay-ms", b"86400000")]

    def park(start: int, count: int) -> int:
        produce_and_flush(
            producer,
            topic,
            ({"value": b"%d" % i, "headers": tomorrow} for i in range(start, start + count)),
            timeout_s=120,
        )
        return rss_bytes(broker.pid)

    half = park(0, 50_000)
    full = park(50_000, 50_000)
    print(f"broker RSS {half / 2**20:.1f} MiB with 50,000 records pending,")
    print(f"{full / 2**20:.1f} MiB with 100,000")
    samples = metrics_scrape.wait_for(
        broker.http_url,
        lambda s: metrics_scrape.value(s, "sluice_delayed_records_parked") == 100_000,
        "the broker to count 100,000 records parked",
    )
    assert metrics_scrape.value(samples, "sluice_delayed_records_loaded") == 0
