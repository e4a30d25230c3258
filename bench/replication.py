"""Replication benchmark: what replication factor 3 with acks=all costs next to factor 1,
on one three-broker cluster (a private ZooKeeper and three brokers on loopback).

Two topics with the same partition count: ``rf1`` (one replica) and ``rf3`` (three
replicas, min.insync.replicas=2), leaders spread over the three brokers. confluent-kafka
producers with acks=all and idempotence on send 1 KiB values. Each round measures, for
each topic (the order alternates between rounds):

1. throughput: ``--messages`` (or ``--phase-seconds``, whichever first) as fast as the
   client accepts, round-robin over the partitions, ``linger.ms=5``; msg/s and MiB/s,
   the clock stopping at the last delivery report;
2. latency, at each rate of ``--latency-rate`` (a comma-separated list of msg/s, e.g.
   ``1000,3000``): that rate for ``--latency-seconds`` on a monotonic schedule,
   round-robin over the partitions, ``linger.ms=0``; publish→ack latency = delivery
   callback time − ``produce()`` time, p50/p99/max, and the brokers' CPU per message.

Also the CPU time each broker used in each phase, and at the end each broker's RSS (from
/proc/<pid>/status). It prints medians over ``--repeat`` rounds, the machine and the
command, as Markdown ready for docs/performance.md.

    .venv/bin/python bench/replication.py --repeat 5
    .venv/bin/python bench/replication.py --latency-rate 1000,3000
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # confluent_kafka.admin does not re-export it

from local_cluster import LocalCluster, exit_on_sigterm, wait_until
from produce_consume import describe_machine, producer_config, source_revision, spread

BROKERS = 3
MESSAGE_BYTES = 1024
MIB = 2**20
TOPICS: dict[str, tuple[int, dict[str, str]]] = {
    "rf1": (1, {}),
    "rf3": (BROKERS, {"min.insync.replicas": str(BROKERS - 1)}),
}
"""Topic name → (replication factor, topic configs)."""
FLUSH_TIMEOUT_S = 60.0
"""How long the producer may take to deliver what it still holds after a phase."""
POLL_EVERY_MESSAGES = 1000
"""The flat-out producer serves delivery callbacks after this many sends."""
POLL_GRANULARITY_S = 0.001
"""librdkafka's poll() waits whole milliseconds: for less it returns at once."""
PACING_STEP_S = 0.0002
"""While pacing, a delivery report waits at most about this long to be served (so much
may a measured latency exceed the true one)."""


@dataclass(frozen=True)
class CpuSeconds:
    """CPU time (user + system, all threads) used during a phase: by each broker (by node
    id) and by this process (the producer, librdkafka's threads included)."""

    brokers: list[float]
    client: float


class CpuClock:
    """Reads the CPU time the brokers and this process have used so far."""

    def __init__(self, cluster: LocalCluster) -> None:
        self._brokers = [psutil.Process(cluster.brokers[n].pid) for n in sorted(cluster.brokers)]
        self._client = psutil.Process()
        self._started = self._read()

    def _read(self) -> list[float]:
        times = [p.cpu_times() for p in (*self._brokers, self._client)]
        return [t.user + t.system for t in times]

    def elapsed(self) -> CpuSeconds:
        now = self._read()
        used = [after - before for after, before in zip(now, self._started, strict=True)]
        return CpuSeconds(brokers=used[:-1], client=used[-1])


@dataclass(frozen=True)
class Throughput:
    messages: int
    seconds: float
    undelivered: int
    cpu: CpuSeconds

    @property
    def messages_per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def mib_per_s(self) -> float:
        return self.messages_per_s * MESSAGE_BYTES / MIB

    @property
    def broker_cpu_us_per_message(self) -> float:
        return sum(self.cpu.brokers) * 1e6 / max(self.messages, 1)

    @property
    def client_cpu_us_per_message(self) -> float:
        return self.cpu.client * 1e6 / max(self.messages, 1)


@dataclass(frozen=True)
class Latency:
    samples: int
    undelivered: int
    seconds: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    cpu: CpuSeconds

    @property
    def broker_cpu_us_per_message(self) -> float:
        return sum(self.cpu.brokers) * 1e6 / max(self.samples, 1)


def producer(bootstrap: str, linger_ms: int) -> Producer:
    """acks=all and idempotent; otherwise the single-broker benchmark's settings."""
    idempotent = {
        "enable.idempotence": True,
        "linger.ms": linger_ms,
        "message.timeout.ms": int(FLUSH_TIMEOUT_S * 1000),
    }
    return Producer(producer_config(bootstrap, "all", **idempotent))


def warm_up(client: Producer, topic: str, partitions: int, payload: bytes) -> None:
    """One delivered message per partition: connections, metadata and the producer id
    are in place before the clock starts."""
    for partition in range(partitions):
        client.produce(topic, payload, partition=partition)
    if client.flush(FLUSH_TIMEOUT_S):
        raise RuntimeError(f"warm-up of {topic} not delivered within {FLUSH_TIMEOUT_S}s")


