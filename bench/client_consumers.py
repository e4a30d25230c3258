"""Consumer throughput of five Python clients against one ``sluice serve``.

For each record size, one topic (4 partitions) is filled once with confluent-kafka,
then every client reads all of it from offset 0, by assignment (no group):

- ``sluice.Consumer`` (asyncio; ``assign``, ``seek(tp, 0)``, ``await getmany()``)
- ``sluice.sync.Consumer`` (blocking ``poll()`` from a plain thread)
- kafka-python ``KafkaConsumer`` (``assign``, ``seek``, ``poll()``)
- aiokafka ``AIOKafkaConsumer`` (``assign``, ``seek``, ``await getmany()``)
- confluent-kafka ``Consumer`` (librdkafka, ``assign`` at offset 0, ``consume()``)

Every client asks for up to 10,000 records per call and keeps its other defaults. The
clock runs from ``assign`` to the last record (the client object is created, and the
Python clients have bootstrapped, before it starts). Each run is bounded by the topic's
record count and a time limit, and the broker listens on loopback only.

    .venv/bin/python bench/client_consumers.py            # ~1-2 minutes
    .venv/bin/python bench/client_consumers.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiokafka
import kafka

import sluice
from client_producers import Result, print_machine_and_clients, print_table
from produce_consume import (
    ProducedTopic,
    consume_flat_out,
    create_topic,
    produce_flat_out,
    sluice_broker,
)
from sluice.common.ids import TopicPartition

PARTITIONS = 4
TIME_LIMIT_S = 60.0
BATCH_RECORDS = 10_000
POLL_TIMEOUT_MS = 500


Runner = Callable[[str, ProducedTopic, float], tuple[int, float]]


def run_sluice(bootstrap: str, produced: ProducedTopic, limit_s: float) -> tuple[int, float]:
    async def consume() -> tuple[int, float]:
        async with sluice.Consumer(bootstrap_servers=bootstrap) as consumer:
            partitions = [TopicPartition(produced.topic, p) for p in range(produced.partitions)]
            started = time.perf_counter()
            consumer.assign(partitions)
            for tp in partitions:
                consumer.seek(tp, 0)
            received = 0
            finished = started
            deadline = started + limit_s
            while received < produced.messages and time.perf_counter() < deadline:
                batch = await consumer.getmany(POLL_TIMEOUT_MS, BATCH_RECORDS)
                if batch:
                    received += sum(len(records) for records in batch.values())
                    finished = time.perf_counter()
            return received, finished - started

    return asyncio.run(consume())


def run_sluice_sync(bootstrap: str, produced: ProducedTopic, limit_s: float) -> tuple[int, float]:
    with sluice.sync.Consumer(bootstrap_servers=bootstrap) as consumer:
        partitions = [TopicPartition(produced.topic, p) for p in range(produced.partitions)]
        started = time.perf_counter()
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, 0)
        received = 0
        finished = started
        deadline = started + limit_s
        while received < produced.messages and time.perf_counter() < deadline:
            records = consumer.poll(POLL_TIMEOUT_MS / 1000, BATCH_RECORDS)
            if records:
                received += len(records)
                finished = time.perf_counter()
        return received, finished - started


def run_kafka_python(bootstrap: str, produced: ProducedTopic, limit_s: float) -> tuple[int, float]:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
    )
    try:
        partitions = [kafka.TopicPartition(produced.topic, p) for p in range(produced.partitions)]
        started = time.perf_counter()
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, 0)
        received = 0
        finished = started
        deadline = started + limit_s
        while received < produced.messages and time.perf_counter() < deadline:
            batch = consumer.poll(timeout_ms=POLL_TIMEOUT_MS, max_records=BATCH_RECORDS)
            if batch:
                received += sum(len(records) for records in batch.values())
                finished = time.perf_counter()
        return received, finished - started
    finally:
        consumer.close()


def run_aiokafka(bootstrap: str, produced: ProducedTopic, limit_s: float) -> tuple[int, float]:
    async def consume() -> tuple[int, float]:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
        )
        await consumer.start()
        try:
            partitions = [
                aiokafka.TopicPartition(produced.topic, p) for p in range(produced.partitions)
            ]
            started = time.perf_counter()
            consumer.assign(partitions)
            for tp in partitions:
                consumer.seek(tp, 0)
            received = 0
            finished = started
            deadline = started + limit_s
            while received < produced.messages and time.perf_counter() < deadline:
                batch = await consumer.getmany(
                    timeout_ms=POLL_TIMEOUT_MS, max_records=BATCH_RECORDS
                )
                if batch:
                    received += sum(len(records) for records in batch.values())
                    finished = time.perf_counter()
            return received, finished - started
        finally:
            await consumer.stop()

    return asyncio.run(consume())


def run_confluent(bootstrap: str, produced: ProducedTopic, limit_s: float) -> tuple[int, float]:
    result = consume_flat_out(bootstrap, produced, limit_s)
    return result.messages, result.seconds


CLIENTS: dict[str, Runner] = {
    "sluice.Consumer (asyncio)": run_sluice,
    "sluice.sync.Consumer": run_sluice_sync,
    "kafka-python KafkaConsumer": run_kafka_python,
    "aiokafka AIOKafkaConsumer": run_aiokafka,
    "confluent-kafka Consumer": run_confluent,
}


def fill_topic(bootstrap: str, message_bytes: int, count: int) -> ProducedTopic:
    """A new topic holding ``count`` records of ``message_bytes``, written by librdkafka."""
    topic = create_topic(bootstrap, PARTITIONS)
    written = produce_flat_out(bootstrap, topic, PARTITIONS, message_bytes, "1", count, 120.0)
    if written.messages != count:
        raise SystemExit(f"filling {topic}: {written.messages} of {count} records written")
    return ProducedTopic(topic, PARTITIONS, message_bytes, count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds per client")
    arguments = parser.parse_args()
    counts = {100: 300_000, 1024: 150_000}
    if arguments.quick:
        counts = {size: count // 10 for size, count in counts.items()}
    print_machine_and_clients()
    results: list[Result] = []
    with sluice_broker(None, []) as target:
        for message_bytes, count in counts.items():
            produced = fill_topic(target.bootstrap, message_bytes, count)
            for name, runner in CLIENTS.items():
                received, seconds = runner(target.bootstrap, produced, TIME_LIMIT_S)
                if received < count:
                    raise SystemExit(
                        f"{name}: {received} of {count} records within {TIME_LIMIT_S:.0f} s"
                    )
                result = Result(name, message_bytes, received, seconds)
                print(
                    f"  {name}, {message_bytes} B: {result.messages_per_second:,.0f} msgs/s",
                    file=sys.stderr,
                )
                results.append(result)
    print_table(
        f"Consumer throughput (one `sluice serve`, {PARTITIONS} partitions, assign from "
        f"offset 0, up to {BATCH_RECORDS:,} records per call)",
        results,
    )


if __name__ == "__main__":
    main()
