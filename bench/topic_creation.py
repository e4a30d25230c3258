"""Topic-creation benchmark: how long large creations take, and how long other clients
wait meanwhile.

Against brokers it starts (``python -m sluice serve``, free loopback port, temporary
data directory; a fresh one per phase), it times three creations, each while a second
connection sends ApiVersions requests back to back and records their round trips:

1. one Metadata request auto-creating ``--metadata-topics`` new topics (2,000);
2. one Produce request (acks=all, one small batch per topic) to ``--produce-topics`` new
   topics (1,000);
3. one CreateTopics request for a topic of ``--partitions`` partitions (10,000).

Prints a Markdown table: creation time, and the other client's round trips during it
(count, p99, max). Every phase is bounded in time; traffic goes to loopback only.

    .venv/bin/python bench/topic_creation.py
    .venv/bin/python bench/topic_creation.py --metadata-topics 500 --produce-topics 200
"""

from __future__ import annotations

import argparse
import datetime
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.create_topics.v4 import request as create_topics_v4
from kio.schema.metadata.v8 import request as metadata_v8
from kio.schema.produce.v8 import request as produce_v8

from produce_consume import sluice_broker
from sluice.protocol.codec import decode_response, encode_request
from sluice.protocol.records.builder import RecordInput, build_batch

PHASE_TIMEOUT_S = 600.0
ROUND_TRIPS_MAX = 1_000_000
_INT32 = struct.Struct(">i")


class Connection:
    """A blocking Kafka connection: one request, one response."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self._socket = socket.create_connection((host, int(port)), timeout=PHASE_TIMEOUT_S)
        self._correlation_id = 0

    def request(self, payload: Any) -> Any:
        self._correlation_id += 1
        self._socket.sendall(encode_request(self._correlation_id, "bench", payload))
        size = _INT32.unpack(self._read(4))[0]
        _, response = decode_response(
            int(payload.__api_key__), int(payload.__version__), self._read(size)
        )
        return response

    def _read(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self._socket.recv(size - len(data))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            data += chunk
        return bytes(data)

    def close(self) -> None:
        self._socket.close()


def timed_with_probe(bootstrap: str, action: Callable[[Connection], int]) -> dict[str, Any]:
    """Run ``action`` on one connection while another sends ApiVersions back to back.
    ``action`` returns how many topics it saw fail."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        connection = Connection(bootstrap)
        try:
            started = time.monotonic()
            outcome["failed"] = action(connection)
            outcome["seconds"] = time.monotonic() - started
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    probe = Connection(bootstrap)
    round_trips: list[float] = []
    try:
        thread.start()
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        while thread.is_alive() and time.monotonic() < deadline:
            if len(round_trips) >= ROUND_TRIPS_MAX:
                break
            started = time.monotonic()
            probe.request(ApiVersionsRequest())
            round_trips.append(time.monotonic() - started)
        thread.join(PHASE_TIMEOUT_S)
    finally:
        probe.close()
    round_trips.sort()
    outcome["round_trips"] = len(round_trips)
    outcome["p99_ms"] = round_trips[int(len(round_trips) * 0.99)] * 1000 if round_trips else 0
    outcome["max_ms"] = round_trips[-1] * 1000 if round_trips else 0
    return outcome


def metadata_phase(names: list[str]) -> Callable[[Connection], int]:
    def action(connection: Connection) -> int:
        response = connection.request(
            metadata_v8.MetadataRequest(
                topics=tuple(metadata_v8.MetadataRequestTopic(name=n) for n in names),
                allow_auto_topic_creation=True,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
        return sum(1 for t in response.topics if t.error_code != 0)

    return action


def produce_phase(names: list[str]) -> Callable[[Connection], int]:
    records = build_batch([RecordInput(key=b"key", value=b"value")])

    def action(connection: Connection) -> int:
        response = connection.request(
            produce_v8.ProduceRequest(
                transactional_id=None,
                acks=-1,
                timeout=datetime.timedelta(seconds=PHASE_TIMEOUT_S),
                topic_data=tuple(
                    produce_v8.TopicProduceData(
                        name=n,
                        partition_data=(produce_v8.PartitionProduceData(index=0, records=records),),
                    )
                    for n in names
                ),
            )
        )
        return sum(
            1 for t in response.responses for p in t.partition_responses if p.error_code != 0
        )

    return action


def create_topics_phase(name: str, partitions: int) -> Callable[[Connection], int]:
    def action(connection: Connection) -> int:
        response = connection.request(
            create_topics_v4.CreateTopicsRequest(
                topics=(
                    create_topics_v4.CreatableTopic(
                        name=name,
                        num_partitions=partitions,
                        replication_factor=1,
                        assignments=(),
                        configs=(),
                    ),
                ),
                timeout=datetime.timedelta(seconds=PHASE_TIMEOUT_S),
                validate_only=False,
            )
        )
        return sum(1 for t in response.topics if t.error_code != 0)

    return action


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--metadata-topics", type=int, default=2000)
    parser.add_argument("--produce-topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a new temp dir")
    args = parser.parse_args(argv)
    run = uuid.uuid4().hex[:8]
    phases = [
        (
            f"Metadata auto-creating {args.metadata_topics} topics",
            metadata_phase([f"meta-{run}-{i}" for i in range(args.metadata_topics)]),
        ),
        (
            f"Produce to {args.produce_topics} new topics",
            produce_phase([f"produce-{run}-{i}" for i in range(args.produce_topics)]),
        ),
        (
            f"CreateTopics, one topic of {args.partitions} partitions",
            create_topics_phase(f"wide-{run}", args.partitions),
        ),
    ]
    rows = []
    for title, action in phases:  # a fresh broker each: one phase's partitions do not
        with sluice_broker(args.data_dir, []) as target:  # count against the next's limit
            outcome = timed_with_probe(target.bootstrap, action)
        rows.append((title, outcome))
        print(f"{title}: {outcome}", file=sys.stderr)
    print("| creation | time | failed | other client's ApiVersions: count, p99, max |")
    print("|---|---|---|---|")
    for title, o in rows:
        print(
            f"| {title} | {o['seconds']:.2f} s | {o['failed']} | {o['round_trips']}, "
            f"{o['p99_ms']:.0f} ms, {o['max_ms']:.0f} ms |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
