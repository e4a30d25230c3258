"""What the web console served by a broker costs it, and what a scrape of /metrics costs.

Starts a broker with ``--topics`` topics of ``--partitions`` partitions and ``--groups``
consumer groups that have committed an offset on every partition of one topic each, then
measures the broker's CPU time (user + system) over ``--seconds`` of an otherwise idle
broker, once with ``http.console=off`` and once with ``http.console=on`` (the console's
sampler asks the broker for topics, end offsets, groups and their offsets every 2 s), each
run a fresh broker. Then, on the last broker, the time of ``GET /metrics``. Prints
Markdown for docs/performance.md.

    .venv/bin/python bench/console_overhead.py                 # ~2 minutes
    .venv/bin/python bench/console_overhead.py --seconds 20    # a quicker look
"""

from __future__ import annotations

import argparse
import statistics
import time
import urllib.request
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # confluent_kafka.admin does not re-export it

from produce_consume import cpu_seconds, free_loopback_port, print_run_header, sluice_broker

SCRAPES = 20


def _populate(bootstrap: str, topics: int, partitions: int, groups: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"bench-topic-{i}" for i in range(topics)]
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for future in futures.values():
        future.result(timeout=60)
    for g in range(groups):
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-group-{g}",
                "enable.auto.commit": False,
            }
        )
        topic = names[g % topics]
        offsets = [TopicPartition(topic, p, 0) for p in range(partitions)]
        consumer.commit(offsets=offsets, asynchronous=False)
        consumer.close()


def _measure(args: argparse.Namespace, console: str) -> dict[str, Any]:
    http_port = free_loopback_port()
    overrides = [f"http.port={http_port}", f"http.console={console}"]
    with sluice_broker(None, overrides) as target:
        _populate(target.bootstrap, args.topics, args.partitions, args.groups)
        time.sleep(3.0)  # let start-up work (loading, the first samples) settle
        before = cpu_seconds(target.pid) or 0.0
        time.sleep(args.seconds)  # the idle period being measured
        used = (cpu_seconds(target.pid) or 0.0) - before
        scrape_ms = []
        for _ in range(SCRAPES):
            started = time.perf_counter()
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics") as response:
                size = len(response.read())
            scrape_ms.append((time.perf_counter() - started) * 1000)
    return {
        "console": console,
        "cpu_percent": 100.0 * used / args.seconds,
        "scrape_ms": statistics.median(scrape_ms),
        "scrape_bytes": size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    print_run_header()
    rows = [_measure(args, console) for console in ("off", "on")]
    print(
        f"{args.topics} topics × {args.partitions} partitions, {args.groups} groups, "
        f"idle broker over {args.seconds:.0f} s:"
    )
    print()
    print("| `http.console` | broker CPU (% of a core) | `GET /metrics` median (ms) | size (KB) |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['console']} | {row['cpu_percent']:.1f} | {row['scrape_ms']:.1f} "
            f"| {row['scrape_bytes'] / 1000:.0f} |"
        )


if __name__ == "__main__":
    main()
