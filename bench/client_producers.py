"""Producer throughput of four Python clients against one ``sluice serve``.

Compares, on the same broker and topic layout (4 partitions, acks=1, no compression,
``linger_ms=5``, keyless records, idempotence off):

- ``sluice.Producer`` (asyncio; ``await send()`` per record, then ``flush()``)
- ``sluice.sync.Producer`` (blocking ``send()`` per record from a plain thread)
- kafka-python ``KafkaProducer`` (``send()`` per record, ``flush()``)
- aiokafka ``AIOKafkaProducer`` (``await send()`` per record, then ``flush()``)
- confluent-kafka ``Producer`` (librdkafka, ``produce()`` + ``poll(0)``, ``flush()``)

The pure-Python clients use 64 KiB batches (sluice's default); librdkafka keeps its
own defaults (it batches up to 1 MB). The clock runs from the first send to the last
acknowledgement, after one warm-up record has connected the client and loaded the
topic's metadata. Each run is bounded by a message count and a time limit.

    .venv/bin/python bench/client_producers.py            # ~1-2 minutes
    .venv/bin/python bench/client_producers.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiokafka
import confluent_kafka
import kafka

import sluice
from produce_consume import create_topic, describe_machine, sluice_broker, source_revision

PARTITIONS = 4
LINGER_MS = 5
BATCH_BYTES = 64 * 1024
TIME_LIMIT_S = 60.0


@dataclass
class Result:
    client: str
    message_bytes: int
    messages: int
    seconds: float

    @property
    def messages_per_second(self) -> float:
        return self.messages / self.seconds

    @property
    def megabytes_per_second(self) -> float:
        return self.messages * self.message_bytes / self.seconds / 1e6


def print_machine_and_clients() -> None:
    """The machine block, then the versions of every client compared (both client
    benchmarks print this)."""
    print("## Machine\n")
    for key, value in describe_machine().items():
        if key != "client":
            print(f"- {key}: {value}")
    print(
        f"- clients: sluice {sluice.__version__} ({source_revision()}), "
        f"kafka-python {kafka.__version__}, aiokafka {aiokafka.__version__}, "
        f"confluent-kafka {confluent_kafka.version()[0]} "
        f"(librdkafka {confluent_kafka.libversion()[0]})"
    )


def print_table(title: str, results: list[Result]) -> None:
    print(f"\n## {title}\n")
    print("| client | record | messages | seconds | msgs/s | MB/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.client} | {r.message_bytes} B | {r.messages:,} | {r.seconds:.2f} | "
            f"{r.messages_per_second:,.0f} | {r.megabytes_per_second:.1f} |"
        )


def run_sluice(bootstrap: str, topic: str, payload: bytes, count: int) -> tuple[int, float]:
    async def produce() -> tuple[int, float]:
        async with sluice.Producer(
            bootstrap_servers=bootstrap, acks=1, linger_ms=LINGER_MS, batch_size=BATCH_BYTES
        ) as producer:
            await producer.send_and_wait(topic, payload)  # metadata and connections ready
            started = time.perf_counter()
            futures = [await producer.send(topic, payload) for _ in range(count)]
            await producer.flush()
            seconds = time.perf_counter() - started
            return _succeeded(futures), seconds

    return asyncio.run(produce())


def _succeeded(futures: list[asyncio.Future[Any]]) -> int:
    """Delivered records, counted after the clock stopped (as for kafka-python)."""
    return sum(1 for future in futures if future.done() and future.exception() is None)


def run_sluice_sync(bootstrap: str, topic: str, payload: bytes, count: int) -> tuple[int, float]:
    with sluice.sync.Producer(
        bootstrap, acks=1, linger_ms=LINGER_MS, batch_size=BATCH_BYTES
    ) as producer:
        producer.send_and_wait(topic, payload)
        started = time.perf_counter()
        futures = [producer.send(topic, payload) for _ in range(count)]
        producer.flush(120)
        seconds = time.perf_counter() - started
        return sum(1 for future in futures if future.exception(0) is None), seconds


def run_kafka_python(bootstrap: str, topic: str, payload: bytes, count: int) -> tuple[int, float]:
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=LINGER_MS,
        batch_size=BATCH_BYTES,
        enable_idempotence=False,
    )
    try:
        producer.send(topic, payload).get(30)
        started = time.perf_counter()
        futures = [producer.send(topic, payload) for _ in range(count)]
        producer.flush(120)
        seconds = time.perf_counter() - started
        return sum(1 for future in futures if future.succeeded()), seconds
    finally:
        producer.close()


def run_aiokafka(bootstrap: str, topic: str, payload: bytes, count: int) -> tuple[int, float]:
    async def produce() -> tuple[int, float]:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks=1, linger_ms=LINGER_MS, max_batch_size=BATCH_BYTES
        )
        await producer.start()
        try:
            await producer.send_and_wait(topic, payload)
            started = time.perf_counter()
            futures = [await producer.send(topic, payload) for _ in range(count)]
            await producer.flush()
            seconds = time.perf_counter() - started
            return _succeeded(futures), seconds
        finally:
            await producer.stop()

    return asyncio.run(produce())


def run_confluent(bootstrap: str, topic: str, payload: bytes, count: int) -> tuple[int, float]:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": LINGER_MS,
            "enable.idempotence": False,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    delivered = 0

    def on_delivery(error: Any, _message: Any) -> None:
        nonlocal delivered
        if error is None:
            delivered += 1

    producer.produce(topic, payload)
    producer.flush(30)
    started = time.perf_counter()
    produced = 0
    while produced < count:
        try:
            producer.produce(topic, payload, on_delivery=on_delivery)
            produced += 1
        except BufferError:
            producer.poll(0.01)
        if produced % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    return delivered, time.perf_counter() - started


CLIENTS: dict[str, tuple[Callable[[str, str, bytes, int], tuple[int, float]], float]] = {
    # name → (runner, share of the message count: slow clients get fewer messages)
    "sluice.Producer (asyncio)": (run_sluice, 1.0),
    "sluice.sync.Producer": (run_sluice_sync, 0.25),
    "kafka-python KafkaProducer": (run_kafka_python, 0.5),
    "aiokafka AIOKafkaProducer": (run_aiokafka, 0.5),
    "confluent-kafka Producer": (run_confluent, 1.0),
}


def measure(bootstrap: str, name: str, message_bytes: int, count: int) -> Result:
    runner, share = CLIENTS[name]
    topic = create_topic(bootstrap, PARTITIONS)
    payload = os.urandom(message_bytes)
    messages = max(1000, int(count * share))
    delivered, seconds = runner(bootstrap, topic, payload, messages)
    if delivered != messages:
        raise SystemExit(f"{name}: {delivered} of {messages} records delivered")
    return Result(name, message_bytes, messages, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds per client")
    arguments = parser.parse_args()
    counts = {100: 200_000, 1024: 100_000}
    if arguments.quick:
        counts = {size: count // 10 for size, count in counts.items()}
    print_machine_and_clients()
    results: list[Result] = []
    with sluice_broker(None, []) as target:
        for message_bytes, count in counts.items():
            for name in CLIENTS:
                result = measure(target.bootstrap, name, message_bytes, count)
                print(
                    f"  {name}, {message_bytes} B: {result.messages_per_second:,.0f} msgs/s",
                    file=sys.stderr,
                )
                results.append(result)
    print_table(
        f"Producer throughput (one `sluice serve`, {PARTITIONS} partitions, acks=1, "
        f"linger {LINGER_MS} ms, no compression)",
        results,
    )


if __name__ == "__main__":
    main()
