"""Produce/consume benchmark over the Kafka protocol, with confluent-kafka (librdkafka).

Measures, against one broker:

1. producer throughput (messages/s, MB/s) for each message size and acks level;
2. publish -> acknowledgement latency (p50/p99/max) at a fixed rate (default 1,000 msg/s),
   from the producer's delivery callbacks;
3. consumer throughput, reading back what phase 1 wrote;
4. the broker's resident memory (peak RSS, sampled) while ingesting into a 100-partition
   topic.

By default it starts its own ``python -m sluice serve`` on a free loopback port with a
temporary data directory. ``--bootstrap host:port`` targets a running broker instead
(``--system kafka --bootstrap 127.0.0.1:9092`` for a side-by-side run against another
Kafka-compatible system: same code path, different bootstrap; pass ``--broker-pid`` to
sample its memory). Every phase is bounded in message count and in time, and only
loopback addresses are accepted.

    .venv/bin/python bench/produce_consume.py                 # full run, ~2-3 minutes
    .venv/bin/python bench/produce_consume.py --quick         # smoke run, ~30 seconds
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import psutil
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # confluent_kafka.admin does not re-export it

from processes import free_loopback_port, serving

MB = 1_000_000
RSS_SAMPLE_INTERVAL_S = 0.1
WARM_UP_TIMEOUT_S = 60.0


# ── the machine ────────────────────────────────────────────────────────────────────────


def source_revision() -> str:
    """The git commit of this checkout (with "+changes" when the tree is dirty)."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{commit}{'+changes' if dirty else ''}" or "unknown"


def describe_machine() -> dict[str, str]:
    cpu_model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu_model,
        "cores": f"{psutil.cpu_count(logical=False)} physical / {os.cpu_count()} logical",
        "ram": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": f"{platform.system()} {platform.release()}",
        "client": f"confluent-kafka {confluent_kafka.version()}, "
        f"librdkafka {confluent_kafka.libversion()[0]}",
    }


# ── the broker under test ──────────────────────────────────────────────────────────────


def print_run_header() -> None:
    """The command, the Sluice revision and the machine, as Markdown for
    docs/performance.md (the head of a benchmark's report)."""
    machine = describe_machine()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    print(f"Command: `{command}`, Sluice {source_revision()}")
    print()
    print("| | " + " | ".join(f"`{name}`" for name in machine) + " |")
    print("|---" * (len(machine) + 1) + "|")
    print("| machine | " + " | ".join(machine.values()) + " |")
    print()


def require_loopback(bootstrap: str) -> None:
    host = bootstrap.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise SystemExit(f"--bootstrap must be a loopback address, not {host!r}") from None
    if not address.is_loopback:
        raise SystemExit(f"--bootstrap must be a loopback address, not {host!r}")


@dataclass
class Target:
    system: str
    bootstrap: str
    pid: int | None
    log_path: Path | None = None


@contextmanager
def sluice_broker(
    data_dir: Path | None, overrides: list[str], port: int | None = None
) -> Iterator[Target]:
    """Start ``python -m sluice serve`` (on ``port``, else a free one) and stop it with
    SIGTERM afterwards."""
    owned_dir = None
    if data_dir is None:
        owned_dir = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
        data_dir = owned_dir / "data"
    port = port or free_loopback_port()
    log_path = data_dir.parent / "broker.log"
    argv = [sys.executable, "-m", "sluice", "serve", "--host", "127.0.0.1", "--port", str(port)]
    # No HTTP listener unless asked for (-o http.port=...): port 8080 may be taken; no
    # Schema Registry (8081) either.
    argv += ["--data-dir", str(data_dir), "-o", "http.port=0", "-o", "schema.registry.listeners="]
    for override in overrides:
        argv += ["-o", override]
    try:
        with serving(argv, port, log_path) as process:
            yield Target("sluice", f"127.0.0.1:{port}", process.pid, log_path)
    finally:
        if owned_dir is not None:
            shutil.rmtree(owned_dir, ignore_errors=True)


