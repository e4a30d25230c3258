"""Share-group benchmark: how fast a share group drains one partition next to one classic
consumer, on one single-node broker.

``--records`` values of 100 bytes are preloaded into a new 1-partition topic (librdkafka
batches of ``--batch-bytes``), then read to the end by:

1. ``classic``: one confluent-kafka Consumer of a classic group, offsets auto-committed
   (the baseline: one partition, one reader, no per-record acknowledgement);
2. ``share-1``, ``share-4``, ``share-8``: 1, 4 or 8 confluent-kafka ShareConsumers of one
   share group (``share.auto.offset.reset=earliest``) in implicit acknowledgement mode:
   the records of a poll are accepted with the next poll (carried by its ShareFetch), the
   last ones by a commit before closing.

Every reader is its own process (so that the readers share the two cores with the broker
fairly, not one interpreter), and every mode has a new topic. The readers make their
client, wait for one start signal, then assign the partition (classic) or subscribe
(share) and read. The time from the signal to the first records (joining the group
included) is reported apart; the rate is the records received after that first poll,
over the time from it until the readers together have received every record (or
``--mode-seconds`` passed). Each reader reports the offsets it received, and the run
stops unless every record was received once (a share group hands a record to one member
at a time, and with the 30 s lock nothing expires here). For share groups it also checks
that every record was acknowledged: the readers commit and close, and a fresh member
then polls for ``--quiet-seconds`` and must get nothing. Also printed: the broker's CPU
time per record. ``--runs`` repeats everything; the report gives the median and the
lowest–highest. Prints Markdown for docs/performance.md.

    .venv/bin/python bench/share_groups.py --runs 3                 # ~1 minute
    .venv/bin/python bench/share_groups.py --records 20000          # a quick look
    .venv/bin/python bench/share_groups.py -o group.share.partition.max.record.locks=5000 \
        -o group.share.max.partition.max.record.locks=10000 -c max.poll.records=2000
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.synchronize
import sys
import time
import uuid
from dataclasses import dataclass
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from produce_consume import (
    cpu_seconds,
    create_topic,
    print_run_header,
    producer_config,
    sluice_broker,
    spread,
)

VALUE_BYTES = 100
MODES: dict[str, int] = {"classic": 1, "share-1": 1, "share-4": 4, "share-8": 8}
"""Mode name → reader processes."""
POLL_S = 0.1
CLASSIC_BATCH = 500
"""Records one consume() of the classic reader returns at most (a share consumer's poll
returns what one ShareFetch acquired: at most the in-flight window)."""
READY_TIMEOUT_S = 60.0
FLUSH_TIMEOUT_S = 120.0
CLOSE_TIMEOUT_S = 60.0


# ── a reader process ───────────────────────────────────────────────────────────────────


@dataclass
class Outcome:
    offsets: list[int]
    """Every offset this reader received."""
    reached_at: float | None
    """Wall time this reader saw the readers' total reach the target, if it did."""
    first: tuple[float, int] | None
    """Wall time of this reader's first records, and how many came in that poll."""


def reader(
    mode: str,
    bootstrap: str,
    topic: str,
    group: str,
    target: int,
    seconds: float,
    received: Any,  # multiprocessing.Value("q"): records received by all readers
    ready: Queue[str],
    start: multiprocessing.synchronize.Event,
    results: Queue[Outcome],
    share_config: dict[str, str],
) -> None:
    """Read until the readers together have ``target`` records or ``seconds`` passed,
    and put what this reader saw in ``results``."""
    consumer: Consumer | ShareConsumer
    if mode == "classic":
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                # Fetching ahead stops at queued.min.messages (100,000) and then waits
                # fetch.queue.backoff.ms (1 s by default) even once the queue is drained.
                "fetch.queue.backoff.ms": 1,
            }
        )
    else:
        consumer = ShareConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "share.acknowledgement.mode": "implicit",
                **share_config,
            }
        )
    ready.put(mode)
    start.wait(READY_TIMEOUT_S)
    # Only now: a classic consumer fetches ahead as soon as it is assigned.
    if isinstance(consumer, Consumer):
        consumer.assign([TopicPartition(topic, 0, 0)])
    else:
        consumer.subscribe([topic])
    offsets: list[int] = []
    reached_at: float | None = None
    first: tuple[float, int] | None = None
    deadline = time.monotonic() + seconds
    while received.value < target and time.monotonic() < deadline:
        if isinstance(consumer, Consumer):
            messages = consumer.consume(CLASSIC_BATCH, POLL_S)
        else:
            messages = list(consumer.poll(POLL_S))
        got = [o for m in messages if m.error() is None and (o := m.offset()) is not None]
        if not got:
            continue
        offsets += got
        first = first or (time.time(), len(got))
        with received.get_lock():
            received.value += len(got)
            if received.value >= target and reached_at is None:
                reached_at = time.time()
    if isinstance(consumer, ShareConsumer):
        # Implicit mode accepts the last poll's records at the next poll or commit; the
        # client's close() alone releases them (it sends no acknowledgement for them).
        consumer.commit_sync(CLOSE_TIMEOUT_S)
    consumer.close()
    results.put(Outcome(offsets, reached_at, first))


# ── one mode ───────────────────────────────────────────────────────────────────────────


