"""Consumer-group members as separate OS processes, and the test side that drives them.

Run as a script, this module is one group member (confluent-kafka, kafka-python or
aiokafka) that subscribes to a topic, processes what it polls, commits after processing
and reports every step as one JSON object per line on stdout::

    {"event": "started", "pid": 1234, "client": "confluent"}
    {"event": "assigned", "partitions": [0, 1]}       # eager: all; cooperative: added
    {"event": "revoked", "partitions": [0, 1]}          # also "lost" (librdkafka)
    {"event": "records", "records": [[partition, offset, value], ...]}  # processed
    {"event": "committed", "offsets": {"0": 17}}          # next offset to read
    {"event": "commit_failed", "error": "..."}
    {"event": "error", "error": "..."}                    # a consumer error event
    {"event": "closed"}

Every line also carries ``"at"``: the worker's ``time.monotonic()`` when it reported
(one clock for every process of the machine), so the test can order what different
members did without trusting the order their lines are read in.

With ``--group-protocol consumer`` a confluent-kafka member uses the consumer group
protocol of KIP-848 (``group.protocol=consumer``): the broker assigns partitions (its
``--assignor`` is then ``group.remote.assignor``) and sets the session and heartbeat
times, so the classic settings are not given (librdkafka refuses them).

It reads commands from stdin: ``close`` (or end of input) closes the consumer the way an
application shuts down (LeaveGroup, unless it is a static member) and exits.

Imported by the tests, :class:`WorkerPool` starts such processes and
:meth:`WorkerPool.wait_until` waits, with a deadline, for a condition over everything
they have reported; each line is time-stamped when it arrives.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiokafka
import aiokafka.coordinator.assignors.range
import aiokafka.coordinator.assignors.roundrobin
import aiokafka.errors
import confluent_kafka
import kafka
import kafka.coordinator.assignors.range
import kafka.coordinator.assignors.roundrobin
import kafka.errors
import kafka.structs
from client_helpers import produce_and_flush, producer_config

CLIENTS = ("confluent", "kafka-python", "aiokafka")
POLL_TIMEOUT_S = 0.2
"""How long one poll of a worker blocks; bounds how late it notices ``close``."""
BATCH_RECORDS_MAX = 200
CLOSE_TIMEOUT_S = 30.0
PRODUCER_FLUSH_TIMEOUT_S = 60.0
STDERR_LINES_KEPT = 200


# ── the worker process ─────────────────────────────────────────────────────────────────


class _Reporter:
    """Writes one JSON line per event; a lock keeps lines whole across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "at": time.monotonic(), **fields})
        with self._lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