class RssSampler:
    """Samples a process's resident set size (children included) in a thread."""

    def __init__(self, pid: int | None) -> None:
        self._process = psutil.Process(pid) if pid else None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.samples: list[int] = []

    def current_bytes(self) -> int | None:
        if self._process is None:
            return None
        try:
            total = self._process.memory_info().rss
            for child in self._process.children(recursive=True):
                total += child.memory_info().rss
        except psutil.Error:
            return None
        return int(total)

    def _run(self) -> None:
        while not self._stop.wait(RSS_SAMPLE_INTERVAL_S):
            value = self.current_bytes()
            if value is not None:
                self.samples.append(value)

    def __enter__(self) -> RssSampler:
        value = self.current_bytes()
        if value is not None:
            self.samples.append(value)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak_bytes(self) -> int | None:
        return max(self.samples) if self.samples else None


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time a process has used so far (None without a pid)."""
    if pid is None:
        return None
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


# ── phases ─────────────────────────────────────────────────────────────────────────────


def create_topic(bootstrap: str, partitions: int) -> str:
    name = f"bench-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout=60)
    return name


def producer_config(bootstrap: str, acks: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "enable.idempotence": False,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 512 * 1024,
        "compression.type": "none",
        "message.timeout.ms": 120_000,
        **extra,
    }


def warm_up(producer: Producer, topic: str, partitions: int, transactional: bool = False) -> int:
    """Send one record to every partition of ``topic`` and wait until all are acknowledged
    (committed, in one transaction, when ``transactional``; ``init_transactions()`` must
    have been called). Run before a clock starts, so that connecting, the first metadata
    round trips, the producer id and, for a transaction, the coordinator lookup are not
    timed. Returns the number of records written, which a count of the topic must add."""
    if transactional:
        producer.begin_transaction()
    for partition in range(partitions):
        producer.produce(topic, b"warm-up", partition=partition)
    if transactional:
        producer.commit_transaction(WARM_UP_TIMEOUT_S)
    left = producer.flush(WARM_UP_TIMEOUT_S)
    if left:
        raise SystemExit(f"warm-up: {left} records not acknowledged in {WARM_UP_TIMEOUT_S}s")
    return partitions


def spread(values: Iterable[float | None], digits: int = 0) -> str:
    """ "median (lowest–highest)" with ``digits`` decimals and thousands separators; None
    values (a figure a run has not got) are left out, "–" when none is left."""
    present = sorted(v for v in values if v is not None)
    if not present:
        return "–"
    number = f"{{:,.{digits}f}}".format
    middle = number(statistics.median(present))
    if len(present) == 1:
        return middle
    return f"{middle} ({number(present[0])}–{number(present[-1])})"


@dataclass
class ThroughputResult:
    phase: str
    message_bytes: int
    acks: str
    messages: int
    seconds: float
    errors: int = 0
    broker_cpu_seconds: float | None = None
    """CPU time (user + system, all threads) the broker process used during the phase:
    what the broker's work costs, much less sensitive to other load on the machine than
    msgs/s."""

    @property
    def broker_cpu_us_per_message(self) -> float | None:
        if self.broker_cpu_seconds is None or not self.messages:
            return None
        return self.broker_cpu_seconds * 1e6 / self.messages

    @property
    def messages_per_second(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def megabytes_per_second(self) -> float:
        return self.messages * self.message_bytes / self.seconds / MB if self.seconds else 0.0


@dataclass
class ProducedTopic:
    topic: str
    partitions: int
    message_bytes: int
    messages: int


def produce_flat_out(
    bootstrap: str,
    topic: str,
    partitions: int,
    message_bytes: int,
    acks: str,
    message_count: int,
    time_limit_s: float,
    keyed: bool = False,
) -> ThroughputResult:
    """Produce as fast as the client accepts, until ``message_count`` or ``time_limit_s``;
    the clock stops when the last delivery report arrives."""
    producer = Producer(producer_config(bootstrap, acks))
    payload = os.urandom(message_bytes)
    delivered = 0
    errors = 0

    def on_delivery(error: Any, _message: Any) -> None:
        nonlocal delivered, errors
        if error is None:
            delivered += 1
        else:
            errors += 1

    started = time.perf_counter()
    deadline = started + time_limit_s
    produced = 0
    while produced < message_count and time.perf_counter() < deadline:
        key = produced.to_bytes(4, "big") if keyed else None
        partition = -1 if keyed else produced % partitions
        try:
            producer.produce(topic, payload, key, partition=partition, on_delivery=on_delivery)
            produced += 1
        except BufferError:
            producer.poll(0.01)
        if produced % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    seconds = time.perf_counter() - started
    return ThroughputResult("produce", message_bytes, acks, delivered, seconds, errors)


@dataclass
class LatencyResult:
    rate_per_second: int
    acks: str
    samples: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    errors: int


def measure_latency(
    bootstrap: str, acks: str, rate_per_second: int, seconds: float, message_bytes: int
) -> LatencyResult:
    """Send at a fixed rate; latency = delivery callback time - produce() call time."""
    topic = create_topic(bootstrap, 1)
    producer = Producer(producer_config(bootstrap, acks, **{"linger.ms": 0}))
    payload = os.urandom(message_bytes)
    latencies_s: list[float] = []
    errors = 0

    def on_delivery_sent_at(sent_at: float) -> Any:
        def on_delivery(error: Any, _message: Any) -> None:
            nonlocal errors
            if error is None:
                latencies_s.append(time.perf_counter() - sent_at)
            else:
                errors += 1

        return on_delivery

    warm_up(producer, topic, 1)  # the first sample is not a cold start

    total = int(rate_per_second * seconds)
    interval_s = 1.0 / rate_per_second
    started = time.perf_counter()
    for index in range(total):
        send_at = started + index * interval_s
        while (wait_s := send_at - time.perf_counter()) > 0:
            producer.poll(wait_s)  # serves delivery callbacks while waiting for the slot
        producer.produce(
            topic, payload, partition=0, on_delivery=on_delivery_sent_at(time.perf_counter())
        )
    producer.flush(60)
    ordered = sorted(latencies_s)
    if not ordered:
        return LatencyResult(
            rate_per_second, acks, 0, float("nan"), float("nan"), float("nan"), errors
        )
    quantiles = statistics.quantiles(ordered, n=100, method="inclusive")
    return LatencyResult(
        rate_per_second=rate_per_second,
        acks=acks,
        samples=len(ordered),
        p50_ms=quantiles[49] * 1000,
        p99_ms=quantiles[98] * 1000,
        max_ms=ordered[-1] * 1000,
        errors=errors,
    )


def consume_flat_out(
    bootstrap: str, produced: ProducedTopic, time_limit_s: float
) -> ThroughputResult:
    """Read the whole topic with assign() at offset 0; the clock runs from assign() to
    the last message, so connecting and the first metadata round trip are included.
    (An absolute offset, not OFFSET_BEGINNING: librdkafka waits ~0.5 s on its offset
    query timer for a logical offset, whatever the broker does.)"""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s) whenever its
            # local queue holds queued.min.messages; that would measure the client.
            "fetch.queue.backoff.ms": 1,
        }
    )
    try:
        started = time.perf_counter()
        consumer.assign([TopicPartition(produced.topic, p, 0) for p in range(produced.partitions)])
        received = 0
        finished = started
        deadline = started + time_limit_s
        while received < produced.messages and time.perf_counter() < deadline:
            # Ask for no more than what is left, or consume() waits out its timeout.
            wanted = min(10_000, produced.messages - received)
            for message in consumer.consume(wanted, 0.5):
                if message.error() is None:
                    received += 1
            finished = time.perf_counter()
    finally:
        consumer.close()
    return ThroughputResult("consume", produced.message_bytes, "-", received, finished - started)


@dataclass
class MemoryResult:
    partitions: int
    message_bytes: int
    messages: int
    seconds: float
    rss_before_bytes: int | None
    rss_peak_bytes: int | None
    rss_after_bytes: int | None


def measure_memory(
    target: Target, partitions: int, message_bytes: int, message_count: int, time_limit_s: float
) -> MemoryResult:
    sampler = RssSampler(target.pid)
    before = sampler.current_bytes()
    topic = create_topic(target.bootstrap, partitions)
    with sampler:
        result = produce_flat_out(
            target.bootstrap,
            topic,
            partitions,
            message_bytes,
            "1",
            message_count,
            time_limit_s,
            keyed=True,
        )
    return MemoryResult(
        partitions=partitions,
        message_bytes=message_bytes,
        messages=result.messages,
        seconds=result.seconds,
        rss_before_bytes=before,
        rss_peak_bytes=sampler.peak_bytes,
        rss_after_bytes=sampler.current_bytes(),
    )


# ── report ─────────────────────────────────────────────────────────────────────────────


@dataclass
class Report:
    system: str
    machine: dict[str, str]
    settings: dict[str, Any]
    throughput: list[ThroughputResult] = field(default_factory=list)
    latency: list[LatencyResult] = field(default_factory=list)
    memory: MemoryResult | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "machine": self.machine,
            "settings": self.settings,
            "throughput": [
                {
                    **asdict(r),
                    "messages_per_second": r.messages_per_second,
                    "megabytes_per_second": r.megabytes_per_second,
                    "broker_cpu_us_per_message": r.broker_cpu_us_per_message,
                }
                for r in self.throughput
            ],
            "latency": [asdict(r) for r in self.latency],
            "memory": asdict(self.memory) if self.memory else None,
        }


def mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:.0f} MiB"


def print_report(report: Report) -> None:
    print()
    print(f"## {report.system}: produce/consume benchmark")
    print()
    for key, value in report.machine.items():
        print(f"- {key}: {value}")
    for key, value in report.settings.items():
        print(f"- {key}: {value}")
    print()
    print(
        "| phase | message | acks | messages | seconds | msgs/s | MB/s | errors "
        "| broker CPU µs/msg |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in report.throughput:
        cpu = r.broker_cpu_us_per_message
        print(
            f"| {r.phase} | {r.message_bytes} B | {r.acks} | {r.messages:,} | {r.seconds:.2f} "
            f"| {r.messages_per_second:,.0f} | {r.megabytes_per_second:.1f} | {r.errors} "
            f"| {'n/a' if cpu is None else f'{cpu:.2f}'} |"
        )
    if report.latency:
        print()
        print("| publish→ack latency | acks | samples | p50 | p99 | max | errors |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for lat in report.latency:
            print(
                f"| {lat.rate_per_second:,} msg/s | {lat.acks} | {lat.samples:,} "
                f"| {lat.p50_ms:.2f} ms | {lat.p99_ms:.2f} ms | {lat.max_ms:.2f} ms "
                f"| {lat.errors} |"
            )
    if report.memory:
        m = report.memory
        print()
        print(
            "| broker memory while ingesting | messages | seconds | RSS before | peak RSS | after |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        print(
            f"| {m.partitions} partitions, {m.message_bytes} B, acks=1 | {m.messages:,} "
            f"| {m.seconds:.1f} | {mib(m.rss_before_bytes)} | {mib(m.rss_peak_bytes)} "
            f"| {mib(m.rss_after_bytes)} |"
        )
    print()


# ── main ───────────────────────────────────────────────────────────────────────────────


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--system", default="sluice", help="label for the report (sluice, kafka, ...)"
    )
    parser.add_argument("--bootstrap", help="target a running broker (loopback only)")
    parser.add_argument("--broker-pid", type=int, help="pid of the --bootstrap broker, for RSS")
    parser.add_argument("--data-dir", type=Path, help="data directory for the started broker")
    parser.add_argument(
        "-o", "--override", action="append", default=[], help="broker setting key=value"
    )
    parser.add_argument("--sizes", default="100,1024", help="message sizes in bytes")
    parser.add_argument("--acks", default="1,all", help="acks levels for the throughput phase")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of throughput topics")
    parser.add_argument(
        "--messages", type=int, default=1_000_000, help="messages per throughput run"
    )
    parser.add_argument("--phase-seconds", type=float, default=30.0, help="time limit per phase")
    parser.add_argument("--latency-rate", type=int, default=1000, help="messages/s for latency")
    parser.add_argument("--latency-seconds", type=float, default=15.0)
    parser.add_argument("--latency-bytes", type=int, default=100)
    parser.add_argument("--memory-partitions", type=int, default=100)
    parser.add_argument("--memory-messages", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    parser.add_argument(
        "--produce-only", action="store_true", help="only the producer throughput phases"
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    arguments = parser.parse_args(argv)
    if arguments.quick:
        arguments.messages = 20_000
        arguments.phase_seconds = 10.0
        arguments.latency_seconds = 3.0
        arguments.memory_messages = 20_000
    return arguments


def run(target: Target, arguments: argparse.Namespace) -> Report:
    sizes = [int(s) for s in arguments.sizes.split(",")]
    acks_levels = arguments.acks.split(",")
    report = Report(
        system=target.system,
        machine=describe_machine(),
        settings={
            "bootstrap": target.bootstrap,
            "checkout": source_revision(),
            "throughput": (
                f"up to {arguments.messages:,} msgs or {arguments.phase_seconds:.0f} s a run, "
                f"{arguments.partitions} partitions, linger.ms=5, no compression"
            ),
        },
    )
    produced_topics: list[ProducedTopic] = []
    for size in sizes:
        for acks in acks_levels:
            topic = create_topic(target.bootstrap, arguments.partitions)
            cpu_before = cpu_seconds(target.pid)
            result = produce_flat_out(
                target.bootstrap,
                topic,
                arguments.partitions,
                size,
                acks,
                arguments.messages,
                arguments.phase_seconds,
            )
            cpu_after = cpu_seconds(target.pid)
            if cpu_before is not None and cpu_after is not None:
                result.broker_cpu_seconds = cpu_after - cpu_before
            report.throughput.append(result)
            print(
                f"produce {size} B acks={acks}: {result.messages_per_second:,.0f} msgs/s",
                file=sys.stderr,
            )
            if acks == acks_levels[0]:
                produced_topics.append(
                    ProducedTopic(topic, arguments.partitions, size, result.messages)
                )
    if arguments.produce_only:
        return report
    for produced in produced_topics:
        cpu_before = cpu_seconds(target.pid)
        result = consume_flat_out(target.bootstrap, produced, arguments.phase_seconds)
        cpu_after = cpu_seconds(target.pid)
        if cpu_before is not None and cpu_after is not None:
            result.broker_cpu_seconds = cpu_after - cpu_before
        report.throughput.append(result)
        print(
            f"consume {produced.message_bytes} B: {result.messages_per_second:,.0f} msgs/s",
            file=sys.stderr,
        )
    for acks in ("1", "all"):
        latency = measure_latency(
            target.bootstrap,
            acks,
            arguments.latency_rate,
            arguments.latency_seconds,
            arguments.latency_bytes,
        )
        report.latency.append(latency)
        print(
            f"latency acks={acks}: p50 {latency.p50_ms:.2f} ms p99 {latency.p99_ms:.2f} ms",
            file=sys.stderr,
        )
    report.memory = measure_memory(
        target,
        arguments.memory_partitions,
        1024,
        arguments.memory_messages,
        arguments.phase_seconds,
    )
    return report


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    try:
        if arguments.bootstrap:
            require_loopback(arguments.bootstrap)
            report = run(
                Target(arguments.system, arguments.bootstrap, arguments.broker_pid), arguments
            )
        else:
            with sluice_broker(arguments.data_dir, arguments.override) as target:
                report = run(target, arguments)
    except KafkaException as error:
        print(f"benchmark failed: {error}", file=sys.stderr)
        return 1
    print_report(report)
    if arguments.json:
        arguments.json.write_text(json.dumps(report.to_json(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
