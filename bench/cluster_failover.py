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
import statistics
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from local_cluster import LocalCluster, exit_on_sigterm, wait_until

TOPIC = "failover"
PARTITIONS = 12


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
    exit_on_sigterm()
    overrides = [f"zookeeper.session.timeout.ms={args.session_timeout_ms}"]
    with LocalCluster(3, overrides) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(args.timeout_s)
        throughput = produce(cluster.bootstrap, args.messages, args.timeout_s)
        timings = [failover_round(cluster, args.timeout_s) for _ in range(args.rounds)]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}")
    print(f"brokers: 3 on loopback, zookeeper.session.timeout.ms={args.session_timeout_ms}")
    print(f"produce (acks=all, 1 KiB, {PARTITIONS} partitions): {throughput:,.0f} msg/s")
    labels = ("controller failover", "offline seen", "back to leading after restart")
    for label, values in zip(labels, zip(*timings, strict=True), strict=True):
        median, worst = statistics.median(values), max(values)
        print(f"{label}: median {median:.2f} s, max {worst:.2f} s ({len(values)} rounds)")


def failover_round(cluster: LocalCluster, timeout_s: float) -> tuple[float, float, float]:
    """Kill the controller, wait for a new one and for its partitions to show offline,
    restart it and wait until it leads them again; the three durations in seconds."""
    controller, leaders = metadata(cluster.bootstrap)
    survivors = ",".join(cluster.address(n) for n in cluster.brokers if n != controller)
    owned = [p for p, leader in leaders.items() if leader == controller]
    killed_at = time.monotonic()
    cluster.kill_broker(controller)
    wait_until(lambda: metadata(survivors)[0] not in (-1, controller), timeout_s)
    failover = time.monotonic() - killed_at
    wait_until(lambda: all(metadata(survivors)[1][p] == -1 for p in owned), timeout_s)
    offline = time.monotonic() - killed_at
    restarted_at = time.monotonic()
    cluster.start_broker(controller)
    wait_until(
        lambda: all(metadata(cluster.bootstrap)[1][p] == controller for p in owned),
        timeout_s * 2,
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