def _decoded(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", errors="replace")


def _next_offsets(records: Iterable[list[Any]]) -> dict[int, int]:
    offsets: dict[int, int] = {}
    for partition, offset, _value in records:
        offsets[partition] = max(offsets.get(partition, -1), offset + 1)
    return offsets


def _watch_stdin(stop: threading.Event) -> None:
    for line in sys.stdin:
        if line.strip() == "close":
            break
    stop.set()


def _run_confluent(arguments: argparse.Namespace, stop: threading.Event, report: _Reporter):
    config: dict[str, Any] = {
        "bootstrap.servers": arguments.bootstrap,
        "group.id": arguments.group,
        "client.id": arguments.client_id,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": arguments.auto_commit_interval_ms is not None,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 100,
        "socket.timeout.ms": 10_000,
    }
    if arguments.group_protocol == "consumer":
        config["group.protocol"] = "consumer"
        if arguments.assignor is not None:
            config["group.remote.assignor"] = arguments.assignor
    else:
        config["session.timeout.ms"] = arguments.session_timeout_ms
        config["heartbeat.interval.ms"] = arguments.heartbeat_interval_ms
        config["partition.assignment.strategy"] = arguments.assignor or "range"
    if arguments.auto_commit_interval_ms is not None:
        config["auto.commit.interval.ms"] = arguments.auto_commit_interval_ms
    if arguments.instance_id:
        config["group.instance.id"] = arguments.instance_id
    for setting in arguments.config:
        name, _, value = setting.partition("=")
        config[name] = value

    def on_assign(
        _consumer: confluent_kafka.Consumer, partitions: list[confluent_kafka.TopicPartition]
    ) -> None:
        report("assigned", partitions=sorted(p.partition for p in partitions))

    def on_revoke(
        _consumer: confluent_kafka.Consumer, partitions: list[confluent_kafka.TopicPartition]
    ) -> None:
        report("revoked", partitions=sorted(p.partition for p in partitions))

    def on_lost(
        _consumer: confluent_kafka.Consumer, partitions: list[confluent_kafka.TopicPartition]
    ) -> None:
        report("lost", partitions=sorted(p.partition for p in partitions))

    consumer = confluent_kafka.Consumer(config)
    consumer.subscribe([arguments.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    report("started", pid=os.getpid(), client="confluent")
    while not stop.is_set():
        processed = []
        for message in consumer.consume(BATCH_RECORDS_MAX, POLL_TIMEOUT_S):
            if message.error() is not None:
                report("error", error=str(message.error()))
                continue
            processed.append([message.partition(), message.offset(), _decoded(message.value())])
        if not processed:
            continue
        report("records", records=processed)
        if arguments.auto_commit_interval_ms is not None:
            continue
        offsets = _next_offsets(processed)
        try:
            consumer.commit(
                offsets=[
                    confluent_kafka.TopicPartition(arguments.topic, p, o)
                    for p, o in offsets.items()
                ],
                asynchronous=False,
            )
        except confluent_kafka.KafkaException as error:
            report("commit_failed", error=str(error))
        else:
            report("committed", offsets=offsets)
    consumer.close()
    report("closed")


def _run_kafka_python(arguments: argparse.Namespace, stop: threading.Event, report: _Reporter):
    assignors = {
        "range": kafka.coordinator.assignors.range.RangePartitionAssignor,
        "roundrobin": kafka.coordinator.assignors.roundrobin.RoundRobinPartitionAssignor,
    }

    class Listener(kafka.ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            report("revoked", partitions=sorted(p.partition for p in revoked))

        def on_partitions_assigned(self, assigned):
            report("assigned", partitions=sorted(p.partition for p in assigned))

    auto_commit = arguments.auto_commit_interval_ms is not None
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=arguments.bootstrap,
        group_id=arguments.group,
        client_id=arguments.client_id,
        auto_offset_reset="earliest",
        enable_auto_commit=auto_commit,
        auto_commit_interval_ms=arguments.auto_commit_interval_ms or 5_000,
        session_timeout_ms=arguments.session_timeout_ms,
        heartbeat_interval_ms=arguments.heartbeat_interval_ms,
        partition_assignment_strategy=[assignors[arguments.assignor or "range"]],
        group_instance_id=arguments.instance_id,
        fetch_max_wait_ms=100,
        request_timeout_ms=30_000,
    )
    consumer.subscribe([arguments.topic], listener=Listener())
    report("started", pid=os.getpid(), client="kafka-python")
    while not stop.is_set():
        processed = [
            [record.partition, record.offset, _decoded(record.value)]
            for batch in consumer.poll(
                timeout_ms=int(POLL_TIMEOUT_S * 1000), max_records=BATCH_RECORDS_MAX
            ).values()
            for record in batch
        ]
        if not processed:
            continue
        report("records", records=processed)
        if auto_commit:
            continue
        offsets = _next_offsets(processed)
        try:
            consumer.commit(
                {
                    kafka.TopicPartition(arguments.topic, p): kafka.structs.OffsetAndMetadata(
                        o, "", -1
                    )
                    for p, o in offsets.items()
                }
            )
        except kafka.errors.KafkaError as error:
            report("commit_failed", error=repr(error))
        else:
            report("committed", offsets=offsets)
    consumer.close()
    report("closed")


def _run_aiokafka(arguments: argparse.Namespace, stop: threading.Event, report: _Reporter):
    assignors = {
        "range": aiokafka.coordinator.assignors.range.RangePartitionAssignor,
        "roundrobin": aiokafka.coordinator.assignors.roundrobin.RoundRobinPartitionAssignor,
    }

    class Listener(aiokafka.ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            report("revoked", partitions=sorted(p.partition for p in revoked))

        def on_partitions_assigned(self, assigned):
            report("assigned", partitions=sorted(p.partition for p in assigned))

    auto_commit = arguments.auto_commit_interval_ms is not None

    async def main() -> None:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=arguments.bootstrap,
            group_id=arguments.group,
            client_id=arguments.client_id,
            auto_offset_reset="earliest",
            enable_auto_commit=auto_commit,
            auto_commit_interval_ms=arguments.auto_commit_interval_ms or 5_000,
            session_timeout_ms=arguments.session_timeout_ms,
            heartbeat_interval_ms=arguments.heartbeat_interval_ms,
            partition_assignment_strategy=(assignors[arguments.assignor or "range"],),
            group_instance_id=arguments.instance_id,
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        consumer.subscribe([arguments.topic], listener=Listener())
        report("started", pid=os.getpid(), client="aiokafka")
        try:
            while not stop.is_set():
                batches = await consumer.getmany(
                    timeout_ms=int(POLL_TIMEOUT_S * 1000), max_records=BATCH_RECORDS_MAX
                )
                processed = [
                    [record.partition, record.offset, _decoded(record.value)]
                    for batch in batches.values()
                    for record in batch
                ]
                if not processed:
                    continue
                report("records", records=processed)
                if auto_commit:
                    continue
                offsets = _next_offsets(processed)
                try:
                    await consumer.commit(
                        {aiokafka.TopicPartition(arguments.topic, p): o for p, o in offsets.items()}
                    )
                except aiokafka.errors.KafkaError as error:
                    report("commit_failed", error=repr(error))
                else:
                    report("committed", offsets=offsets)
        finally:
            await consumer.stop()
        report("closed")

    asyncio.run(main())


def _parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=CLIENTS, default="confluent")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--client-id", default="group-worker")
    parser.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic")
    parser.add_argument(
        "--assignor",
        default=None,
        help="classic: partition.assignment.strategy (default range); consumer: "
        "group.remote.assignor (default: the broker's, uniform)",
    )
    parser.add_argument("--session-timeout-ms", type=int, default=6_000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1_000)
    parser.add_argument("--instance-id", default=None, help="group.instance.id (static member)")
    parser.add_argument(
        "--auto-commit-interval-ms",
        type=int,
        default=None,
        help="commit automatically at this interval instead of after each processed batch",
    )
    parser.add_argument("--config", action="append", default=[], help="extra librdkafka name=value")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    arguments = _parse_arguments(argv)
    stop = threading.Event()
    threading.Thread(target=_watch_stdin, args=(stop,), daemon=True).start()
    runner = {
        "confluent": _run_confluent,
        "kafka-python": _run_kafka_python,
        "aiokafka": _run_aiokafka,
    }[arguments.client]
    runner(arguments, stop, _Reporter())


# ── the test side ──────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Event:
    arrived_s: float
    """time.monotonic() in the test process when the line arrived."""
    worker: str
    kind: str
    data: dict[str, Any]


@dataclass(frozen=True)
class Processed:
    worker: str
    partition: int
    offset: int
    value: str | None
    arrived_s: float


@dataclass
class GroupWorker:
    """One worker process. Its state is read under the pool's lock (``WorkerPool.lock``)."""

    name: str
    process: subprocess.Popen[str]
    pool: WorkerPool
    events: list[Event] = field(default_factory=list)
    stderr_tail: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=STDERR_LINES_KEPT)
    )
    output_ended: bool = False
    exit_expected: bool = False
    """Set by close and kill; a worker that ends without it crashed."""
    died_at_s: float | None = None
    """time.monotonic() once a SIGKILLed worker is known dead: what it owned, it owns no
    more from then on."""

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def is_running(self) -> bool:
        return self.process.poll() is None

    def assignment(self, until_event: int | None = None) -> frozenset[int]:
        """The partitions the member holds after its events so far (or the first
        ``until_event``): assigned adds, revoked and lost remove. That fits both the
        eager protocol (full sets) and the cooperative one (increments)."""
        owned: set[int] = set()
        for event in self.events[:until_event]:
            if event.kind == "assigned":
                owned |= set(event.data["partitions"])
            elif event.kind in ("revoked", "lost"):
                owned -= set(event.data["partitions"])
        return frozenset(owned)

    def of_kind(self, *kinds: str, since: int = 0) -> list[Event]:
        return [event for event in self.events[since:] if event.kind in kinds]

    def processed(self) -> list[Processed]:
        return [
            Processed(self.name, partition, offset, value, event.arrived_s)
            for event in self.of_kind("records")
            for partition, offset, value in event.data["records"]
        ]

    def committed(self) -> dict[int, int]:
        """Highest next-offset per partition this member reported committed."""
        offsets: dict[int, int] = {}
        for event in self.of_kind("committed"):
            for partition, offset in event.data["offsets"].items():
                offsets[int(partition)] = max(offsets.get(int(partition), -1), offset)
        return offsets

    def closed_cleanly(self) -> bool:
        return bool(self.of_kind("closed"))

    def request_close(self) -> None:
        """Ask the member to close (LeaveGroup unless static); does not wait."""
        self.exit_expected = True
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.process.stdin.write("close\n")
            self.process.stdin.flush()

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Close the member the way an application shuts down and wait for the exit."""
        self.request_close()
        try:
            exit_code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"worker {self.name} did not close within {timeout_s}s\n{self.describe()}"
            ) from None
        self.pool.wait_until(lambda: self.output_ended, 10.0, f"{self.name}'s output to end")
        assert exit_code == 0 and self.closed_cleanly(), (
            f"worker {self.name} exited with {exit_code} without closing cleanly\n{self.describe()}"
        )

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no final commit, no goodbye."""
        self.exit_expected = True
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(CLOSE_TIMEOUT_S)
        self.died_at_s = time.monotonic()

    def describe(self) -> str:
        with self.pool.lock:
            recent = [
                f"  +{e.arrived_s - self.pool.started_s:7.3f}s {e.kind} " + json.dumps(e.data)[:300]
                for e in self.events
                if e.kind != "records"
            ][-25:]
            records = len(self.processed())
            assignment = sorted(self.assignment())
            stderr = list(self.stderr_tail)[-30:]
        return "\n".join(
            [
                f"worker {self.name} pid={self.pid} running={self.is_running} "
                f"exit={self.process.returncode} assignment={assignment} records={records}",
                *recent,
                "  stderr:",
                *(f"    {line}" for line in stderr),
            ]
        )


class WorkerPool:
    """Starts worker processes and waits on what they report. One lock guards every
    worker's event list; reader threads notify ``changed`` on each line and at exit."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.workers: list[GroupWorker] = []
        self.started_s = time.monotonic()

    def spawn(
        self,
        name: str,
        *,
        bootstrap: str,
        topic: str,
        group: str,
        client: str = "confluent",
        assignor: str | None = None,
        group_protocol: str = "classic",
        session_timeout_ms: int = 6_000,
        heartbeat_interval_ms: int = 1_000,
        instance_id: str | None = None,
        auto_commit_interval_ms: int | None = None,
        config: dict[str, str] | None = None,
        wait_started_s: float = 30.0,
    ) -> GroupWorker:
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--client",
            client,
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--client-id",
            name,
            "--group-protocol",
            group_protocol,
            "--session-timeout-ms",
            str(session_timeout_ms),
            "--heartbeat-interval-ms",
            str(heartbeat_interval_ms),
        ]
        if assignor is not None:
            argv += ["--assignor", assignor]
        if instance_id is not None:
            argv += ["--instance-id", instance_id]
        if auto_commit_interval_ms is not None:
            argv += ["--auto-commit-interval-ms", str(auto_commit_interval_ms)]
        for key, value in (config or {}).items():
            argv += ["--config", f"{key}={value}"]
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        worker = GroupWorker(name, process, self)
        with self.lock:
            self.workers.append(worker)
        threading.Thread(target=self._read_events, args=(worker,), daemon=True).start()
        threading.Thread(target=self._read_stderr, args=(worker,), daemon=True).start()
        self.wait_until(
            lambda: bool(worker.of_kind("started")), wait_started_s, f"worker {name} to start"
        )
        return worker

    def _read_events(self, worker: GroupWorker) -> None:
        assert worker.process.stdout is not None
        for line in worker.process.stdout:
            arrived_s = time.monotonic()
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                worker.stderr_tail.append(f"(stdout) {line.rstrip()}")
                continue
            kind = data.pop("event")
            with self.changed:
                worker.events.append(Event(arrived_s, worker.name, kind, data))
                self.changed.notify_all()
        with self.changed:
            worker.output_ended = True
            self.changed.notify_all()

    def _read_stderr(self, worker: GroupWorker) -> None:
        assert worker.process.stderr is not None
        for line in worker.process.stderr:
            with self.lock:
                worker.stderr_tail.append(line.rstrip())

    def wait_until(self, condition: Callable[[], bool], timeout_s: float, what: str) -> float:
        """Wait until ``condition()`` (evaluated under the lock, after each report) holds;
        return the seconds waited. Raises AssertionError naming ``what`` at the deadline."""
        started_s = time.monotonic()
        deadline_s = started_s + timeout_s
        with self.changed:
            while not condition():
                crashed = [w.name for w in self.workers if w.output_ended and not w.exit_expected]
                if crashed:
                    raise AssertionError(
                        f"worker {', '.join(crashed)} died while waiting for {what}\n"
                        f"{self.describe()}"
                    )
                remaining_s = deadline_s - time.monotonic()
                if remaining_s <= 0:
                    raise AssertionError(
                        f"timed out after {timeout_s:.1f}s waiting for {what}\n{self.describe()}"
                    )
                self.changed.wait(remaining_s)
        return time.monotonic() - started_s

    def quiet_for(self, condition: Callable[[], bool], window_s: float) -> bool:
        """Observe for ``window_s`` seconds; False as soon as ``condition()`` holds (an
        event that must not happen did), True if it never did."""
        deadline_s = time.monotonic() + window_s
        with self.changed:
            while not condition():
                remaining_s = deadline_s - time.monotonic()
                if remaining_s <= 0:
                    return True
                self.changed.wait(remaining_s)
        return False

    def processed(self, workers: Iterable[GroupWorker] | None = None) -> list[Processed]:
        with self.lock:
            return [p for w in (workers or self.workers) for p in w.processed()]

    def describe(self) -> str:
        return "\n".join(worker.describe() for worker in self.workers)

    def stop_all(self) -> None:
        """Close every worker still running (SIGKILL if it does not exit in time)."""
        running = [w for w in self.workers if w.is_running]
        for worker in running:
            worker.request_close()
        for worker in running:
            try:
                worker.process.wait(CLOSE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                worker.kill()


@contextlib.contextmanager
def worker_pool() -> Iterator[WorkerPool]:
    pool = WorkerPool()
    try:
        yield pool
    finally:
        pool.stop_all()


class ContinuousProducer:
    """Produces one message per partition every few milliseconds until stopped, in a
    thread, keeping every delivery report."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self._producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 60_000,
            }
        )
        self._topic = topic
        self._partitions = partitions
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.delivered: list[tuple[int, int, str]] = []
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ContinuousProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _on_delivery(
        self, error: confluent_kafka.KafkaError | None, message: confluent_kafka.Message
    ) -> None:
        with self._lock:
            if error is not None:
                self.errors.append(str(error))
            else:
                value = message.value().decode()
                self.delivered.append((message.partition(), message.offset(), value))

    def _run(self) -> None:
        sequence = 0
        while not self._stop.is_set():
            for partition in range(self._partitions):
                self._producer.produce(
                    self._topic,
                    value=f"continuous-{sequence}".encode(),
                    partition=partition,
                    on_delivery=self._on_delivery,
                )
                sequence += 1
            self._producer.poll(0.01)  # serves delivery reports; also paces the loop
        self._producer.flush(PRODUCER_FLUSH_TIMEOUT_S)

    def stop(self) -> dict[tuple[int, int], str]:
        """Stop, wait for every delivery report; (partition, offset) → value."""
        self._stop.set()
        self._thread.join(PRODUCER_FLUSH_TIMEOUT_S + 5)
        assert not self._thread.is_alive(), "the producer thread did not finish"
        with self._lock:
            assert not self.errors, f"delivery failed: {self.errors[:5]}"
            return {(p, o): value for p, o, value in self.delivered}


