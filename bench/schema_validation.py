"""Schema validation benchmark: what ``confluent.value.schema.validation=true`` costs a
producer and the broker, next to the same topic without it, on one broker in one run.

Starts one broker with its Schema Registry on a free port, registers a small Avro schema
(a record of a long and a 10-character string) under each topic's subject, and
serializes ``--records`` values with Confluent's ``AvroSerializer`` before any clock
starts (the serializer's own cost is not measured). Then ``--runs`` times, each
topic in turn (which goes first alternates):

- throughput: the records produced flat out (acks=1, ``linger.ms=5``); records/s to the
  last delivery report, and the broker's CPU time (user + system) per record;
- latency: ``--latency-records`` records one at a time (``linger.ms=0``, each waited
  for): p50 and p99 of delivery callback time - ``produce()`` time.

The registry is asked once per schema id and then answered from the broker's cache
(entries live 30 s), so the figures are the steady state: the record walk and the cache
look-up per batch. Prints Markdown for docs/performance.md.

    .venv/bin/python bench/schema_validation.py                     # ~20 s on 2 cores
    .venv/bin/python bench/schema_validation.py --records 20000 --runs 1 --latency-records 200
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # confluent_kafka.admin does not re-export it
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from produce_consume import cpu_seconds, print_run_header, producer_config, sluice_broker, spread
from sluice.testing.ready_line import ready_schema_registry_url

RECORDS_MAX = 2_000_000
"""The most records one throughput phase may produce (``--records``)."""
LATENCY_RECORDS_MAX = 20_000
PHASE_TIMEOUT_S = 300
SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Reading",
        "namespace": "bench",
        "fields": [{"name": "value", "type": "long"}, {"name": "sensor", "type": "string"}],
    }
)


@dataclass
class Run:
    validation: bool
    records: int
    seconds: float
    broker_cpu_s: float
    p50_ms: float
    p99_ms: float

    @property
    def per_s(self) -> float:
        return self.records / self.seconds

    @property
    def broker_us_per_record(self) -> float:
        return self.broker_cpu_s * 1e6 / self.records


def serialized_values(registry_url: str, topic: str, records: int) -> list[bytes]:
    """``records`` Avro values framed for ``topic``'s subject (registered on the way)."""
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), SCHEMA)
    context = SerializationContext(topic, MessageField.VALUE)
    values = []
    for index in range(records):
        value = serializer({"value": index, "sensor": f"sensor-{index % 1000:03d}"}, context)
        assert value is not None
        values.append(value)
    return values


def produce_flat_out(producer: Producer, topic: str, values: list[bytes]) -> tuple[float, int]:
    """Seconds to the last delivery report, and how many failed."""
    failed = 0

    def on_delivery(error: Any, _message: Any) -> None:
        nonlocal failed
        failed += error is not None

    start = time.monotonic()
    for value in values:
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(PHASE_TIMEOUT_S):
        raise SystemExit(f"{topic}: records not delivered in {PHASE_TIMEOUT_S} s")
    return time.monotonic() - start, failed


def latencies_ms(producer: Producer, topic: str, values: list[bytes]) -> list[float]:
    """Each record produced alone and waited for: its delivery latency."""
    found: list[float] = []
    errors: list[Any] = []
    for value in values:
        sent_at = time.perf_counter()
        producer.produce(topic, value, partition=0, on_delivery=lambda e, _m: errors.append(e))
        if producer.flush(PHASE_TIMEOUT_S) or errors[-1] is not None:
            raise SystemExit(f"{topic}: a record was not delivered: {errors[-1]}")
        found.append((time.perf_counter() - sent_at) * 1000)
    return found


def measure(
    bootstrap: str, pid: int | None, topic: str, validation: bool, values: list[bytes], latency: int
) -> Run:
    producer = Producer(producer_config(bootstrap, "1"))
    producer.produce(topic, values[0], partition=0)  # connected, metadata and cache warm
    producer.flush(60)
    cpu_before = cpu_seconds(pid) or 0.0
    seconds, failed = produce_flat_out(producer, topic, values)
    cpu = (cpu_seconds(pid) or 0.0) - cpu_before
    if failed:
        raise SystemExit(f"{topic}: {failed} records refused")
    one_by_one = Producer(producer_config(bootstrap, "1", **{"linger.ms": 0}))
    samples = latencies_ms(one_by_one, topic, values[:latency])
    quantiles = statistics.quantiles(samples, n=100, method="inclusive")
    return Run(validation, len(values), seconds, cpu, quantiles[49], quantiles[98])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--latency-records", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args(argv)
    if not 0 < args.records <= RECORDS_MAX:
        parser.error(f"--records must be within 1..{RECORDS_MAX}")
    if not 2 <= args.latency_records <= min(LATENCY_RECORDS_MAX, args.records):
        parser.error(f"--latency-records must be within 2..{LATENCY_RECORDS_MAX} and ≤ --records")
    runs: list[Run] = []
    with sluice_broker(None, ["schema.registry.listeners=http://127.0.0.1:0"]) as target:
        assert target.log_path is not None
        registry_url = ready_schema_registry_url(target.log_path.read_text())
        if registry_url is None:
            raise SystemExit("the broker names no Schema Registry in its ready line")
        admin = AdminClient({"bootstrap.servers": target.bootstrap})
        topics = {}
        for validation in (False, True):
            name = f"bench-{'on' if validation else 'off'}-{uuid.uuid4().hex[:8]}"
            config = {"confluent.value.schema.validation": str(validation).lower()}
            admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(60)
            topics[validation] = (name, serialized_values(registry_url, name, args.records))
        for run_index in range(args.runs):
            # Alternate which topic goes first, so neither gains from a warmer broker.
            for validation in (False, True) if run_index % 2 == 0 else (True, False):
                name, values = topics[validation]
                run = measure(
                    target.bootstrap, target.pid, name, validation, values, args.latency_records
                )
                runs.append(run)
                print(
                    f"validation {'on ' if validation else 'off'}: {run.per_s:,.0f} records/s, "
                    f"{run.broker_us_per_record:.2f} µs broker CPU per record, latency p50 "
                    f"{run.p50_ms:.2f} ms, p99 {run.p99_ms:.2f} ms",
                    file=sys.stderr,
                )
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(run) for run in runs], indent=2))
    print_run_header()
    print("| validation | records/s | broker CPU µs per record | latency p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|")
    for validation in (False, True):
        mine = [run for run in runs if run.validation is validation]
        print(
            f"| {'on' if validation else 'off'} | {spread(r.per_s for r in mine)} "
            f"| {spread((r.broker_us_per_record for r in mine), 2)} "
            f"| {spread((r.p50_ms for r in mine), 2)} | {spread((r.p99_ms for r in mine), 2)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
