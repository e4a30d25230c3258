"""Transactions benchmark: what a transaction costs next to an idempotent producer, on
one single-node broker.

confluent-kafka producers (acks=all, idempotence on) send ``--records`` values of 100
bytes round-robin over a 4-partition topic, in three modes:

1. ``idempotent``: no transactions (the baseline);
2. ``txn-100``: transactions of 100 records (begin, send 100, commit_transaction);
3. ``txn-1000``: transactions of 1,000 records.

Each mode first warms up (``warm_up()``: one record per partition, in a transaction for
the transactional modes), so that connecting, metadata, the producer id and the
coordinator lookup are not timed; then it runs until ``--records`` are delivered or
``--mode-seconds`` passed. It reports records/s, MB/s, transactions/s, the ratio of
records/s to the idempotent mode of the same run, and the commit latency (the time
``commit_transaction()`` takes: waiting for the partitions to be added to the
transaction, sending what is left, EndTxn, answered once the coordinator's decision is
written) as p50/p99, the share of commits that took 15 ms or more and the share of the
timed wall clock spent committing; and the broker's RSS at the end. After each mode a
read_committed consumer reads the whole topic to its end (once every transaction on it
is complete) and the run stops unless it finds exactly the records that were committed.
``--runs`` repeats everything; the report gives the median and the lowest–highest.
Prints Markdown for docs/performance.md.

    .venv/bin/python bench/transactions.py --runs 5                # ~5 minutes
    .venv/bin/python bench/transactions.py --records 20000         # a quick look
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from confluent_kafka import Consumer, IsolationLevel, KafkaError, Producer, TopicPartition

# confluent_kafka.admin imports OffsetSpec without re-exporting it, and leaves it untyped.
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from produce_consume import (
    create_topic,
    print_run_header,
    producer_config,
    sluice_broker,
    spread,
    warm_up,
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
END_POLL_INTERVAL_S = 0.01
SLOW_COMMIT_MS = 15.0
"""A commit this slow waited for a retry: librdkafka sends AddPartitionsToTxn again about
20 ms after CONCURRENT_TRANSACTIONS (the previous transaction not yet complete), and the
transaction's records cannot be sent before it succeeds; other commits take a few ms."""
LATEST = OffsetSpec.latest()  # type: ignore[no-untyped-call]


@dataclass
class ModeResult:
    records: int
    """Records sent while the clock ran (the warm-up's are in ``warm_up_records``)."""
    seconds: float
    transactions: int
    warm_up_records: int
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

    @property
    def commit_share(self) -> float | None:
        """The share of the timed wall clock spent inside ``commit_transaction()``."""
        return sum(self.commit_ms) / 1000 / self.seconds if self.commit_ms else None

    @property
    def slow_commit_share(self) -> float | None:
        if not self.commit_ms:
            return None
        return sum(1 for ms in self.commit_ms if ms >= SLOW_COMMIT_MS) / len(self.commit_ms)

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
    warmed = warm_up(producer, topic, PARTITIONS, transactional=bool(per_transaction))
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
    left = producer.flush(FLUSH_TIMEOUT_S)
    seconds = time.monotonic() - started
    if left:
        raise SystemExit(f"{left} records not acknowledged within {FLUSH_TIMEOUT_S}s")
    return ModeResult(sent, seconds, transactions, warmed, commit_ms)


def end_offsets(admin: AdminClient, topic: str, isolation: IsolationLevel) -> list[int]:
    """Each partition's end: the high watermark (read_uncommitted) or the last stable
    offset (read_committed), below which no transaction is open."""
    futures = admin.list_offsets(
        {TopicPartition(topic, p): LATEST for p in range(PARTITIONS)},
        isolation_level=isolation,
    )
    ends = {tp.partition: future.result(timeout=30).offset for tp, future in futures.items()}
    return [int(ends[p]) for p in range(PARTITIONS)]


