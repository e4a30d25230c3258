"""sluice.Consumer (async and sync) against a real broker.

Run as a script, this module is a consumer worker for the delivery-mode tests:
``python test_client_consumer.py BOOTSTRAP TOPIC GROUP DELIVERY OUTPUT`` consumes the
topic in the group and appends each processed offset to OUTPUT, one per line, until
killed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import confluent_kafka
import pytest
from client_helpers import create_topic, produce_and_flush, producer_config

import sluice
from sluice.client.consumer_api import ConsumerRecord, TopicPartition

TIMEOUT_S = 30.0
GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


def _worker(bootstrap: str, topic: str, group: str, delivery: str, output: str) -> None:
    with (
        sluice.sync.Consumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            delivery=delivery,
            auto_offset_reset="earliest",
            auto_commit_interval_ms=50,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            max_poll_interval_ms=10_000,
            max_poll_records=20,
            fetch_max_wait_ms=100,
        ) as consumer,
        open(output, "a") as processed,
    ):
        while True:
            for record in consumer.poll(1.0):
                time.sleep(0.002)  # the "processing" of one record
                processed.write(f"{record.offset}\n")
                processed.flush()


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, TIMEOUT_S * 2))


def produce(bootstrap: str, topic: str, messages: list[dict], **config) -> None:
    producer = confluent_kafka.Producer(producer_config(bootstrap, **config))
    produce_and_flush(producer, topic, messages)


async def consume_count(consumer: sluice.Consumer, count: int) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(records) < count and time.monotonic() < deadline:
        for batch in (await consumer.getmany(timeout_ms=500)).values():
            records.extend(batch)
    assert len(records) >= count, f"consumed {len(records)} of {count}"
    return records


# ── assign mode ────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_assign_reads_confluent_records_with_keys_and_headers(broker, topic, codec) -> None:
    create_topic(broker.bootstrap, topic, 2)
    messages = [
        {
            "partition": i % 2,
            "key": None if i % 5 == 0 else f"key-{i}".encode(),
            "value": None if i % 7 == 0 else f"value-{i}".encode() * (i % 3 + 1),
            "headers": [("h", f"{i}".encode()), ("empty", None)] if i % 2 else None,
        }
        for i in range(300)
    ]
    produce(broker.bootstrap, topic, messages, **{"compression.type": codec})

    async def consume() -> list[ConsumerRecord]:
        async with sluice.Consumer(
            bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest"
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            records = await consume_count(consumer, 300)
            assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
            assert await consumer.position(TopicPartition(topic, 0)) == 150
            assert consumer.lag(TopicPartition(topic, 1)) == 0
            return records

    records = run(consume())
    assert len(records) == 300
    by_value = {(r.partition, r.offset): r for r in records}
    for partition in (0, 1):
        assert [r.offset for r in records if r.partition == partition] == list(range(150))
    for i, message in enumerate(messages):
        record = by_value[(i % 2, i // 2)]
        assert record.key == message["key"]
        assert record.value == message["value"]
        assert list(record.headers) == (message["headers"] or [])
        assert record.timestamp > 0


def test_async_iteration_and_getone(broker, topic) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [{"partition": 0, "value": b"%d" % i} for i in range(50)])

    async def consume() -> list[bytes | None]:
        async with sluice.Consumer(
            bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", max_poll_records=7
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            values = [(await consumer.getone()).value]
            async for record in consumer:
                values.append(record.value)
                if record.offset == 49:
                    break
            return values

    assert run(consume()) == [b"%d" % i for i in range(50)]


def test_sync_consumer_iterates_and_polls(broker, topic) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [{"partition": 0, "value": b"%d" % i} for i in range(30)])
    tp = TopicPartition(topic, 0)
    with sluice.sync.Consumer(
        bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", max_poll_records=4
    ) as consumer:
        consumer.assign([tp])
        assert consumer.assignment() == {tp}
        first = consumer.poll(TIMEOUT_S)
        assert [r.offset for r in first] == [0, 1, 2, 3]
        offsets = []
        for record in consumer:
            offsets.append(record.offset)
            if record.offset == 29:
                break
        assert offsets == list(range(4, 30))
        assert consumer.position(tp) == 30
        assert consumer.end_offsets([tp]) == {tp: 30}
        consumer.seek(tp, 28)
        assert [r.value for r in consumer.poll(TIMEOUT_S)] == [b"28", b"29"]


def test_seek_pause_resume_positions_and_offsets(broker, topic) -> None:
    create_topic(broker.bootstrap, topic, 2)
    base_ms = int(time.time() * 1000) - 100_000
    produce(
        broker.bootstrap,
        topic,
        [{"partition": i % 2, "value": b"%d" % i, "timestamp": base_ms + i} for i in range(40)],
    )
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    group = f"g-{topic}"

    async def scenario() -> None:
        async with sluice.Consumer(
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            auto_offset_reset="latest",
            enable_auto_commit=False,
        ) as consumer:
            consumer.assign([p0, p1])
            assert await consumer.position(p0) == 20  # latest: nothing committed
            assert await consumer.end_offsets([p0, p1]) == {p0: 20, p1: 20}
            assert await consumer.beginning_offsets([p0]) == {p0: 0}
            assert await consumer.committed(p0) is None

            found = await consumer.offsets_for_times({p0: base_ms + 10, p1: base_ms + 10_000})
            assert found[p0] is not None
            assert (found[p0].offset, found[p0].timestamp) == (5, base_ms + 10)
            assert found[p1] is None

            consumer.seek(p0, 5)
            consumer.seek_to_beginning(p1)
            assert await consumer.position(p1) == 0
            records = await consume_count(consumer, 35)
            assert sorted((r.partition, r.offset) for r in records) == sorted(
                [(0, o) for o in range(5, 20)] + [(1, o) for o in range(20)]
            )

            # Pause p1: records produced to it are not handed out until resume.
            consumer.pause(p1)
            assert consumer.paused() == {p1}
            produce(broker.bootstrap, topic, [{"partition": p, "value": b"x"} for p in (0, 1)])
            got = await consume_count(consumer, 1)
            assert [(r.partition, r.offset) for r in got] == [(0, 20)]
            assert await consumer.getmany(timeout_ms=300) == {}
            consumer.resume(p1)
            got = await consume_count(consumer, 1)
            assert [(r.partition, r.offset) for r in got] == [(1, 20)]

            # Seek back invalidates what is buffered; the records come again.
            consumer.seek(p0, 18)
            got = await consume_count(consumer, 3)
            assert [r.offset for r in got] == [18, 19, 20]

            await consumer.commit()
            assert await consumer.committed(p0) == 21
            assert await consumer.committed(p1) == 21
            await consumer.commit({p0: 3})
            assert await consumer.committed(p0) == 3
            consumer.seek_to_end(p0)
            assert await consumer.position(p0) == 21

        # A new consumer in the group starts from the committed offset.
        async with sluice.Consumer(
            bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False
        ) as consumer:
            consumer.assign([p0])
            assert await consumer.position(p0) == 3
            got = await consume_count(consumer, 18)
            assert got[0].offset == 3

    run(scenario())


def test_out_of_range_offset_is_reset_by_policy(broker, topic) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [{"partition": 0, "value": b"v"} for _ in range(5)])
    tp = TopicPartition(topic, 0)

    async def scenario() -> None:
        async with sluice.Consumer(
            bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest"
        ) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 1000)
            got = await consume_count(consumer, 5)
            assert [r.offset for r in got] == [0, 1, 2, 3, 4]
        async with sluice.Consumer(
            bootstrap_servers=broker.bootstrap, auto_offset_reset="none"
        ) as consumer:
            consumer.assign([tp])
            with pytest.raises(sluice.client.consumer_api.NoOffsetForPartitionError):
                await consumer.getmany(timeout_ms=5000)

    run(scenario())


def test_exactly_once_settings_are_checked_clearly() -> None:
    with pytest.raises(ValueError, match="needs a group_id"):
        sluice.Consumer(bootstrap_servers="127.0.0.1:1", delivery="exactly-once")
    with pytest.raises(ValueError, match="reads only committed records"):
        sluice.Consumer(
            bootstrap_servers="127.0.0.1:1",
            group_id="g",
            delivery="exactly-once",
            isolation_level="read_uncommitted",
        )
    consumer = sluice.Consumer(
        bootstrap_servers="127.0.0.1:1", group_id="g", delivery="exactly-once"
    )
    assert consumer.isolation_level == "read_committed"


# ── groups ─────────────────────────────────────────────────────────────────────────────


def _group_broker(broker_factory):
    return broker_factory(GROUP_OVERRIDES)


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_two_sluice_consumers_split_six_partitions(broker_factory, topic, strategy) -> None:
    broker = _group_broker(broker_factory)
    create_topic(broker.bootstrap, topic, 6)
    group = f"g-{topic}"
    total = 600
    assignments: list[list[set[TopicPartition]]] = [[], []]
    revocations: list[list[set[TopicPartition]]] = [[], []]

    class Listener(sluice.client.consumer_api.ConsumerRebalanceListener):
        def __init__(self, index: int) -> None:
            self.index = index

        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            assignments[self.index].append(assigned)

        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            revocations[self.index].append(revoked)

    def make(index: int) -> sluice.Consumer:
        return sluice.Consumer(
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            partition_assignment_strategy=[strategy],
            heartbeat_interval_ms=200,
            fetch_max_wait_ms=100,
            rebalance_listener=Listener(index),
        )

    async def scenario() -> Counter[tuple[int, int]]:
        async with make(0) as first, make(1) as second:
            first.subscribe([topic])
            deadline = time.monotonic() + TIMEOUT_S
            while len(first.assignment()) < 6 and time.monotonic() < deadline:
                await first.getmany(timeout_ms=100)
            assert len(first.assignment()) == 6, "alone, the first member gets everything"
            second.subscribe([topic])
            consumers = (first, second)
            deadline = time.monotonic() + TIMEOUT_S
            while time.monotonic() < deadline:
                held = [c.assignment() for c in consumers]
                if all(len(h) == 3 for h in held) and not held[0] & held[1]:
                    break
                await asyncio.gather(*(c.getmany(timeout_ms=100) for c in consumers))
            else:
                pytest.fail(f"no even split: {[c.assignment() for c in consumers]}")
            await asyncio.to_thread(
                produce,
                broker.bootstrap,
                topic,
                [{"partition": i % 6, "value": b"%d" % i} for i in range(total)],
            )
            seen: Counter[tuple[int, int]] = Counter()
            deadline = time.monotonic() + TIMEOUT_S
            while sum(seen.values()) < total and time.monotonic() < deadline:
                batches = await asyncio.gather(*(c.getmany(timeout_ms=200) for c in consumers))
                for consumer, batch in zip(consumers, batches, strict=True):
                    for tp, records in batch.items():
                        assert tp in consumer.assignment()
                        seen.update((r.partition, r.offset) for r in records)
            # Nothing more arrives afterwards.
            extra = await asyncio.gather(*(c.getmany(timeout_ms=300) for c in consumers))
            assert all(not batch for batch in extra)
            final.extend(c.assignment() for c in consumers)
            before_close.extend(len(r) for r in revocations)
            return seen

    final: list[set[TopicPartition]] = []
    before_close: list[int] = []
    seen = run(scenario())
    assert len(seen) == total and set(seen.values()) == {1}, "each record exactly once"
    assert all(assignments), "both members were assigned partitions"
    if strategy == "cooperative-sticky":
        # Incremental: a member only ever gives up partitions it does not end with.
        for index in (0, 1):
            for revoked in revocations[index][: before_close[index]]:
                assert not revoked & final[index], (revoked, final[index])


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_mixed_group_with_confluent_consumer(broker_factory, topic, strategy) -> None:
    broker = _group_broker(broker_factory)
    create_topic(broker.bootstrap, topic, 6)
    group = f"g-{topic}"
    total = 300
    other = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "partition.assignment.strategy": strategy,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "fetch.wait.max.ms": 100,
            "session.timeout.ms": 10_000,
        }
    )
    other.subscribe([topic])
    try:
        with sluice.sync.Consumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            partition_assignment_strategy=[strategy],
            heartbeat_interval_ms=200,
            fetch_max_wait_ms=100,
        ) as ours:
            seen: Counter[tuple[int, int]] = Counter()

            def poll_both() -> None:
                for message in other.consume(100, 0.1):
                    assert message.error() is None, message.error()
                    seen[(message.partition(), message.offset())] += 1
                for record in ours.poll(0.1):
                    seen[(record.partition, record.offset)] += 1

            deadline = time.monotonic() + TIMEOUT_S
            while time.monotonic() < deadline:
                theirs = {(tp.topic, tp.partition) for tp in other.assignment()}
                mine = {tuple(tp) for tp in ours.assignment()}
                if len(theirs) == 3 and len(mine) == 3 and not theirs & mine:
                    break
                poll_both()
            else:
                pytest.fail(f"no even split: {other.assignment()} / {ours.assignment()}")
            assert not seen
            produce(
                broker.bootstrap,
                topic,
                [{"partition": i % 6, "value": b"%d" % i} for i in range(total)],
            )
            deadline = time.monotonic() + TIMEOUT_S
            while sum(seen.values()) < total and time.monotonic() < deadline:
                poll_both()
            assert len(seen) == total and set(seen.values()) == {1}, "each record exactly once"
    finally:
        other.close()


def test_pattern_subscription_and_unsubscribe(broker_factory, topic) -> None:
    broker = _group_broker(broker_factory)
    for suffix in ("a", "b"):
        create_topic(broker.bootstrap, f"{topic}-{suffix}", 1)
        produce(broker.bootstrap, f"{topic}-{suffix}", [{"partition": 0, "value": b"v"}])

    async def scenario() -> None:
        async with sluice.Consumer(
            bootstrap_servers=broker.bootstrap,
            group_id=f"g-{topic}",
            auto_offset_reset="earliest",
            heartbeat_interval_ms=200,
        ) as consumer:
            consumer.subscribe(pattern=f"{topic}-.*")
            got = await consume_count(consumer, 2)
            assert {r.topic for r in got} == {f"{topic}-a", f"{topic}-b"}
            await consumer.unsubscribe()
            assert consumer.assignment() == set()

    run(scenario())


# ── delivery modes ─────────────────────────────────────────────────────────────────────


def _read_offsets(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().splitlines() if line.strip()]


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)  # polling a file another process writes, with a deadline


def _start_worker(bootstrap: str, topic: str, group: str, delivery: str, output: Path):
    return subprocess.Popen(
        [sys.executable, __file__, bootstrap, topic, group, delivery, str(output)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


@pytest.mark.parametrize("delivery", ["at-most-once", "at-least-once"])
def test_delivery_mode_when_a_consumer_is_killed_mid_batch(
    broker_factory, topic, tmp_path, delivery
) -> None:
    broker = _group_broker(broker_factory)
    create_topic(broker.bootstrap, topic, 1)
    total = 400
    produce(broker.bootstrap, topic, [{"partition": 0, "value": b"%d" % i} for i in range(total)])
    group = f"g-{topic}"
    first_output, second_output = tmp_path / "first.txt", tmp_path / "second.txt"

    first = _start_worker(broker.bootstrap, topic, group, delivery, first_output)
    try:
        _wait_for(lambda: len(_read_offsets(first_output)) >= 110, "the first worker to run")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    killed_at = _read_offsets(first_output)
    assert len(killed_at) < total, "killed before the end"

    second = _start_worker(broker.bootstrap, topic, group, delivery, second_output)
    try:
        _wait_for(lambda: total - 1 in _read_offsets(second_output), "the rest", 60)
    finally:
        second.send_signal(signal.SIGKILL)
        second.wait()

    processed = Counter(_read_offsets(first_output) + _read_offsets(second_output))
    repeated = sorted(o for o, n in processed.items() if n > 1)
    missing = sorted(set(range(total)) - set(processed))
    print(f"{delivery}: killed after {len(killed_at)}; repeated {repeated}, lost {missing}")
    if delivery == "at-most-once":
        assert not repeated, f"at-most-once repeated {repeated}"
    else:
        assert not missing, f"at-least-once lost {missing}"
    assert set(processed) <= set(range(total))


if __name__ == "__main__":
    _worker(*sys.argv[1:6])
