"""Delayed delivery benchmark: how close to its due time a delayed record appears, and
what a large backlog of pending records costs the broker.

Starts one broker (``python -m sluice serve``) and runs two phases with confluent-kafka:

1. ``timing``: a producer sends ``--rate`` records/s for ``--seconds`` into a 4-partition
   topic, each with ``x-sluice-deliver-at`` = its send time + ``--delay-ms`` (so the due
   time is known to the millisecond); a consumer reading the topic notes when each record
   arrives. Reports the delivery-time error (arrival - due: p50, p99, max) and how many
   arrived early (must be none). The error includes the consumer's own fetch latency
   (``fetch.wait.max.ms=5``), as a user would see it.
2. ``backlog``: ``--pending`` records due tomorrow, produced as fast as possible into a new
   4-partition topic. Reports the parking rate, the broker's RSS before and after, and the
   size of the delay indexes on disk.

Prints Markdown for docs/performance.md.

    .venv/bin/python bench/delayed_delivery.py                       # ~1 minute
    .venv/bin/python bench/delayed_delivery.py --pending 100000     # a quick look
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition

from produce_consume import (
    create_topic,
    print_run_header,
    producer_config,
    sluice_broker,
    warm_up,
)

PARTITIONS = 4
TICK_S = 0.01
"""The producer sends a tick's share of the rate every 10 ms."""
DAY_MS = 86_400_000


@dataclass
class Timing:
    records: int
    errors_ms: list[float]
    early: int

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.errors_ms)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def produce_paced(bootstrap: str, topic: str, rate: int, seconds: float, delay_ms: int) -> int:
    """Send ``rate`` records/s for ``seconds``, each due ``delay_ms`` after it is sent;
    the value is the due time in epoch milliseconds. Returns how many were sent."""
    producer = Producer(producer_config(bootstrap, "all", **{"linger.ms": 2}))
    warm_up(producer, topic, PARTITIONS)
    per_tick = max(1, int(rate * TICK_S))
    sent = 0
    start = time.monotonic()
    next_tick = start
    while time.monotonic() - start < seconds:
        for _ in range(per_tick):
            due_ms = int(time.time() * 1000) + delay_ms
            producer.produce(
                topic,
                value=b"%d" % due_ms,
                partition=sent % PARTITIONS,
                headers=[("x-sluice-deliver-at", b"%d" % due_ms)],
            )
            sent += 1
        producer.poll(0)
        next_tick += TICK_S
        pause = next_tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # pacing the load, not synchronisation
    if producer.flush(60):
        raise SystemExit("the producer could not deliver every record in 60 s")
    return sent


def measure_timing(bootstrap: str, rate: int, seconds: float, delay_ms: int) -> Timing:
    topic = create_topic(bootstrap, PARTITIONS)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5,
            "fetch.min.bytes": 1,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    sent_box: list[int] = []
    producer = threading.Thread(
        target=lambda: sent_box.append(produce_paced(bootstrap, topic, rate, seconds, delay_ms))
    )
    producer.start()
    errors_ms: list[float] = []
    early = 0
    deadline = time.monotonic() + seconds + delay_ms / 1000 + 60
    try:
        while producer.is_alive() or len(errors_ms) < sum(sent_box):
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(errors_ms)} of {sum(sent_box)} records arrived")
            # poll() returns as soon as a record is there (consume(n, timeout) would wait
            # for n records or the timeout); then take what else is already fetched.
            first = consumer.poll(0.05)
            batch = [] if first is None else [first, *consumer.consume(1000, 0)]
            for message in batch:
                if message.error() is not None:
                    continue
                arrived_ms = time.time() * 1000
                value = message.value()
                if value is None or message.headers() is None:
                    continue  # the warm-up records
                error_ms = arrived_ms - int(value)
                early += error_ms < 0
                errors_ms.append(error_ms)
    finally:
        consumer.close()
        producer.join()
    return Timing(sum(sent_box), errors_ms, early)


@dataclass
class Backlog:
    records: int
    seconds: float
    rss_before: int
    rss_after: int
    index_bytes: int


def measure_backlog(bootstrap: str, pid: int, data_dir: Path, pending: int) -> Backlog:
    topic = create_topic(bootstrap, PARTITIONS)
    producer = Producer(producer_config(bootstrap, "all", **{"linger.ms": 20}))
    warm_up(producer, topic, PARTITIONS)
    process = psutil.Process(pid)
    rss_before = process.memory_info().rss
    due = b"%d" % (int(time.time() * 1000) + DAY_MS)
    start = time.monotonic()
    for i in range(pending):
        while True:
            try:
                producer.produce(
                    topic,
                    value=b"%d" % i,
                    partition=i % PARTITIONS,
                    headers=[("x-sluice-deliver-at", due)],
                )
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300):
        raise SystemExit("the producer could not deliver every record in 300 s")
    seconds = time.monotonic() - start
    rss_after = process.memory_info().rss
    index_bytes = sum(
        path.stat().st_size for path in data_dir.glob(f"{topic}-*/delays.sqlite*") if path.exists()
    )
    return Backlog(pending, seconds, rss_before, rss_after, index_bytes)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=int, default=10_000, help="records/s in the timing phase")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the timing phase")
    parser.add_argument("--delay-ms", type=int, default=1_000)
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    with sluice_broker(args.data_dir, []) as target:
        assert target.pid is not None and target.log_path is not None
        data_dir = args.data_dir or target.log_path.parent / "data"
        timing = measure_timing(target.bootstrap, args.rate, args.seconds, args.delay_ms)
        print(
            f"timing: {timing.records:,} records, error p50 {timing.percentile(0.5):.1f} ms",
            file=sys.stderr,
        )
        backlog = measure_backlog(target.bootstrap, target.pid, data_dir, args.pending)
    print_run_header()
    print(
        f"Timing: {timing.records:,} records at {args.rate:,}/s over {args.seconds:g} s, "
        f"each due {args.delay_ms} ms after it was sent."
    )
    print()
    print("| delivery-time error | p50 ms | p99 ms | max ms | mean ms | early |")
    print("|---|---:|---:|---:|---:|---:|")
    print(
        f"| arrival at a consumer − due time | {timing.percentile(0.5):.1f} "
        f"| {timing.percentile(0.99):.1f} | {max(timing.errors_ms):.1f} "
        f"| {statistics.fmean(timing.errors_ms):.1f} | {timing.early} |"
    )
    print()
    print("| backlog | records | parked/s | broker RSS before | after | delay indexes on disk |")
    print("|---|---:|---:|---:|---:|---:|")
    print(
        f"| due tomorrow | {backlog.records:,} | {backlog.records / backlog.seconds:,.0f} "
        f"| {backlog.rss_before / 2**20:.1f} MiB | {backlog.rss_after / 2**20:.1f} MiB "
        f"| {backlog.index_bytes / 2**20:.1f} MiB |"
    )


if __name__ == "__main__":
    main()
