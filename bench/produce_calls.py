"""Python function calls per unbatched Produce, through an in-process broker: a count that,
unlike CPU time, does not move with the load of a shared machine.

A broker is started in this process on a temporary data directory (one node, its
defaults). For each case (Produce v3, v9 and v10 with acks=1, v10 with acks=all; one
1 KiB record in one partition, no key, the topic created by the first request), one
request frame is encoded once and handed ``--requests`` times to the broker's request
entry point (``Broker._handle``: dispatcher, handler, append, response encoding; not the
socket and the event loop around it) under ``cProfile``, after a warm-up. It prints the
calls per request (cProfile's total over the requests) and, with ``--top N``, the N
functions called most per request in the v10 acks=1 case.

    .venv/bin/python bench/produce_calls.py
    .venv/bin/python bench/produce_calls.py --top 40
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from sluice.broker.app import Broker
from sluice.broker.network.server import ConnectionInfo
from sluice.common.config import BrokerConfig
from sluice.protocol.codec import decode_response, encode_request
from sluice.protocol.messages import make, request_module
from sluice.protocol.records.builder import RecordInput, build_batch
from sluice.protocol.versions import ApiKey

CASES = ((3, 1), (9, 1), (10, 1), (10, -1))
"""(Produce version, acks): librdkafka sends v9/v10, kafka-python v3 (and up to v8)."""
VALUE_BYTES = 1024
WARM_UP_REQUESTS = 200
READY_TIMEOUT_S = 60.0
READY_POLL_S = 0.05
TOPIC = "calls"


def produce_frame(version: int, acks: int) -> bytes:
    """A Produce request of one 1 KiB record, without its size prefix."""
    parts = request_module(ApiKey.PRODUCE, version)
    batch = build_batch(
        [RecordInput(timestamp_ms=int(time.time() * 1000), key=None, value=b"v" * VALUE_BYTES)]
    )
    partition = make(parts.PartitionProduceData, index=0, records=batch)
    payload = make(
        parts.ProduceRequest,
        transactional_id=None,
        acks=acks,
        timeout=timedelta(seconds=30),
        topic_data=(make(parts.TopicProduceData, name=TOPIC, partition_data=(partition,)),),
    )
    return encode_request(1, "produce-calls", payload)[4:]


async def measure(requests: int, top: int) -> None:
    with tempfile.TemporaryDirectory(prefix="sluice-calls-") as work_dir:
        config = BrokerConfig()
        config.apply_properties(
            {
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "http.port": "0",
                "schema.registry.listeners": "",
            }
        )
        config.data_dir = Path(work_dir) / "data"
        broker = Broker(config)
        await broker.start()
        runner = asyncio.create_task(broker.run())
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while broker._not_ready is not None:
                if time.monotonic() > deadline:
                    raise SystemExit(f"the broker was not ready within {READY_TIMEOUT_S}s")
                await asyncio.sleep(READY_POLL_S)
            connection = ConnectionInfo("produce-calls", "127.0.0.1")
            for version, acks in CASES:
                frame = produce_frame(version, acks)
                answer = await broker._handle(frame, connection)
                assert isinstance(answer, bytes), answer
                response = decode_response(ApiKey.PRODUCE, version, answer[4:])[1]
                (partition,) = response.responses[0].partition_responses
                if partition.error_code != 0:
                    raise SystemExit(f"Produce v{version} refused: {partition}")
                for _ in range(WARM_UP_REQUESTS):
                    await broker._handle(frame, connection)
                profile = cProfile.Profile()
                profile.enable()
                for _ in range(requests):
                    await broker._handle(frame, connection)
                profile.disable()
                stats = pstats.Stats(profile)
                print(
                    f"Produce v{version} acks={acks}: "
                    f"{stats.total_calls / requests:.1f} calls per request"
                )
                if top and (version, acks) == (10, 1):
                    stats.sort_stats("ncalls").print_stats(top)
        finally:
            broker.request_stop()
            await runner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="profiled per case")
    parser.add_argument("--top", type=int, default=0, help="functions to list (v10 acks=1)")
    args = parser.parse_args(argv)
    asyncio.run(measure(args.requests, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
