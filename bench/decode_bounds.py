"""What the count-and-length check (``sluice.protocol.bounds``) costs per request.

Every request body is walked by its schema before kio decodes it, so that a count the
body cannot hold is refused instead of aborting the process. This measures the walk
next to kio's own decode on typical requests, in-process, with no broker and no I/O:

- Produce v8 (what librdkafka sends) and v9 (flexible): one topic, 4 partitions, one
  16 KiB batch each, and one topic with 100 partitions of 1 KiB batches;
- Fetch v11 and v12: one topic with 4 partitions, and 10 topics × 100 partitions.

Each case runs for a fixed number of iterations (``--iterations``), best of 5 rounds.

    .venv/bin/python bench/decode_bounds.py
"""

from __future__ import annotations

import argparse
import datetime
import platform
import time
from collections.abc import Callable
from typing import Any

from kio.schema.fetch.v11 import request as fetch_v11
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.produce.v8 import request as produce_v8
from kio.schema.produce.v9 import request as produce_v9

from sluice.protocol import codec
from sluice.protocol.bounds import check_body
from sluice.protocol.codec import RequestHeader
from sluice.protocol.records import RecordInput, build_batch

ROUNDS = 5


def _produce(module: Any, partitions: int, batch_bytes: int) -> Any:
    batch = build_batch(
        [RecordInput(None, b"x" * 100) for _ in range(max(batch_bytes // 110, 1))],
        base_timestamp_ms=1_700_000_000_000,
    )
    return module.ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            module.TopicProduceData(
                name="orders",
                partition_data=tuple(
                    module.PartitionProduceData(index=i, records=batch) for i in range(partitions)
                ),
            ),
        ),
    )


def _fetch(module: Any, topics: int, partitions: int) -> Any:
    return module.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=50 * 2**20,
        topics=tuple(
            module.FetchTopic(
                topic=f"topic-{t}",
                partitions=tuple(
                    module.FetchPartition(
                        partition=p, fetch_offset=1000 * p, partition_max_bytes=2**20
                    )
                    for p in range(partitions)
                ),
            )
            for t in range(topics)
        ),
        forgotten_topics_data=(),
    )


def _best_seconds_per_call(function: Callable[[], object], iterations: int) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.process_time()
        for _ in range(iterations):
            function()
        best = min(best, (time.process_time() - started) / iterations)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=2000)
    arguments = parser.parse_args()
    cases = [
        ("Produce v8, 4 × 16 KiB", _produce(produce_v8, 4, 16 * 1024)),
        ("Produce v9, 4 × 16 KiB", _produce(produce_v9, 4, 16 * 1024)),
        ("Produce v8, 100 × 1 KiB", _produce(produce_v8, 100, 1024)),
        ("Fetch v11, 1 topic × 4", _fetch(fetch_v11, 1, 4)),
        ("Fetch v12, 1 topic × 4", _fetch(fetch_v12, 1, 4)),
        ("Fetch v11, 10 topics × 100", _fetch(fetch_v11, 10, 100)),
    ]
    print(f"Python {platform.python_version()}, {platform.machine()}, {platform.processor()}")
    print()
    print("| request | body bytes | check µs | kio decode µs | check / decode |")
    print("|---|---|---|---|---|")
    for name, payload in cases:
        schema = type(payload)
        body = codec.encode_body(payload)
        header = RequestHeader(int(schema.__api_key__), int(schema.__version__), 1, "bench")
        check_s = _best_seconds_per_call(
            lambda s=schema, b=body: check_body(s, b, 0), arguments.iterations
        )
        decode_s = _best_seconds_per_call(
            lambda h=header, b=body: codec.decode_request_body(h, b, 0), arguments.iterations
        )
        kio_s = decode_s - check_s
        print(
            f"| {name} | {len(body):,} | {check_s * 1e6:.1f} | {kio_s * 1e6:.1f} | "
            f"{check_s / kio_s:.0%} |"
        )


if __name__ == "__main__":
    main()
