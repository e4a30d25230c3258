"""Cluster failover benchmark: how long a three-broker cluster takes to get over the loss
of its controller, measured with real processes and a real ZooKeeper on loopback.

Each round (bounded: --rounds, and every wait by --timeout-s):

1. kill -9 the controller; time until Metadata (confluent-kafka) names another
   controller ("controller failover"), and until the dead broker's partitions are
   reported offline ("offline seen");
2. start the broker again on its data; time until it leads its partitions again
   ("back to leading").

Also reports produce throughput (acks=all, 1 KiB, bounded count and time) through all
three brokers into a 12-partition topic before the first round. The brokers use
zookeeper.session.timeout.ms = --session-timeout-ms, which bounds failover from below.

    .venv/bin/python bench/cluster_failover.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.cli.loopback import HOST, accepts_connections, free_port

TOPIC = "failover"
PARTITIONS = 12
POLL_INTERVAL_S = 0.05


def start_broker(
    node_id: int, port: int, data_dir: Path, zookeeper: str, session_ms: int
) -> subprocess.Popen[bytes]:
    log = (data_dir.parent / f"broker-{node_id}.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "sluice", "serve", f"--node-id={node_id}", f"--host={HOST}",
         f"--port={port}", f"--data-dir={data_dir}", f"--zookeeper={zookeeper}",
         "-o", f"zookeeper.session.timeout.ms={session_ms}"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def wait_until(condition: object, timeout_s: float) -> float:
    """Seconds until ``condition()`` holds (polled); raises after ``timeout_s``."""
    assert callable(condition)
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"not within {timeout_s}s")
        time.sleep(POLL_INTERVAL_S)
    return time.monotonic() - started


def metadata(bootstrap: str) -> tuple[int, dict[int, int]]:
    """(controller id, partition → leader) as a client sees them."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})
    found = admin.list_topics(TOPIC, timeout=5)
    topic = found.topics[TOPIC]
    return found.controller_id, {p: m.leader for p, m in topic.partitions.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--timeout-s", type=float, default=60.0)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sluice-failover-"))
    ports = [free_port() for _ in range(3)]
    with LocalZooKeeper(base / "zookeeper") as zookeeper:
        brokers = {
            node: start_broker(node, ports[node], base / f"broker-{node}", zookeeper.connect,
                               args.session_timeout_ms)
            for node in range(3)
        }  # fmt: skip
        bootstrap = ",".join(f"{HOST}:{p}" for p in ports)
        try:
            for port in ports:
                wait_until(lambda port=port: accepts_connections(port), args.timeout_s)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(args.timeout_s)
            throughput = produce(bootstrap, args.messages, args.timeout_s)
            timings = [
                failover_round(brokers, ports, base, zookeeper.connect, args)
                for _ in range(args.rounds)
            ]
        finally:
            for process in brokers.values():
                process.send_signal(signal.SIGTERM)
            for process in brokers.values():
                process.wait(60)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}")
    print(f"brokers: 3 on loopback, zookeeper.session.timeout.ms={args.session_timeout_ms}")
    print(f"produce (acks=all, 1 KiB, {PARTITIONS} partitions): {throughput:,.0f} msg/s")
    labels = ("controller failover", "offline seen", "back to leading after restart")
    for label, values in zip(labels, zip(*timings, strict=True), strict=True):
        median, worst = statistics.median(values), max(values)
        print(f"{label}: median {median:.2f} s, max {worst:.2f} s ({len(values)} rounds)")


def failover_round(
    brokers: dict[int, subprocess.Popen[bytes]],
    ports: list[int],
    base: Path,
    zookeeper: str,
    args: argparse.Namespace,
) -> tuple[float, float, float]:
    """Kill the controller, wait for a new one and for its partitions to show offline,
    restart it and wait until it leads them again; the three durations in seconds."""
    bootstrap = ",".join(f"{HOST}:{p}" for p in ports)
    controller, leaders = metadata(bootstrap)
    survivors = ",".join(f"{HOST}:{ports[n]}" for n in range(3) if n != controller)
    owned = [p for p, leader in leaders.items() if leader == controller]
    killed_at = time.monotonic()
    brokers[controller].send_signal(signal.SIGKILL)
    brokers[controller].wait()
    wait_until(lambda: metadata(survivors)[0] not in (-1, controller), args.timeout_s)
    failover = time.monotonic() - killed_at
    wait_until(lambda: all(metadata(survivors)[1][p] == -1 for p in owned), args.timeout_s)
    offline = time.monotonic() - killed_at
    brokers[controller] = start_broker(
        controller, ports[controller], base / f"broker-{controller}", zookeeper,
        args.session_timeout_ms,
    )  # fmt: skip
    restarted_at = time.monotonic()
    wait_until(
        lambda: all(metadata(bootstrap)[1][p] == controller for p in owned), args.timeout_s * 2
    )
    return failover, offline, time.monotonic() - restarted_at


def produce(bootstrap: str, count: int, timeout_s: float) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    payload = b"x" * 1024
    started = time.monotonic()
    sent = 0
    while sent < count and time.monotonic() - started < timeout_s:
        try:
            producer.produce(TOPIC, payload)
            sent += 1
        except BufferError:
            producer.poll(0.01)
    producer.flush(timeout_s)
    return sent / (time.monotonic() - started)


if __name__ == "__main__":
    main()
