"""TLS benchmark: what an SSL listener costs next to a PLAINTEXT one on the same broker.

Starts one broker with two listeners, PLAINTEXT and SSL (a CA and a broker certificate
made with the ``openssl`` command line into a temporary directory, TLS 1.3 by default),
and for each listener and message size: a confluent-kafka producer writes
``--messages`` records flat out into a 1-partition topic (acks=1), then a consumer reads
them back from offset 0. Fetches on the PLAINTEXT listener go out with ``sendfile``
(zero copy); on the SSL listener the record bytes are read into memory in bounded chunks
and encrypted by the broker. Reports messages/s, MB/s and the broker's CPU time per
message (user + system). Prints Markdown for docs/performance.md.

    .venv/bin/python bench/tls.py                      # ~1-2 minutes
    .venv/bin/python bench/tls.py --messages 20000     # a quick look
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # confluent_kafka.admin does not re-export it

from produce_consume import (
    MB,
    cpu_seconds,
    free_loopback_port,
    print_run_header,
    producer_config,
    sluice_broker,
)

TIME_LIMIT_S = 60.0


def _openssl(*arguments: str | Path) -> None:
    subprocess.run(["openssl", *map(str, arguments)], check=True, capture_output=True, timeout=60)


def make_certificates(directory: Path) -> tuple[Path, Path]:
    """A CA and a broker certificate for 127.0.0.1: (the keystore, the CA certificate)."""
    ca_key, ca = directory / "ca.key", directory / "ca.pem"
    key, request, certificate = directory / "b.key", directory / "b.csr", directory / "b.pem"
    extensions = directory / "b.ext"
    for path in (ca_key, key):
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)
    _openssl("req", "-x509", "-new", "-key", ca_key, "-out", ca, "-days", "1", "-subj", "/CN=CA")
    _openssl("req", "-new", "-key", key, "-out", request, "-subj", "/CN=broker")
    extensions.write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl(
        "x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-set_serial", "1",
        "-days", "1", "-out", certificate, "-extfile", extensions,
    )  # fmt: skip
    keystore = directory / "keystore.pem"
    keystore.write_text(key.read_text() + certificate.read_text())
    return keystore, ca


@dataclass
class Result:
    listener: str
    phase: str
    message_bytes: int
    messages: int
    seconds: float
    broker_cpu_seconds: float | None

    def row(self) -> str:
        per_second = self.messages / self.seconds
        cpu = (
            f"{self.broker_cpu_seconds * 1e6 / self.messages:,.1f}"
            if self.broker_cpu_seconds is not None
            else "–"
        )
        return (
            f"| {self.listener} | {self.phase} | {self.message_bytes:,} | {per_second:,.0f} | "
            f"{per_second * self.message_bytes / MB:,.1f} | {cpu} |"
        )


def produce(bootstrap: str, security: dict[str, str], topic: str, size: int, count: int) -> float:
    producer = Producer(producer_config(bootstrap, "1", **security))
    producer.produce(topic, b"warm-up", partition=0)
    producer.flush(60)  # connected and the metadata known before the clock starts
    payload = os.urandom(size)
    started = time.perf_counter()
    produced = 0
    while produced < count and time.perf_counter() < started + TIME_LIMIT_S:
        try:
            producer.produce(topic, payload, partition=0)
            produced += 1
        except BufferError:
            producer.poll(0.01)
    producer.flush(120)
    return time.perf_counter() - started


def consume(bootstrap: str, security: dict[str, str], topic: str, count: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 1,
            **security,
        }
    )
    try:
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, 1)])  # after the warm-up record
        received = 0
        while received < count and time.perf_counter() < started + TIME_LIMIT_S:
            for message in consumer.consume(min(10_000, count - received), 0.5):
                if message.error() is None:
                    received += 1
        if received < count:
            raise SystemExit(f"read {received} of {count} records in {TIME_LIMIT_S}s")
        return time.perf_counter() - started
    finally:
        consumer.close()


def run(arguments: argparse.Namespace) -> list[Result]:
    directory = Path(tempfile.mkdtemp(prefix="sluice-bench-tls-"))
    keystore, ca = make_certificates(directory)
    plain_port, ssl_port = free_loopback_port(), free_loopback_port()
    results = []
    overrides = [
        f"listeners=PLAINTEXT://127.0.0.1:{plain_port},SSL://127.0.0.1:{ssl_port}",
        f"ssl.keystore.location={keystore}",
        f"ssl.truststore.location={ca}",
    ]
    with sluice_broker(directory / "data", overrides, plain_port) as target:
        listeners: list[tuple[str, str, dict[str, Any]]] = [
            ("PLAINTEXT", target.bootstrap, {}),
            (
                "SSL",
                f"127.0.0.1:{ssl_port}",
                {"security.protocol": "SSL", "ssl.ca.location": str(ca)},
            ),
        ]
        admin = AdminClient({"bootstrap.servers": target.bootstrap})
        for size in arguments.sizes:
            count = max(1, arguments.messages * 1000 // size) if size > 1000 else arguments.messages
            for name, bootstrap, security in listeners:
                topic = f"bench-tls-{uuid.uuid4().hex[:10]}"
                admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
                before = cpu_seconds(target.pid)
                seconds = produce(bootstrap, security, topic, size, count)
                after = cpu_seconds(target.pid)
                cpu = after - before if after is not None and before is not None else None
                results.append(Result(name, "produce", size, count, seconds, cpu))
                before = cpu_seconds(target.pid)
                seconds = consume(bootstrap, security, topic, count)
                after = cpu_seconds(target.pid)
                cpu = after - before if after is not None and before is not None else None
                results.append(Result(name, "consume", size, count, seconds, cpu))
                print(results[-2].row(), file=sys.stderr)
                print(results[-1].row(), file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000, help="records of 1 KB or less")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 16_000])
    arguments = parser.parse_args(argv)
    print_run_header()
    results = run(arguments)
    print("| listener | phase | message bytes | msgs/s | MB/s | broker CPU µs/msg |")
    print("|---|---|---:|---:|---:|---:|")
    for result in results:
        print(result.row())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
