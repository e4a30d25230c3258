"""Views benchmark: what reading a tag-filtered view costs next to reading its source.

Starts one broker, writes ``--records`` values of 100 bytes into a 1-partition source
topic, tagged ``x-sluice-tag: red`` or ``blue``, in several layouts, and creates a view
``tag = 'red'`` of each:

- ``100%``: every record red (every batch sent as stored, zero copy);
- ``50% mixed`` / ``10% mixed``: each record red with that probability (nearly every
  batch holds both: decoded and rebuilt);
- ``10% by batch``: whole producer batches red or blue (decided from the tag summaries
  without decoding: sent as stored or skipped).

A confluent-kafka consumer then reads the source, and each view, from the beginning to
its end (connected before the clock starts). Two figures: how many *source* records per
second the read covered (the view's consumer receives only the matching ones; the
Python consumer's cost per delivered message weighs on both), and the broker's CPU time
per source record (user + system, what the filtering itself costs).
Prints Markdown for docs/performance.md.

    .venv/bin/python bench/views.py                      # ~1 minute
    .venv/bin/python bench/views.py --records 50000      # a quick look
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # confluent_kafka.admin does not re-export it

from produce_consume import (
    cpu_seconds,
    print_run_header,
    producer_config,
    sluice_broker,
    spread,
)

VALUE = b"x" * 100
RED: list[tuple[str, str | bytes | None]] = [("x-sluice-tag", b"red")]
BLUE: list[tuple[str, str | bytes | None]] = [("x-sluice-tag", b"blue")]
BATCH_RECORDS = 500


@dataclass
class Read:
    name: str
    source_records: int
    delivered: int
    seconds: float
    broker_cpu_s: float

    @property
    def per_s(self) -> float:
        return self.source_records / self.seconds

    @property
    def broker_us_per_record(self) -> float:
        return self.broker_cpu_s * 1e6 / self.source_records


def fill(bootstrap: str, topic: str, records: int, layout: str, seed: int) -> int:
    """Write the source; returns how many records are red."""
    rng = random.Random(seed)
    producer = Producer(producer_config(bootstrap, "all", **{"linger.ms": 50}))
    red = 0
    for start in range(0, records, BATCH_RECORDS):
        batch_red = rng.random() < 0.1
        for _ in range(min(BATCH_RECORDS, records - start)):
            if layout == "100%":
                is_red = True
            elif layout == "10% by batch":
                is_red = batch_red
            else:
                is_red = rng.random() < (0.5 if layout == "50% mixed" else 0.1)
            red += is_red
            while True:
                try:
                    producer.produce(topic, VALUE, partition=0, headers=RED if is_red else BLUE)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(120)  # one producer batch per loop: layouts by batch stay exact
    return red


def read(bootstrap: str, topic: str, end: int, name: str, broker_pid: int | None = None) -> Read:
    """Read ``topic`` from the beginning until the consumer's position reaches ``end``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    # Connect and learn the metadata before the clock starts.
    consumer.get_watermark_offsets(TopicPartition(topic, 0), 60)
    consumer.assign([TopicPartition(topic, 0, 0)])
    delivered = 0
    if end == 0:
        consumer.consume(1, 1.0)  # one round of fetches, nothing to read
        consumer.close()
        return Read(name, 0, 0, 1.0, 0.0)
    cpu_before = cpu_seconds(broker_pid) or 0.0
    start = time.monotonic()
    while True:
        messages = consumer.consume(10_000, 0.1)
        delivered += sum(1 for m in messages if m.error() is None)
        if consumer.position([TopicPartition(topic, 0)])[0].offset >= end:
            break
        if time.monotonic() - start > 300:
            raise SystemExit(f"{name}: did not reach offset {end} in 300 s")
    seconds = time.monotonic() - start
    cpu = (cpu_seconds(broker_pid) or 0.0) - cpu_before
    consumer.close()
    return Read(name, end, delivered, seconds, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    layouts = ["100%", "50% mixed", "10% mixed", "10% by batch"]
    results: dict[str, list[Read]] = {}
    with sluice_broker(None, []) as target:
        admin = AdminClient({"bootstrap.servers": target.bootstrap})
        for layout in layouts:
            source = f"source-{uuid.uuid4().hex[:8]}"
            view = f"view-{source}"
            admin.create_topics([NewTopic(source, 1, 1)])[source].result(60)
            config = {"sluice.view.source": source, "sluice.view.filter": "tag = 'red'"}
            admin.create_topics([NewTopic(view, -1, -1, config=config)])[view].result(60)
            # The view is fetched once before the source is written, so the tag
            # summaries cover every batch (a view created after its data is decoded).
            read(target.bootstrap, view, 0, "warm-up")
            red = fill(target.bootstrap, source, args.records, layout, args.seed)
            end = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "x"})
            _, high = end.get_watermark_offsets(TopicPartition(source, 0), 60)
            end.close()
            for _ in range(args.runs):
                plain = read(target.bootstrap, source, high, f"{layout} source", target.pid)
                filtered = read(target.bootstrap, view, high, f"{layout} view", target.pid)
                if filtered.delivered != red:
                    raise SystemExit(f"{layout}: the view gave {filtered.delivered}, {red} match")
                results.setdefault(f"{layout} source", []).append(plain)
                results.setdefault(f"{layout} view", []).append(filtered)
                print(
                    f"{layout}: source {plain.per_s:,.0f}/s, view {filtered.per_s:,.0f}/s "
                    f"({filtered.delivered:,} of {high:,} delivered)",
                    file=sys.stderr,
                )
    print_run_header()
    print(
        "| layout | records delivered by the view | source records/s: reading the source "
        "| reading the view | broker CPU µs per source record: source | view |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for layout in layouts:
        plain_reads = results[f"{layout} source"]
        view_reads = results[f"{layout} view"]
        print(
            f"| {layout} | {view_reads[0].delivered:,} of {view_reads[0].source_records:,} "
            f"| {spread(r.per_s for r in plain_reads)} | {spread(r.per_s for r in view_reads)} "
            f"| {spread((r.broker_us_per_record for r in plain_reads), 2)} "
            f"| {spread((r.broker_us_per_record for r in view_reads), 2)} |"
        )


if __name__ == "__main__":
    main()