# ── conditions over a pool ─────────────────────────────────────────────────────────────


def split_evenly(workers: list[GroupWorker], partition_count: int) -> Callable[[], bool]:
    """Every partition owned by exactly one of ``workers``, each owning its share
    (partition_count / len(workers), rounded down or up)."""

    def condition() -> bool:
        assignments = [worker.assignment() for worker in workers]
        owned = [p for assignment in assignments for p in assignment]
        low = partition_count // len(workers)
        return sorted(owned) == list(range(partition_count)) and all(
            low <= len(a) <= low + 1 for a in assignments
        )

    return condition


def all_processed(
    pool: WorkerPool, expected: Iterable[tuple[int, int]], workers: list[GroupWorker] | None = None
) -> Callable[[], bool]:
    wanted = set(expected)

    def condition() -> bool:
        seen = {(p.partition, p.offset) for p in pool.processed(workers)}
        return wanted <= seen

    return condition


def duplicates(processed: Iterable[Processed]) -> dict[tuple[int, int], list[Processed]]:
    by_position: dict[tuple[int, int], list[Processed]] = collections.defaultdict(list)
    for item in processed:
        by_position[(item.partition, item.offset)].append(item)
    return {position: items for position, items in by_position.items() if len(items) > 1}


def spawn_members(
    pool: WorkerPool, count: int, bootstrap: str, topic: str, group: str, **settings: Any
) -> list[GroupWorker]:
    """``count`` members ``member-0``… of one group, each started (``WorkerPool.spawn``)."""
    return [
        pool.spawn(f"member-{i}", bootstrap=bootstrap, topic=topic, group=group, **settings)
        for i in range(count)
    ]


