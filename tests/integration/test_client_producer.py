"""sluice.Producer and sluice.sync.Producer against a real broker, read back with
confluent-kafka (librdkafka)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable

import pytest
from broker_process import BrokerProcess, free_port
from client_helpers import (
    consume_exactly,
    create_topic,
    produce_and_flush,
    producer_config,
)
from confluent_kafka import Producer as ConfluentProducer

import sluice
from sluice.client.errors import BrokerUnreachableError
from sluice.client.producer_api import DeliveryTimeoutError, RecordMetadata
from sluice.common import errors
from sluice.protocol.records.builder import RecordInput

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
ACKS: list[int | str] = [0, 1, "all"]


@pytest.mark.parametrize("acks", ACKS)
@pytest.mark.parametrize("codec", CODECS)
def test_records_round_trip_with_every_codec_and_acks_level(
    broker: BrokerProcess, topic: str, codec: str, acks: int | str
) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=3)
    base_ms = int(time.time() * 1000) - 60_000
    sent = [
        {
            "key": f"key-{i}".encode(),
            "value": f"value-{i}".encode() * (i % 7 + 1),
            "headers": [("n", str(i).encode()), ("empty", None)] if i % 2 else [],
            "timestamp_ms": base_ms + i if i % 3 else None,
        }
        for i in range(60)
    ]

    async def produce() -> list[RecordMetadata]:
        async with sluice.Producer(
            bootstrap_servers=broker.bootstrap, acks=acks, compression_type=codec
        ) as producer:
            futures = [await producer.send(topic, **record) for record in sent]  # type: ignore[arg-type]
            return list(await asyncio.gather(*futures))

    before_ms = int(time.time() * 1000)
    delivered = asyncio.run(produce())
    after_ms = int(time.time() * 1000)
    messages = consume_exactly(broker.bootstrap, [(topic, p) for p in range(3)], len(sent))
    by_key = {m.key(): m for m in messages}
    assert len(by_key) == len(sent)
    for record, metadata in zip(sent, delivered, strict=True):
        message = by_key[record["key"]]
        assert message.value() == record["value"]
        assert message.partition() == metadata.partition
        assert list(message.headers() or []) == list(record["headers"])  # type: ignore[arg-type]
        timestamp_ms = message.timestamp()[1]
        assert timestamp_ms == metadata.timestamp_ms
        if record["timestamp_ms"] is not None:
            assert timestamp_ms == record["timestamp_ms"]
        else:
            assert before_ms <= timestamp_ms <= after_ms
        if acks == 0:
            assert metadata.offset == -1
        else:
            assert message.offset() == metadata.offset


def test_keyed_records_land_where_confluent_murmur2_random_puts_them(
    broker: BrokerProcess, topic: str
) -> None:
    partitions = 7
    ours, theirs = topic + "-sluice", topic + "-confluent"
    create_topic(broker.bootstrap, ours, num_partitions=partitions)
    create_topic(broker.bootstrap, theirs, num_partitions=partitions)
    keys = [f"customer-{i}".encode() for i in range(200)] + [b"", b"a", b"ab", b"abc"]

    async def produce() -> list[RecordMetadata]:
        async with sluice.Producer(bootstrap_servers=broker.bootstrap) as producer:
            return [await producer.send_and_wait(ours, b"v", key=key) for key in keys[:20]] + [
                await future
                for future in [await producer.send(ours, b"v", key=key) for key in keys[20:]]
            ]

    delivered = asyncio.run(produce())
    confluent = ConfluentProducer(producer_config(broker.bootstrap, partitioner="murmur2_random"))
    reports = produce_and_flush(confluent, theirs, ({"key": k, "value": b"v"} for k in keys))
    assert [m.partition for m in delivered] == [r.partition for r in reports]
    assert len({m.partition for m in delivered}) == partitions


def test_keyless_records_stick_to_a_partition_per_batch_and_spread(
    broker: BrokerProcess, topic: str
) -> None:
    partitions = 4
    create_topic(broker.bootstrap, topic, num_partitions=partitions)

    async def produce() -> list[RecordMetadata]:
        async with sluice.Producer(
            bootstrap_servers=broker.bootstrap, linger_ms=0, batch_size=2048
        ) as producer:
            futures = []
            for _ in range(40):
                futures += [await producer.send(topic, b"x" * 100) for _ in range(50)]
                await asyncio.sleep(0.002)  # let batches go out: the sticky partition moves
            return list(await asyncio.gather(*futures))

    delivered = asyncio.run(produce())
    per_partition: dict[int, list[int]] = defaultdict(list)
    for metadata in delivered:
        per_partition[metadata.partition].append(metadata.offset)
    assert len(per_partition) >= 3, per_partition.keys()
    for offsets in per_partition.values():
        assert offsets == list(range(len(offsets)))  # contiguous: nothing lost or reordered
    messages = consume_exactly(broker.bootstrap, [(topic, p) for p in range(partitions)], 2000)
    assert len(messages) == 2000


def test_small_buffer_memory_makes_send_wait_then_everything_arrives(
    broker: BrokerProcess, topic: str
) -> None:
    buffer_memory = 16 * 1024

    async def produce() -> tuple[list[RecordMetadata], int]:
        async with sluice.Producer(
            bootstrap_servers=broker.bootstrap,
            buffer_memory=buffer_memory,
            batch_size=4096,
            linger_ms=20,
        ) as producer:
            futures = []
            highest = 0
            for i in range(300):
                futures.append(await producer.send(topic, i.to_bytes(4, "big") * 256))
                highest = max(highest, producer._accumulator.buffered_bytes)
            return list(await asyncio.gather(*futures)), highest

    delivered, highest_buffered = asyncio.run(produce())
    assert highest_buffered <= buffer_memory
    assert [m.offset for m in delivered] == list(range(300))


def test_a_dead_broker_times_out_send_and_deliveries(
    broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    broker = broker_factory()

    async def produce() -> None:
        async with sluice.Producer(
            bootstrap_servers=broker.bootstrap,
            buffer_memory=8192,
            max_block_ms=300,
            delivery_timeout_ms=1500,
            request_timeout_ms=500,
            retry_backoff_ms=50,
        ) as producer:
            await producer.send_and_wait(topic, b"first")
            await asyncio.to_thread(broker.stop)
            futures = []
            with pytest.raises(DeliveryTimeoutError, match="buffer_memory"):
                for _ in range(100):
                    futures.append(await producer.send(topic, b"x" * 1000))
            results = await asyncio.gather(*futures, return_exceptions=True)
            assert results and all(isinstance(r, DeliveryTimeoutError) for r in results)

    asyncio.run(produce())


def test_records_too_large_fail_their_future(broker: BrokerProcess, topic: str) -> None:
    async def produce() -> None:
        async with sluice.Producer(bootstrap_servers=broker.bootstrap) as producer:
            future = await producer.send(topic, b"x" * (2 * 1024 * 1024))
            with pytest.raises(errors.MessageTooLarge):
                await future
            # The broker's own limit (max.message.bytes, 1 MiB) applies past ours.
        async with sluice.Producer(
            bootstrap_servers=broker.bootstrap, max_request_size=4 * 1024 * 1024
        ) as producer:
            future = await producer.send(topic, b"x" * (2 * 1024 * 1024))
            with pytest.raises(errors.KafkaError) as failure:
                await future
            assert failure.value.code in (
                errors.ErrorCode.message_too_large,
                errors.ErrorCode.record_list_too_large,
            )
            assert (await producer.send_and_wait(topic, b"small")).offset >= 0

    asyncio.run(produce())


def test_broker_restart_during_production_loses_and_duplicates_nothing(
    broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    broker = broker_factory()
    partitions, keys, per_key = 3, 12, 1500
    create_topic(broker.bootstrap, topic, num_partitions=partitions)
    restarted = threading.Event()

    def restart() -> None:
        broker.restart()
        restarted.set()

    async def produce() -> list[RecordMetadata]:
        async with sluice.Producer(
            bootstrap_servers=broker.bootstrap,
            acks="all",
            retry_backoff_ms=50,
            request_timeout_ms=5000,
            delivery_timeout_ms=60_000,
            linger_ms=2,
        ) as producer:
            futures = []
            restarter: threading.Thread | None = None
            for sequence in range(per_key):
                for key in range(keys):
                    futures.append(
                        await producer.send(
                            topic, f"{key}:{sequence}".encode(), key=f"key-{key}".encode()
                        )
                    )
                if sequence == per_key // 4:
                    restarter = threading.Thread(target=restart)
                    restarter.start()
                if restarter is not None and not restarted.is_set() and sequence % 50 == 0:
                    await asyncio.sleep(0.01)  # keep producing through the restart
            results = list(await asyncio.gather(*futures))
            assert restarter is not None
            await asyncio.to_thread(restarter.join)
            return results

    delivered = asyncio.run(produce())
    assert restarted.is_set()
    total = keys * per_key
    assert len(delivered) == total
    messages = consume_exactly(
        broker.bootstrap, [(topic, p) for p in range(partitions)], total, extra_wait_s=1.0
    )
    assert len(messages) == total, "duplicates"
    next_sequence: dict[bytes, int] = defaultdict(int)
    for message in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        key_text, sequence_text = message.value().decode().split(":")
        key = message.key()
        assert key == f"key-{key_text}".encode()
        assert int(sequence_text) == next_sequence[key], f"{key!r} out of order"
        next_sequence[key] += 1
    assert all(count == per_key for count in next_sequence.values())


def test_the_sync_producer_works_from_plain_threads(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=2)
    failures: list[BaseException] = []
    with sluice.sync.Producer(broker.bootstrap, linger_ms=1) as producer:

        def work(worker: int) -> None:
            try:
                futures = [
                    producer.send(topic, f"{worker}-{i}".encode(), key=str(worker).encode())
                    for i in range(300)
                ]
                futures += producer.send_batch(
                    topic, [RecordInput(str(worker).encode(), b"bulk")] * 100
                )
                offsets = [future.result(timeout=30).offset for future in futures]
                assert offsets == sorted(offsets)
            except BaseException as e:
                failures.append(e)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        metadata = producer.send_and_wait(topic, b"last", partition=0)
        producer.flush()
    assert not failures, failures
    assert metadata.partition == 0
    messages = consume_exactly(broker.bootstrap, [(topic, 0), (topic, 1)], 4 * 400 + 1)
    assert len(messages) == 4 * 400 + 1


def test_no_broker_at_start_is_a_clear_error() -> None:
    async def start() -> None:
        async with sluice.Producer(
            bootstrap_servers=f"127.0.0.1:{free_port()}", request_timeout_ms=300
        ):
            pass

    started = time.monotonic()
    with pytest.raises(BrokerUnreachableError, match="is `sluice serve` running"):
        asyncio.run(start())
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"acks": 2}, "acks"),
        ({"linger_ms": -1}, "linger_ms"),
        ({"batch_size": 0}, "batch_size"),
        ({"compression_type": "brotli"}, "compression_type"),
        ({"max_in_flight_requests_per_connection": 0}, "max_in_flight"),
        ({"acks": 1, "enable_idempotence": True}, "enable_idempotence"),
        ({"bootstrap_servers": "nohost"}, "bootstrap server"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        sluice.Producer(**options)  # type: ignore[arg-type]


def test_headers_given_as_a_dict_or_pairs_arrive_as_confluent_kafka_sends_them(
    broker: BrokerProcess, topic: str
) -> None:
    """confluent-kafka takes headers as a dict or a list of pairs, with bytes or str
    values; both Sluice producers take the same and deliver the same headers."""
    create_topic(broker.bootstrap, topic)

    async def send_async() -> None:
        async with sluice.Producer(bootstrap_servers=broker.bootstrap) as producer:
            await producer.send_and_wait(topic, b"a", headers={"trace": b"t1", "kind": "x"})
            await producer.send_and_wait(topic, b"b", headers=[("n", b"1"), ("n", None)])

    asyncio.run(send_async())
    with sluice.sync.Producer(bootstrap_servers=broker.bootstrap) as producer:
        producer.send(topic, b"c", headers={"trace": "t3"}).result(timeout=30)
        producer.send_and_wait(topic, b"d", headers=(("k", bytearray(b"v")),))

    messages = consume_exactly(broker.bootstrap, [(topic, 0)], 4)
    assert [(m.value(), m.headers()) for m in messages] == [
        (b"a", [("trace", b"t1"), ("kind", b"x")]),
        (b"b", [("n", b"1"), ("n", None)]),
        (b"c", [("trace", b"t3")]),
        (b"d", [("k", b"v")]),
    ]


@pytest.mark.parametrize(
    ("headers", "named"),
    [
        ("trace=1", "not str"),
        (b"trace", "not bytes"),
        (42, "not int"),
        ({"n": 1}, "header 'n': value must be bytes, str or None, not int"),
        ([("n", b"1", b"2")], "(name, value) pair"),
        ([(1, b"v")], "header name 1 must be a str"),
    ],
)
def test_headers_of_another_shape_raise_a_clear_type_error_at_send(
    broker: BrokerProcess, topic: str, headers: object, named: str
) -> None:
    async def send_async() -> None:
        async with sluice.Producer(bootstrap_servers=broker.bootstrap) as producer:
            await producer.send(topic, b"v", headers=headers)  # type: ignore[arg-type]

    with pytest.raises(TypeError, match=re.escape(named)):
        asyncio.run(send_async())
    with sluice.sync.Producer(bootstrap_servers=broker.bootstrap) as producer:
        with pytest.raises(TypeError, match=re.escape(named)):
            producer.send(topic, b"v", headers=headers)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=re.escape(named)):
            producer.send_and_wait(topic, b"v", headers=headers)  # type: ignore[arg-type]