def settled_ends(bootstrap: str, topic: str) -> list[int]:
    """The topic's end offsets once every transaction on it is complete: the markers of
    the last commit are written after ``commit_transaction()`` returns, and until they
    are the last stable offset is below the high watermark."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + COUNT_TIMEOUT_S
    while True:
        high = end_offsets(admin, topic, IsolationLevel.READ_UNCOMMITTED)
        stable = end_offsets(admin, topic, IsolationLevel.READ_COMMITTED)
        if stable == high:
            return high
        if time.monotonic() > deadline:
            raise SystemExit(
                f"transactions still open after {COUNT_TIMEOUT_S}s: last stable offsets "
                f"{stable}, high watermarks {high}"
            )
        time.sleep(END_POLL_INTERVAL_S)  # polling interval for the markers


def count_committed(bootstrap: str, topic: str) -> int:
    """Records a read_committed consumer finds reading every partition from offset 0 to
    its end (the high watermark, once no transaction is open)."""
    ends = settled_ends(bootstrap, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-count-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 1,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        count = 0
        reached: set[int] = set()
        deadline = time.monotonic() + COUNT_TIMEOUT_S
        while len(reached) < PARTITIONS:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"{topic}: partitions {sorted(reached)} of {PARTITIONS} read to their "
                    f"end within {COUNT_TIMEOUT_S}s"
                )
            for message in consumer.consume(10_000, 0.5):
                error = message.error()
                if error is None:
                    count += 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    # An end below the settled one would be a short read: keep reading.
                    partition, offset = message.partition(), message.offset()
                    if partition is not None and offset is not None and offset >= ends[partition]:
                        reached.add(partition)
                else:
                    raise SystemExit(f"{topic}: read_committed consumer: {error}")
        return count
    finally:
        consumer.close()


def percent(fraction: float | None) -> float | None:
    return None if fraction is None else 100 * fraction


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--records", type=int, default=1_000_000, help="records per mode (after the warm-up)"
    )
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
                committed = result.warm_up_records + result.records
                found = count_committed(target.bootstrap, topic)
                if found != committed:
                    raise SystemExit(
                        f"{mode}: a read_committed consumer found {found} records, "
                        f"{committed} were committed"
                    )
                results[mode].append(result)
                print(
                    f"run {run + 1} {mode}: {result.records_per_s:,.0f} records/s, "
                    f"{result.transactions_per_s:,.1f} transactions/s, commit p50/p99 "
                    f"{spread([result.commit_percentile(0.5)], 1)}/"
                    f"{spread([result.commit_percentile(0.99)], 1)} ms "
                    f"({spread([percent(result.slow_commit_share)], 1)} % "
                    f"≥ {SLOW_COMMIT_MS:.0f} ms), "
                    f"{found:,} records read back",
                    file=sys.stderr,
                )
            assert target.pid is not None
            rss_mib.append(psutil.Process(target.pid).memory_info().rss / 2**20)
    print_run_header()
    print(
        "| mode | records/s | MB/s | % of idempotent | transactions/s "
        f"| commit p50 ms | commit p99 ms | % of commits ≥ {SLOW_COMMIT_MS:.0f} ms "
        "| % of time in commit |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    baseline = results["idempotent"]
    for mode, runs in results.items():
        # Each run's ratio to the idempotent mode of the same run (same broker, same load).
        ratios = [r.records_per_s / b.records_per_s for r, b in zip(runs, baseline, strict=True)]
        print(
            f"| {mode} | {spread(r.records_per_s for r in runs)} "
            f"| {spread((r.mb_per_s for r in runs), 2)} "
            f"| {spread((100 * ratio for ratio in ratios), 1)} "
            f"| {spread((r.transactions_per_s for r in runs), 1) if MODES[mode] else '–'} "
            f"| {spread((r.commit_percentile(0.5) for r in runs), 1)} "
            f"| {spread((r.commit_percentile(0.99) for r in runs), 1)} "
            f"| {spread((percent(r.slow_commit_share) for r in runs), 1)} "
            f"| {spread(percent(r.commit_share) for r in runs)} |"
        )
    print()
    print(
        f"Broker RSS after each run: {spread(rss_mib)} MiB; a read_committed consumer read "
        "every mode's topic to its end and found exactly the committed records."
    )


if __name__ == "__main__":
    main()