def produce_round_robin(
    bootstrap: str, topic: str, partitions: int, count: int, tag: str
) -> dict[tuple[int, int], str]:
    """``count`` records ``tag-i`` over the partitions in turn, acknowledged by all
    replicas; (partition, offset) → value."""
    producer = confluent_kafka.Producer(producer_config(bootstrap, acks="all"))
    delivered = produce_and_flush(
        producer,
        topic,
        [{"partition": i % partitions, "value": f"{tag}-{i}".encode()} for i in range(count)],
    )
    return {(d.partition, d.offset): (d.value or b"").decode() for d in delivered}


def assert_processed_exactly_once(
    pool: WorkerPool, expected: dict[tuple[int, int], str], workers: list[GroupWorker]
) -> None:
    """Every expected record processed once by ``workers``, with its value, each by a
    member that owned its partition at the end."""
    processed = [p for p in pool.processed(workers) if (p.partition, p.offset) in expected]
    repeated = duplicates(processed)
    assert not repeated, f"processed more than once: {sorted(repeated.items())[:5]}"
    got = {(p.partition, p.offset): p.value for p in processed}
    assert got == expected, (
        f"missing {sorted(set(expected) - set(got))[:10]}, "
        f"wrong values {[k for k in got if got[k] != expected.get(k)][:10]}"
    )