def measure_throughput(
    cluster: LocalCluster, topic: str, partitions: int, count: int, limit_s: float
) -> Throughput:
    """Send up to ``count`` messages as fast as the client takes them, for at most
    ``limit_s``; the clock stops at the last delivery report."""
    client = producer(cluster.bootstrap, linger_ms=5)
    payload = os.urandom(MESSAGE_BYTES)
    warm_up(client, topic, partitions, payload)
    delivered = 0

    def on_delivery(error: Any, _message: Any) -> None:
        nonlocal delivered
        if error is None:
            delivered += 1

    cpu = CpuClock(cluster)
    started = time.perf_counter()
    deadline = started + limit_s
    sent = 0
    while sent < count and time.perf_counter() < deadline:
        try:
            client.produce(topic, payload, partition=sent % partitions, on_delivery=on_delivery)
            sent += 1
        except BufferError:
            client.poll(0.01)
        if sent % POLL_EVERY_MESSAGES == 0:
            client.poll(0)
    client.flush(FLUSH_TIMEOUT_S)
    seconds = time.perf_counter() - started
    return Throughput(delivered, seconds, sent - delivered, cpu.elapsed())


def measure_latency(
    cluster: LocalCluster, topic: str, partitions: int, rate_per_s: int, duration_s: float
) -> Latency:
    """Send ``rate_per_s × duration_s`` messages on a fixed schedule; latency is delivery
    callback time − ``produce()`` time."""
    client = producer(cluster.bootstrap, linger_ms=0)
    payload = os.urandom(MESSAGE_BYTES)
    warm_up(client, topic, partitions, payload)
    latencies_s: list[float] = []

    def on_delivery_sent_at(sent_at: float) -> Callable[[Any, Any], None]:
        def on_delivery(error: Any, _message: Any) -> None:
            if error is None:
                latencies_s.append(time.perf_counter() - sent_at)

        return on_delivery

    cpu = CpuClock(cluster)
    total = int(rate_per_s * duration_s)
    interval_s = 1.0 / rate_per_s
    started = time.perf_counter()
    for index in range(total):
        send_at = started + index * interval_s
        while (wait_s := send_at - time.perf_counter()) > 0:
            # Serve delivery callbacks while waiting for the slot. poll() waits whole
            # milliseconds (less: not at all, spinning a core), so shorter waits sleep.
            if wait_s >= POLL_GRANULARITY_S:
                client.poll(wait_s)
            else:
                client.poll(0)
                time.sleep(min(wait_s, PACING_STEP_S))
        client.produce(
            topic,
            payload,
            partition=index % partitions,
            on_delivery=on_delivery_sent_at(time.perf_counter()),
        )
        client.poll(0)
    client.flush(FLUSH_TIMEOUT_S)
    seconds = time.perf_counter() - started
    if not latencies_s:
        raise RuntimeError(f"no message to {topic} was delivered")
    ordered = sorted(latencies_s)
    quantiles = statistics.quantiles(ordered, n=100, method="inclusive")
    return Latency(
        samples=len(ordered),
        undelivered=total - len(ordered),
        seconds=seconds,
        p50_ms=quantiles[49] * 1e3,
        p99_ms=quantiles[98] * 1e3,
        max_ms=ordered[-1] * 1e3,
        cpu=cpu.elapsed(),
    )