@dataclass
class ModeResult:
    records: int
    first_record_s: float
    """From the start signal to the first records anywhere (joining included)."""
    drained: int
    """Records received after the first poll that returned any."""
    seconds: float
    """From that first poll to the last record."""
    broker_cpu_s: float | None
    """Broker CPU time from the start signal until every reader was done."""

    @property
    def records_per_s(self) -> float:
        return self.drained / self.seconds

    @property
    def broker_cpu_us_per_record(self) -> float | None:
        if self.broker_cpu_s is None or not self.records:
            return None
        return self.broker_cpu_s / self.records * 1e6


def preload(bootstrap: str, topic: str, records: int, batch_bytes: int) -> None:
    producer = Producer(
        producer_config(bootstrap, "all", **{"batch.size": batch_bytes, "linger.ms": 5})
    )
    payload = b"x" * VALUE_BYTES
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, payload, partition=0)
                break
            except BufferError:
                producer.poll(0.001)  # the local queue is full: serve delivery reports
    left = producer.flush(FLUSH_TIMEOUT_S)
    if left:
        raise SystemExit(f"preload: {left} records not acknowledged within {FLUSH_TIMEOUT_S}s")


def set_earliest(bootstrap: str, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "share.auto.offset.reset",
                "earliest",
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def nothing_left(bootstrap: str, topic: str, group: str, seconds: float) -> int:
    """Records a fresh share-group member gets within ``seconds`` (0 expected)."""
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([topic])
    found = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found += sum(1 for m in consumer.poll(POLL_S) if m.error() is None)
    consumer.close()
    return found


def run_mode(
    bootstrap: str, broker_pid: int | None, mode: str, args: argparse.Namespace
) -> ModeResult:
    topic = create_topic(bootstrap, 1)
    preload(bootstrap, topic, args.records, args.batch_bytes)
    group = f"bench-{mode}-{uuid.uuid4().hex[:8]}"
    if mode != "classic":
        set_earliest(bootstrap, group)
    context = multiprocessing.get_context("spawn")
    received = context.Value("q", 0)
    ready: Queue[str] = context.Queue()
    start = context.Event()
    results: Queue[Outcome] = context.Queue()
    processes = [
        context.Process(
            target=reader,
            args=(
                mode,
                bootstrap,
                topic,
                group,
                args.records,
                args.mode_seconds,
                received,
                ready,
                start,
                results,
                dict(setting.split("=", 1) for setting in args.share_config),
            ),
        )
        for _ in range(MODES[mode])
    ]
    for process in processes:
        process.start()
    for _ in processes:
        ready.get(timeout=READY_TIMEOUT_S)
    cpu_before = cpu_seconds(broker_pid)
    started = time.time()
    start.set()
    outcomes = [results.get(timeout=args.mode_seconds + CLOSE_TIMEOUT_S) for _ in processes]
    cpu_after = cpu_seconds(broker_pid)
    for process in processes:
        process.join(CLOSE_TIMEOUT_S)
    offsets = [o for outcome in outcomes for o in outcome.offsets]
    reached = [o.reached_at for o in outcomes if o.reached_at is not None]
    ended = min(reached) if reached else started + args.mode_seconds
    firsts = sorted(o.first for o in outcomes if o.first is not None)
    if not firsts:
        raise SystemExit(f"{mode}: no reader received anything in {args.mode_seconds}s")
    first_at, first_count = firsts[0]
    distinct = len(set(offsets))
    if distinct != len(offsets):
        raise SystemExit(f"{mode}: {len(offsets) - distinct} records received twice")
    if mode != "classic":
        left = nothing_left(bootstrap, topic, group, args.quiet_seconds)
        if left:
            raise SystemExit(f"{mode}: {left} records were not acknowledged")
    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return ModeResult(distinct, first_at - started, distinct - first_count, ended - first_at, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000, help="records preloaded")
    parser.add_argument(
        "--batch-bytes", type=int, default=16_384, help="the preloading producer's batch.size"
    )
    parser.add_argument("--mode-seconds", type=float, default=120.0, help="time cap per mode")
    parser.add_argument(
        "--quiet-seconds", type=float, default=2.0, help="how long a fresh member must get nothing"
    )
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting (group.share.partition.max.record.locks=1000, ...)",
    )
    parser.add_argument(
        "-c",
        "--share-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a ShareConsumer setting (max.poll.records=2000, ...)",
    )
    args = parser.parse_args()
    results: dict[str, list[ModeResult]] = {mode: [] for mode in MODES}
    with sluice_broker(args.data_dir, args.override) as target:
        for run in range(args.runs):
            for mode in MODES:
                result = run_mode(target.bootstrap, target.pid, mode, args)
                results[mode].append(result)
                print(
                    f"run {run + 1} {mode}: {result.records:,} records, first after "
                    f"{result.first_record_s * 1000:.0f} ms, then {result.drained:,} in "
                    f"{result.seconds:.2f} s: {result.records_per_s:,.0f} records/s, broker "
                    f"{spread([result.broker_cpu_us_per_record], 1)} µs CPU/record",
                    file=sys.stderr,
                )
    print_run_header()
    print(
        "| readers | records | first record after, ms | records/s after it | % of classic "
        "| broker CPU µs per record |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    baseline = results["classic"]
    for mode, runs in results.items():
        ratios = [r.records_per_s / b.records_per_s for r, b in zip(runs, baseline, strict=True)]
        print(
            f"| {mode} | {spread(r.records for r in runs)} "
            f"| {spread(r.first_record_s * 1000 for r in runs)} "
            f"| {spread(r.records_per_s for r in runs)} "
            f"| {spread((100 * ratio for ratio in ratios), 1)} "
            f"| {spread((r.broker_cpu_us_per_record for r in runs), 1)} |"
        )


if __name__ == "__main__":
    main()
