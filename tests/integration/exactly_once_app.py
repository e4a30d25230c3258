"""A consume-transform-produce application that runs exactly once: what the tests kill.

    python exactly_once_app.py BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID

Copies every record of SOURCE to SINK (value and key unchanged, partition kept) with
``sluice.run_exactly_once``, small batches so a run spans many transactions, until it
is killed. It prints "running" once its consumer has partitions.
"""

from __future__ import annotations

import asyncio
import sys

import sluice

SESSION_TIMEOUT_MS = 2_000
BATCH_RECORDS_MAX = 40


async def main(bootstrap: str, source: str, sink: str, group: str, transactional_id: str) -> None:
    consumer = sluice.Consumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=group,
        delivery="exactly-once",
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=300,
        max_poll_records=BATCH_RECORDS_MAX,
    )
    producer = sluice.Producer(bootstrap, transactional_id=transactional_id)
    async with consumer, producer:
        await consumer.wait_for_assignment()
        print("running", flush=True)
        await sluice.run_exactly_once(
            consumer,
            producer,
            lambda record: [
                sluice.Output(sink, record.value, key=record.key, partition=record.partition)
            ],
        )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
