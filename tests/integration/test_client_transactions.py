"""Sluice's own client with transactions: the transactional producer (async and sync),
read_committed consumers, fencing, the exactly-once loop, and that loop killed with
SIGKILL at random instants while it copies a topic (the output must hold every input
record exactly once, as a read_committed reader sees it).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from client_helpers import create_topic, unique_group_id
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

import sluice
from sluice.client.producer_api import ProducerFencedError, TransactionAbortableError
from sluice.client.transactions import TransactionStateError
from sluice.common.ids import TopicPartition

TIMEOUT_S = 30.0
APP = Path(__file__).with_name("exactly_once_app.py")


def read_committed_values(bootstrap: str, topic: str, partitions: int, count: int) -> list[bytes]:
    """Read ``topic`` with librdkafka (read_committed by default) until ``count``
    records arrived or the time is up."""
    consumer = ConfluentConsumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_group_id(), "fetch.wait.max.ms": 50}
    )
    try:
        consumer.assign([ConfluentTopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(values) < count and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.2):
                assert message.error() is None, message.error()
                values.append(message.value())
        return values
    finally:
        consumer.close()


async def read_with_sluice(bootstrap: str, topic: str, until: bytes) -> list[bytes]:
    async with sluice.Consumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes] = []
        async with asyncio.timeout(TIMEOUT_S):
            while until not in values:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    values.extend(record.value for record in records if record.value)
        return values


def test_commit_and_abort_with_the_sluice_producer(broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)

    async def write() -> None:
        async with sluice.Producer(broker.bootstrap, transactional_id=f"s-{topic}") as producer:
            for name, commit in ((b"c1", True), (b"a1", False), (b"c2", True)):
                await producer.begin_transaction()
                for i in range(3):
                    await producer.send(topic, b"%s-%d" % (name, i), partition=0)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
            with pytest.raises(TransactionStateError):
                await producer.send(topic, b"outside", partition=0)

    asyncio.run(write())
    want = [b"c1-0", b"c1-1", b"c1-2", b"c2-0", b"c2-1", b"c2-2"]
    assert read_committed_values(broker.bootstrap, topic, 1, 6) == want
    assert asyncio.run(read_with_sluice(broker.bootstrap, topic, b"c2-2")) == want


def test_the_sluice_consumer_skips_every_aborted_transaction_of_a_producer(
    broker, topic: str
) -> None:
    """Aborted and committed transactions of one producer alternate in one fetch: only
    the aborted ones are skipped (each ABORT marker ends only its own)."""
    create_topic(broker.bootstrap, topic, 1)
    producer = ConfluentProducer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"alt-{topic}"}
    )
    producer.init_transactions(TIMEOUT_S)
    for round_number in range(4):
        for commit in (False, True):
            producer.begin_transaction()
            name = b"c" if commit else b"a"
            for i in range(2):
                producer.produce(topic, value=b"%s%d-%d" % (name, round_number, i), partition=0)
            if commit:
                producer.commit_transaction(TIMEOUT_S)
            else:
                producer.flush(TIMEOUT_S)
                producer.abort_transaction(TIMEOUT_S)
    values = asyncio.run(read_with_sluice(broker.bootstrap, topic, b"c3-1"))
    assert values == [b"c%d-%d" % (r, i) for r in range(4) for i in range(2)]


def test_a_second_sluice_producer_fences_the_first(broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)

    async def run() -> None:
        transactional_id = f"fence-{topic}"
        async with sluice.Producer(broker.bootstrap, transactional_id=transactional_id) as old:
            await old.begin_transaction()
            await old.send(topic, b"zombie", partition=0)
            await old.flush()
            async with sluice.Producer(broker.bootstrap, transactional_id=transactional_id) as new:
                with pytest.raises((ProducerFencedError, TransactionAbortableError)):
                    await old.commit_transaction()
                await new.begin_transaction()
                await new.send(topic, b"fresh", partition=0)
                await new.commit_transaction()

    asyncio.run(run())
    assert asyncio.run(read_with_sluice(broker.bootstrap, topic, b"fresh")) == [b"fresh"]


def test_the_sync_producer_commits_what_was_sent_inside_the_transaction(broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    with sluice.sync.Producer(broker.bootstrap, transactional_id=f"sync-{topic}") as producer:
        producer.begin_transaction()
        futures = [producer.send(topic, b"s-%d" % i, partition=0) for i in range(5)]
        producer.commit_transaction()
        assert [f.result(TIMEOUT_S).offset for f in futures] == [0, 1, 2, 3, 4]
        producer.begin_transaction()
        producer.send(topic, b"dropped", partition=0)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"last", partition=0)
        producer.commit_transaction()
    values = read_committed_values(broker.bootstrap, topic, 1, 6)
    assert values == [*(b"s-%d" % i for i in range(5)), b"last"]


def test_run_exactly_once_copies_a_topic_and_commits_its_offsets(broker, topic: str) -> None:
    source, sink = f"{topic}-in", f"{topic}-out"
    create_topic(broker.bootstrap, source, 2)
    create_topic(broker.bootstrap, sink, 2)
    group = unique_group_id()

    async def run() -> int:
        async with sluice.Producer(broker.bootstrap) as plain:
            for i in range(100):
                await plain.send(source, b"r-%d" % i, partition=i % 2)
        consumer = sluice.Consumer(
            source,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            delivery="exactly-once",
            auto_offset_reset="earliest",
            max_poll_records=15,
        )
        producer = sluice.Producer(broker.bootstrap, transactional_id=f"copy-{topic}")
        copied = 0
        stop = asyncio.Event()

        def copy(record: sluice.client.consumer_api.ConsumerRecord) -> list[sluice.Output]:
            nonlocal copied
            copied += 1
            if copied == 100:
                stop.set()
            return [sluice.Output(sink, record.value, partition=record.partition)]

        async with consumer, producer:
            with pytest.raises(ValueError, match="send_offsets_to_transaction"):
                await consumer.commit()
            transactions = await sluice.run_exactly_once(consumer, producer, copy, stop=stop)
            committed = [await consumer.committed(TopicPartition(source, p)) for p in (0, 1)]
        assert committed == [50, 50]
        return transactions

    transactions = asyncio.run(run())
    assert transactions >= 100 // 15
    values = read_committed_values(broker.bootstrap, sink, 2, 100)
    assert sorted(values) == sorted(b"r-%d" % i for i in range(100))


@pytest.mark.slow
def test_an_exactly_once_copy_killed_at_random_instants_loses_and_repeats_nothing(
    broker_factory, topic: str
) -> None:
    seed = int(os.environ.get("SLUICE_EOS_SEED", random.randrange(2**32)))
    print(f"seed {seed} (SLUICE_EOS_SEED={seed} reproduces the kill schedule)")
    rng = random.Random(seed)
    broker = broker_factory(
        {"group.min.session.timeout.ms": "1000", "group.initial.rebalance.delay.ms": "0"}
    )
    source, sink = f"{topic}-in", f"{topic}-out"
    partitions, count = 3, 3_000
    create_topic(broker.bootstrap, source, partitions)
    create_topic(broker.bootstrap, sink, partitions)
    plain = ConfluentProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(count):
        plain.produce(source, value=b"r-%d" % i, partition=i % partitions)
    plain.flush(TIMEOUT_S)
    group, transactional_id = unique_group_id(), f"eos-{topic}"
    command = [
        sys.executable,
        str(APP),
        broker.bootstrap,
        source,
        sink,
        group,
        transactional_id,
    ]
    kills = 4
    for kill in range(kills + 1):
        app = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert app.stdout is not None
            line = app.stdout.readline()  # blocks until the consumer has partitions
            assert line.strip() == b"running", app.stderr.read() if app.stderr else line
            if kill < kills:
                time.sleep(rng.uniform(0.05, 1.5))  # the random instant of the kill
                app.send_signal(signal.SIGKILL)
                app.wait(TIMEOUT_S)
                continue
            values = read_committed_values(broker.bootstrap, sink, partitions, count)
        finally:
            if app.poll() is None:
                app.send_signal(signal.SIGKILL)
                app.wait(TIMEOUT_S)
    assert len(values) >= count, f"seed {seed}: only {len(values)} of {count} records"
    # The application is dead; an END record after everything in each partition tells
    # the final reader it has read it all, duplicates included.
    closer = ConfluentProducer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"end-{topic}"}
    )
    closer.init_transactions(TIMEOUT_S)
    closer.begin_transaction()
    for partition in range(partitions):
        closer.produce(sink, value=b"END", partition=partition)
    closer.commit_transaction(TIMEOUT_S)
    everything = read_committed_values(broker.bootstrap, sink, partitions, count + partitions)
    copied = [value for value in everything if value != b"END"]
    assert len(everything) - len(copied) == partitions, f"seed {seed}: not every END read"
    assert sorted(copied) == sorted(b"r-%d" % i for i in range(count)), f"seed {seed}"


def test_a_transaction_of_offsets_only_commits_them(broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    group = unique_group_id()

    async def run() -> int | None:
        async with sluice.Producer(broker.bootstrap, transactional_id=f"offsets-{topic}") as p:
            await p.begin_transaction()
            await p.send_offsets_to_transaction({TopicPartition(topic, 0): 42}, group)
            await p.commit_transaction()
        async with sluice.Consumer(bootstrap_servers=broker.bootstrap, group_id=group) as c:
            return await c.committed(TopicPartition(topic, 0))

    assert asyncio.run(run()) == 42
