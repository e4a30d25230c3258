"""Retry and dead-letter topics for a consumer group, end to end with real processes:
records produced by kafka-python; a sluice.Consumer retries the ones it cannot handle
(delayed by the backoff, through delayed delivery) until they are dead letters; the
dead letters carry where they came from, after how many attempts and why, as
confluent-kafka and kcat read them; ``sluice dlq`` lists, shows and replays them to
their topic exactly once; the group's offsets end where the source ends."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker_process import BrokerProcess
from client_helpers import CLIENT_TIMEOUT_S, consumer_config, create_topic, run_sluice
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka import KafkaProducer
from readme_blocks import (
    README_ADDRESS,
    assert_shows,
    blocks,
    run,
    shown_after,
    sluice_shell_environment,
)

import sluice
from sluice.client.retries import RetryPolicy

BACKOFF_MS = (150, 300)


async def handle_until(
    broker: BrokerProcess,
    group: str,
    topic: str,
    good_wanted: set[bytes],
    dead_wanted: int,
    handled: list[tuple[bytes, int]],
    attempts: dict[bytes, list[float]],
) -> None:
    """Consume ``topic`` (and the group's retry topic): values starting with "bad" fail
    every time; stop once the good ones are handled and ``dead_wanted`` are dead."""
    dead = 0
    async with sluice.Consumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        retry_policy=RetryPolicy(backoff_ms=BACKOFF_MS),
    ) as consumer:
        async with asyncio.timeout(CLIENT_TIMEOUT_S * 2):
            while {v for v, _ in handled} != good_wanted or dead < dead_wanted:
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    for record in records:
                        value = record.value or b""
                        attempts.setdefault(value, []).append(time.monotonic())
                        if value.startswith(b"bad"):
                            went = await consumer.retry(
                                record, ValueError(f"cannot parse {value!r}")
                            )
                            dead += went == f"{group}-dlq"
                        else:
                            handled.append((value, record.offset))


def read_all(broker: BrokerProcess, topic: str, partitions: int, count: int) -> list[Any]:
    consumer = ConfluentConsumer(
        consumer_config(broker.bootstrap, **{"isolation.level": "read_committed"})
    )
    consumer.assign([ConfluentTopicPartition(topic, p, 0) for p in range(partitions)])
    found: list[Any] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while len(found) < count:
            assert time.monotonic() < deadline, f"read {len(found)} of {count} from {topic}"
            found.extend(m for m in consumer.consume(100, 0.2) if m.error() is None)
    finally:
        consumer.close()
    return found


def test_retry_then_dead_letter_then_replay(broker: BrokerProcess) -> None:
    topic = f"payments-{uuid.uuid4().hex[:8]}"
    group = f"billing-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, num_partitions=2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    values = [b"bad-%d" % i if i % 4 == 0 else b"ok-%d" % i for i in range(12)]
    sources = {}
    for i, value in enumerate(values):
        metadata = producer.send(topic, value, key=b"k%d" % i, headers=[("trace", b"t%d" % i)]).get(
            CLIENT_TIMEOUT_S
        )
        sources[value] = (metadata.partition, metadata.offset)
    producer.close()
    bad = [v for v in values if v.startswith(b"bad")]
    good = {v for v in values if not v.startswith(b"bad")}

    handled: list[tuple[bytes, int]] = []
    attempts: dict[bytes, list[float]] = {}
    asyncio.run(handle_until(broker, group, topic, good, len(bad), handled, attempts))
    assert sorted(v for v, _ in handled) == sorted(good)  # each good one once
    for value in bad:
        # First delivery plus one per backoff, each no earlier than its backoff.
        times = attempts[value]
        assert len(times) == 1 + len(BACKOFF_MS), (value, times)
        for (earlier, later), backoff_ms in zip(itertools.pairwise(times), BACKOFF_MS, strict=True):
            assert later - earlier >= backoff_ms / 1000 * 0.9, (value, times)

    dead = read_all(broker, f"{group}-dlq", 2, len(bad))
    assert sorted(m.value() for m in dead) == sorted(bad)
    for message in dead:
        headers = dict(message.headers())
        partition, offset = sources[message.value()]
        assert headers["x-sluice-original-topic"] == topic.encode()
        assert int(headers["x-sluice-original-partition"]) == partition
        assert int(headers["x-sluice-original-offset"]) == offset
        assert headers["x-sluice-attempt"] == b"%d" % (len(BACKOFF_MS) + 1)
        assert b"ValueError: cannot parse" in headers["x-sluice-error"]
        assert headers["trace"].startswith(b"t")  # its own headers kept
    retried = read_all(broker, f"{group}-retry", 2, len(bad) * len(BACKOFF_MS))
    assert len(retried) == len(bad) * len(BACKOFF_MS)  # exactly once per attempt

    # The group is done with every source record.
    consumer = ConfluentConsumer(consumer_config(broker.bootstrap, **{"group.id": group}))
    try:
        committed = consumer.committed(
            [ConfluentTopicPartition(topic, p) for p in range(2)], CLIENT_TIMEOUT_S
        )
        ends = [
            consumer.get_watermark_offsets(ConfluentTopicPartition(topic, p), CLIENT_TIMEOUT_S)[1]
            for p in range(2)
        ]
    finally:
        consumer.close()
    assert [tp.offset for tp in committed] == ends

    listed = run_sluice(broker.bootstrap, "dlq", "list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert {"topic": f"{group}-dlq", "records": len(bad)} in json.loads(listed.stdout)
    shown = run_sluice(broker.bootstrap, "dlq", "show", f"{group}-dlq", "--format", "json")
    assert shown.returncode == 0, shown.stderr
    letters = json.loads(shown.stdout)
    assert {(d["original_topic"], d["value"], d["attempts"]) for d in letters} == {
        (topic, v.decode(), len(BACKOFF_MS) + 1) for v in bad
    }
    kcat = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-C", "-t", f"{group}-dlq", "-e", "-f", "%h\\n"],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        check=True,
    )
    assert kcat.stdout.count(f"x-sluice-original-topic={topic}") == len(bad)

    for _ in range(2):  # a second replay finds nothing left to replay
        replayed = run_sluice(broker.bootstrap, "dlq", "replay", f"{group}-dlq")
        assert replayed.returncode == 0, replayed.stderr
    assert "replayed 0 record(s)" in replayed.stdout
    back = read_all(broker, topic, 2, len(values) + len(bad))
    again = [m for m in back if m.value() in set(bad)]
    assert sorted(m.value() for m in again) == sorted(bad * 2)  # the originals and one replay each
    replayed_headers = [
        dict(m.headers() or []) for m in again if m.offset() >= sources[m.value()][1] + 1
    ]
    assert all(
        "x-sluice-attempt" not in h and h["trace"].startswith(b"t") for h in replayed_headers
    )


def test_the_readme_example_runs(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    """The README's example on a fresh broker, then its scenario for the dead-letter
    commands (a second payment fails for good), then those commands, which print what
    the README shows."""
    broker = broker_factory()
    section = "Retry and dead-letter topics"
    (block,) = blocks("python", section)
    create_topic(broker.bootstrap, "payments")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send("payments", b"invoice-1").get(CLIENT_TIMEOUT_S)
    producer.close()
    done = subprocess.run(
        [sys.executable, "-c", block.replace(README_ADDRESS, broker.bootstrap)],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S * 2,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "charged b'invoice-1'"

    asyncio.run(dead_letter_the_next_payment(broker, b"invoice-2", "card declined"))
    environment = sluice_shell_environment(tmp_path, broker.bootstrap)
    kcat_block, dlq_block = blocks("sh", section)
    printed = run(
        ["sh", "-e"], environment, stdin=kcat_block.replace(README_ADDRESS, broker.bootstrap)
    )
    assert_shows(printed, shown_after(kcat_block))
    printed = run(["sh", "-e"], environment, stdin=dlq_block, with_errors=True)
    assert_shows(printed, shown_after(dlq_block))


async def dead_letter_the_next_payment(broker: BrokerProcess, value: bytes, why: str) -> None:
    """Produce ``value`` to ``payments`` and send it, as ``billing``'s next record, to
    the dead-letter topic with ``why``."""
    async with sluice.Producer(bootstrap_servers=broker.bootstrap) as producer:
        await producer.send_and_wait("payments", value)
    async with sluice.Consumer(
        "payments",
        bootstrap_servers=broker.bootstrap,
        group_id="billing",
        auto_offset_reset="earliest",
        retry_policy=RetryPolicy(),
    ) as consumer:
        async with asyncio.timeout(CLIENT_TIMEOUT_S):
            async for record in consumer:
                assert record.value == value, record
                await consumer.dead_letter(record, ValueError(why))
                break
