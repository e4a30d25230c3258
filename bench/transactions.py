"""Transactions benchmark: what a transaction costs next to an idempotent producer, on
one single-node broker.

confluent-kafka producers (acks=all, idempotence on) send ``--records`` values of 100
bytes round-robin over a 4-partition topic, in three modes:

1. ``idempotent``: no transactions (the baseline);
2. ``txn-100``: transactions of 100 records (begin, send 100, commit_transaction);
3. ``txn-1000``: transactions of 1,000 records.

Each mode runs until ``--records`` are delivered or ``--mode-seconds`` passed. It
reports records/s, MB/s, transactions/s and the commit latency (the time
``commit_transaction()`` takes: flushing what is left, EndTxn, the markers written into
every partition with acks=all) as p50/p99; and the broker's RSS at the end. After each
mode a read_committed consumer counts what the topic holds and the run stops if that
differs from what was committed. ``--runs`` repeats everything; the report gives the
median and the spread. Prints Markdown for docs/performance.md.

    .venv/bin/python bench/transactions.py --runs 3
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition

from produce_consume import (
    create_topic,
    describe_machine,
    producer_config,
    sluice_broker,
    source_revision,
)

PARTITIONS = 4
VALUE_BYTES = 100
MB = 10**6
MODES: dict[str, int] = {"idempotent": 0, "txn-100": 100, "txn-1000": 1000}
"""Mode name → records per transaction (0: no transactions)."""
FLUSH_TIMEOUT_S = 60.0
COMMIT_TIMEOUT_S = 60.0
COUNT_TIMEOUT_S = 120.0
POLL_EVERY_RECORDS = 1000


@dataclass
class ModeResult:
    records: int
    seconds: float
    transactions: int
    commit_ms: list[float] = field(default_factory=list)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * VALUE_BYTES / MB / self.seconds

    @property
    def transactions_per_s(self) -> float:
        return self.transactions / self.seconds

    def commit_percentile(self, fraction: float) -> float | None:
        if not self.commit_ms:
            return None
        ordered = sorted(self.commit_ms)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run_mode(
    bootstrap: str, topic: str, per_transaction: int, args: argparse.Namespace
) -> ModeResult:
    config = producer_config(bootstrap, "all", **{"enable.idempotence": True})
    if per_transaction:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
        config["transaction.timeout.ms"] = config["message.timeout.ms"]
    producer = Producer(config)
    payload = b"x" * VALUE_BYTES
    if per_transaction:
        producer.init_transactions(COMMIT_TIMEOUT_S)
    sent = transactions = 0
    commit_ms: list[float] = []
    started = time.monotonic()
    deadline = started + args.mode_seconds
    while sent < args.records and time.monotonic() < deadline:
        batch = per_transaction or POLL_EVERY_RECORDS
        if per_transaction:
            producer.begin_transaction()
        for i in range(batch):
            while True:
                try:
                    producer.produce(topic, payload, partition=(sent + i) % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.001)  # the local queue is full: serve delivery reports
        producer.poll(0)
        sent += batch
        if per_transaction:
            before = time.monotonic()
            producer.commit_transaction(COMMIT_TIMEOUT_S)
            commit_ms.append((time.monotonic() - before) * 1000)
            transactions += 1
    producer.flush(FLUSH_TIMEOUT_S)
    seconds = time.monotonic() - started
    return ModeResult(sent, seconds, transactions, commit_ms)


def count_committed(bootstrap: str, topic: str, expected: int) -> int:
    """Records a read_committed consumer finds in the topic (it reads until it has
    ``expected``, or the time is up)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-count-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        count = 0
        deadline = time.monotonic() + COUNT_TIMEOUT_S
        while count < expected and time.monotonic() < deadline:
            count += sum(1 for m in consumer.consume(10_000, 0.5) if m.error() is None)
        return count
    finally:
        consumer.close()


def spread(values: Iterable[float | None], digits: int = 0) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "–"
    middle = statistics.median(present)
    if len(present) == 1:
        return f"{middle:,.{digits}f}"
    return f"{middle:,.{digits}f} ({min(present):,.{digits}f}–{max(present):,.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000, help="records per mode")
    parser.add_argument("--mode-seconds", type=float, default=60.0, help="time cap per mode")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    results: dict[str, list[ModeResult]] = {mode: [] for mode in MODES}
    rss_mib: list[float] = []
    with sluice_broker(args.data_dir, []) as target:
        for run in range(args.runs):
            for mode, per_transaction in MODES.items():
                topic = create_topic(target.bootstrap, PARTITIONS)
                result = run_mode(target.bootstrap, topic, per_transaction, args)
                found = count_committed(target.bootstrap, topic, result.records)
                if found != result.records:
                    raise SystemExit(
                        f"{mode}: a read_committed consumer found {found} records, "
                        f"{result.records} were committed"
                    )
                results[mode].append(result)
                print(
                    f"run {run + 1} {mode}: {result.records_per_s:,.0f} records/s, "
                    f"{result.transactions_per_s:,.1f} transactions/s",
                    file=sys.stderr,
                )
            assert target.pid is not None
            rss_mib.append(psutil.Process(target.pid).memory_info().rss / 2**20)
    machine = describe_machine()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    print(f"Command: `{command}`, Sluice {source_revision()}")
    print()
    print("| | " + " | ".join(f"`{name}`" for name in machine) + " |")
    print("|---" * (len(machine) + 1) + "|")
    print("| machine | " + " | ".join(machine.values()) + " |")
    print()
    print("| mode | records/s | MB/s | transactions/s | commit p50 ms | commit p99 ms |")
    print("|---|---|---|---|---|---|")
    for mode, runs in results.items():
        print(
            f"| {mode} | {spread(r.records_per_s for r in runs)} "
            f"| {spread((r.mb_per_s for r in runs), 2)} "
            f"| {spread((r.transactions_per_s for r in runs), 1) if MODES[mode] else '–'} "
            f"| {spread((r.commit_percentile(0.5) for r in runs), 1)} "
            f"| {spread((r.commit_percentile(0.99) for r in runs), 1)} |"
        )
    print()
    print(
        f"Broker RSS after each run: {spread(rss_mib)} MiB; every mode's records counted "
        "back by a read_committed consumer."
    )


if __name__ == "__main__":
    main()
