"""``sluice serve --event-loop asyncio|uvloop``: a real client reads large fetches (several
MB over several partitions, record bytes sent zero copy on both loops) and gets every
record, in order."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable

import pytest
from broker_process import BrokerProcess
from client_helpers import (
    consume_exactly,
    create_topic,
    produce_and_flush,
    producer_config,
    unique_topic_name,
)
from confluent_kafka import Producer

PARTITIONS = 4
RECORDS_PER_PARTITION = 12
VALUE_BYTES = 256 * 1024
"""12 records of 256 KiB: 3 MiB a partition, 12 MiB in all."""


@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_a_large_fetch_over_several_partitions_arrives_whole(
    event_loop: str, broker_factory: Callable[..., BrokerProcess]
) -> None:
    broker = broker_factory(extra_arguments=["--event-loop", event_loop])
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    generator = random.Random(seed)
    topic = unique_topic_name(f"large-fetch-{event_loop}")
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    values = {
        (partition, index): generator.randbytes(VALUE_BYTES)
        for partition in range(PARTITIONS)
        for index in range(RECORDS_PER_PARTITION)
    }
    producer = Producer(producer_config(broker.bootstrap, **{"message.max.bytes": 2_000_000}))
    produce_and_flush(
        producer,
        topic,
        (
            {"value": value, "key": f"{partition}-{index}".encode(), "partition": partition}
            for (partition, index), value in values.items()
        ),
    )
    messages = consume_exactly(
        broker.bootstrap,
        [(topic, partition) for partition in range(PARTITIONS)],
        len(values),
        **{
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "receive.message.max.bytes": 80 * 1024 * 1024,
        },
    )
    by_partition: dict[int, list[tuple[int, bytes | None, bytes | None]]] = defaultdict(list)
    for message in messages:
        by_partition[message.partition()].append((message.offset(), message.key(), message.value()))
    assert sorted(by_partition) == list(range(PARTITIONS))
    for partition, received in by_partition.items():
        assert [offset for offset, _, _ in received] == list(range(RECORDS_PER_PARTITION))
        for offset, key, value in received:
            assert key == f"{partition}-{offset}".encode()
            assert value == values[(partition, offset)], f"partition {partition} offset {offset}"
    assert broker.is_running