def create_topics(cluster: LocalCluster, partitions: int, timeout_s: float) -> None:
    """Create the topics; return when every partition has a leader and its full ISR."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new_topics = [
        NewTopic(name, partitions, replicas, config=config)
        for name, (replicas, config) in TOPICS.items()
    ]
    for future in admin.create_topics(new_topics).values():
        future.result(timeout_s)

    def ready() -> bool:
        found = admin.list_topics(timeout=5).topics
        return all(
            name in found
            and len(found[name].partitions) == partitions
            and all(
                p.leader >= 0 and len(p.isrs) == replicas for p in found[name].partitions.values()
            )
            for name, (replicas, _config) in TOPICS.items()
        )

    wait_until(ready, timeout_s)


def rss_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MiB: resident now, and at its peak."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


# ── the run and its report ────────────────────────────────────────────────────────────


@dataclass
class Results:
    throughput: dict[str, list[Throughput]] = field(default_factory=dict)
    latency: dict[tuple[str, int], list[Latency]] = field(default_factory=dict)
    """(topic, rate in msg/s) → one measurement per round."""


def run_rounds(cluster: LocalCluster, args: argparse.Namespace) -> Results:
    results = Results(
        {name: [] for name in TOPICS},
        {(name, rate): [] for name in TOPICS for rate in args.latency_rates},
    )
    for round_index in range(args.repeat):
        order = list(TOPICS) if round_index % 2 == 0 else list(reversed(TOPICS))
        for name in order:
            throughput = measure_throughput(
                cluster, name, args.partitions, args.messages, args.phase_seconds
            )
            results.throughput[name].append(throughput)
            print(
                f"round {round_index + 1} {name}: {throughput.messages_per_s:,.0f} msg/s",
                file=sys.stderr,
            )
            for rate in args.latency_rates:
                latency = measure_latency(
                    cluster, name, args.partitions, rate, args.latency_seconds
                )
                results.latency[name, rate].append(latency)
                print(
                    f"round {round_index + 1} {name} at {rate:,} msg/s: "
                    f"p50 {latency.p50_ms:.2f} ms, p99 {latency.p99_ms:.2f} ms",
                    file=sys.stderr,
                )
    return results


def print_report(cluster: LocalCluster, results: Results, args: argparse.Namespace) -> None:
    machine = describe_machine()
    print("| | |\n|---|---|")
    for key, value in machine.items():
        print(f"| {key} | {value} |")
    print(f"| sluice | commit {source_revision()} |")
    print(f"\ncommand: `{shlex.join(['python', *sys.argv])}`")
    print(
        f"\n{BROKERS} brokers on loopback, {args.partitions} partitions per topic, "
        f"{MESSAGE_BYTES} B values, acks=all, enable.idempotence=true; median (lowest–highest) "
        f"of {args.repeat} rounds\n"
    )
    print("| topic | msg/s | MiB/s | broker CPU µs/msg | client CPU µs/msg | undelivered |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, runs in results.throughput.items():
        print(
            f"| {name} | {spread(r.messages_per_s for r in runs)} "
            f"| {spread((r.mib_per_s for r in runs), 1)} "
            f"| {spread((r.broker_cpu_us_per_message for r in runs), 1)} "
            f"| {spread((r.client_cpu_us_per_message for r in runs), 1)} "
            f"| {sum(r.undelivered for r in runs)} |"
        )
    ratios = [
        rf3.messages_per_s / rf1.messages_per_s
        for rf1, rf3 in zip(results.throughput["rf1"], results.throughput["rf3"], strict=True)
    ]
    print(f"\nthroughput RF3/RF1, per round: {spread(ratios, 2)} (goal ≥ 0.6)\n")
    print(
        f"| for {args.latency_seconds:g} s | rate | p50 ms | p99 ms | max ms "
        "| broker CPU µs/msg | undelivered |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for (name, rate), samples in results.latency.items():
        print(
            f"| {name} | {rate:,} msg/s | {spread((r.p50_ms for r in samples), 2)} "
            f"| {spread((r.p99_ms for r in samples), 2)} "
            f"| {spread((r.max_ms for r in samples), 1)} "
            f"| {spread(r.broker_cpu_us_per_message for r in samples)} "
            f"| {sum(r.undelivered for r in samples)} |"
        )
    print("\nCPU per process, share of one core (median over rounds):\n")
    header = " | ".join(f"broker {n}" for n in sorted(cluster.brokers))
    print(f"| phase | {header} | client |")
    print(f"|---|{'---:|' * (len(cluster.brokers) + 1)}")
    phases: list[tuple[str, list[Throughput] | list[Latency]]] = []
    for name in TOPICS:
        phases += [(f"{name} flat out", results.throughput[name])]
        phases += [
            (f"{name} at {rate:,} msg/s", results.latency[name, rate])
            for rate in args.latency_rates
        ]
    for label, phase_runs in phases:
        shares = [
            [*(used / run.seconds for used in run.cpu.brokers), run.cpu.client / run.seconds]
            for run in phase_runs
        ]
        cells = " | ".join(
            f"{statistics.median(column):.0%}" for column in zip(*shares, strict=True)
        )
        print(f"| {label} | {cells} |")
    print("\n| broker | RSS at the end | peak RSS |\n|---|---:|---:|")
    for node_id in sorted(cluster.brokers):
        rss, peak = rss_mib(cluster.brokers[node_id].pid)
        print(f"| {node_id} | {rss:.0f} MiB | {peak:.0f} MiB |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--messages", type=int, default=200_000, help="per throughput phase")
    parser.add_argument("--phase-seconds", type=float, default=30.0, help="throughput phase limit")
    parser.add_argument(
        "--latency-rate", default="1000", help="msg/s, or a comma-separated list of rates"
    )
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3, help="rounds; medians are reported")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="topic creation limit")
    args = parser.parse_args()
    try:
        args.latency_rates = [int(rate) for rate in args.latency_rate.split(",")]
    except ValueError:
        parser.error("--latency-rate takes whole msg/s, comma-separated")
    if not args.latency_rates or min(args.latency_rates) <= 0:
        parser.error("--latency-rate must be positive")
    exit_on_sigterm()
    with LocalCluster(BROKERS) as cluster:
        create_topics(cluster, args.partitions, args.timeout_s)
        results = run_rounds(cluster, args)
        print_report(cluster, results, args)


if __name__ == "__main__":
    main()