def assert_each_member_processed_only_its_partitions(workers: list[GroupWorker]) -> None:
    for worker in workers:
        foreign = {p.partition for p in worker.processed()} - worker.assignment()
        assert not foreign, f"{worker.name} processed partitions {foreign} it does not own"


def owned_twice(workers: Iterable[GroupWorker]) -> list[str]:
    """Every moment a partition was owned by two members at once, by what the members
    reported in the order they did it (their own clock, ``at``): an assignment while
    another member held the partition since its own assignment, not yet revoked or lost,
    and not dead. Empty when ownership only ever moved from one member to the next."""
    steps: list[tuple[float, str, str, frozenset[int]]] = []
    for worker in workers:
        for event in worker.of_kind("assigned", "revoked", "lost", "closed"):
            partitions = frozenset(event.data.get("partitions", ()))
            steps.append((event.data["at"], worker.name, event.kind, partitions))
        if worker.died_at_s is not None:
            steps.append((worker.died_at_s, worker.name, "closed", frozenset()))
    owner: dict[int, str] = {}
    overlaps = []
    for at, name, kind, partitions in sorted(steps, key=lambda step: step[0]):
        if kind == "assigned":
            for partition in sorted(partitions):
                holder = owner.get(partition)
                if holder is not None and holder != name:
                    overlaps.append(f"at {at:.3f} {name} was given {partition}, held by {holder}")
                owner[partition] = name
        else:
            gone = set(owner) if kind == "closed" else partitions
            for partition in gone:
                if owner.get(partition) == name:
                    del owner[partition]
    return overlaps


if __name__ == "__main__":
    main()
