"""The per-request cost of the broker's metrics instruments, measured in-process with
timeit: what the dispatcher adds to every request (count, duration histogram, the walk
of the response for error codes) and what the produce and fetch handlers add per
partition. Complements the end-to-end runs of ``produce_consume.py``, whose noise on a
shared machine is larger than these costs.

    .venv/bin/python bench/metrics_overhead.py
"""

from __future__ import annotations

import time
import timeit
from collections.abc import Callable

import kio.schema.metadata.v12.response as metadata
import kio.schema.produce.v9.response as produce
from kio.schema.errors import ErrorCode

from sluice.broker.observability.metrics.errors import error_codes
from sluice.broker.observability.metrics.registry import BrokerMetrics
from sluice.protocol.messages import make

ROUNDS = 200_000


def _produce_response(partitions: int) -> object:
    return make(
        produce.ProduceResponse,
        responses=(
            make(
                produce.TopicProduceResponse,
                name="t",
                partition_responses=tuple(
                    make(
                        produce.PartitionProduceResponse,
                        index=i,
                        error_code=ErrorCode.none,
                        base_offset=0,
                        log_append_time=-1,
                        log_start_offset=0,
                        record_errors=(),
                        error_message=None,
                    )
                    for i in range(partitions)
                ),
            ),
        ),
        throttle_time=0,
    )


def _metadata_response(topics: int, partitions: int) -> object:
    return make(
        metadata.MetadataResponse,
        throttle_time=0,
        brokers=(),
        cluster_id="c",
        controller_id=0,
        topics=tuple(
            make(
                metadata.MetadataResponseTopic,
                error_code=ErrorCode.none,
                name=f"t{t}",
                topic_id=None,
                is_internal=False,
                partitions=tuple(
                    make(
                        metadata.MetadataResponsePartition,
                        error_code=ErrorCode.none,
                        partition_index=p,
                        leader_id=0,
                        leader_epoch=0,
                        replica_nodes=(0,),
                        isr_nodes=(0,),
                        offline_replicas=(),
                    )
                    for p in range(partitions)
                ),
                topic_authorized_operations=0,
            )
            for t in range(topics)
        ),
    )


def _per_call_ns(call: Callable[[], object]) -> float:
    seconds = min(timeit.repeat(call, number=ROUNDS, repeat=5))
    return seconds / ROUNDS * 1e9


def main() -> None:
    metrics = BrokerMetrics()
    requests = metrics.requests
    produce_1 = _produce_response(1)
    produce_4 = _produce_response(4)
    metadata_10x4 = _metadata_response(10, 4)

    def dispatcher_per_request() -> None:
        started = time.perf_counter()
        requests.in_flight += 1
        requests.in_flight -= 1
        requests.finished("Produce", "PLAINTEXT", time.perf_counter() - started)

    rows: list[tuple[str, Callable[[], object]]] = [
        ("dispatcher: count, in flight, duration histogram", dispatcher_per_request),
        ("error walk: Produce, 1 partition", lambda: list(error_codes(produce_1))),
        ("error walk: Produce, 4 partitions", lambda: list(error_codes(produce_4))),
        (
            "error walk: Metadata, 10 topics x 4 partitions",
            lambda: list(error_codes(metadata_10x4)),
        ),
        (
            "produce handler: bytes and records of one batch",
            lambda: metrics.traffic.produced("t", 1000, 10),
        ),
    ]
    print("| instrument | ns per call |")
    print("|---|---:|")
    for name, call in rows:
        print(f"| {name} | {_per_call_ns(call):,.0f} |")
    started = time.perf_counter()
    size = len(metrics.exposition())
    elapsed_ms = (time.perf_counter() - started) * 1000
    print(f"\nan exposition of the instruments alone: {size} bytes in {elapsed_ms:.2f} ms")


if __name__ == "__main__":
    main()
