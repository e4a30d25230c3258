"""sluice.ShareConsumer (async and sync) against a real broker: queues on a topic.

Every group is told to start from the earliest offset (``share.auto.offset.reset``),
so records produced before its members join are delivered. Waits poll with deadlines.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from broker_process import BrokerProcess
from client_helpers import create_topic, produce_and_flush, producer_config, unique_group_id
from confluent_kafka import Producer

import sluice
from sluice.client.admin_share_groups import alter_share_group_configs
from sluice.client.errors import ClientError, UnsupportedApiError
from sluice.client.share_records import ShareConsumerRecord
from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition

TIMEOUT_S = 30.0
LOCK_DURATION_MS = 60_000
"""The longest lock a group may set: a record given back only by its lock's expiry
would not come back within a test's deadline."""


@pytest.fixture(scope="module")
def broker(fast_groups_broker: BrokerProcess) -> BrokerProcess:
    return fast_groups_broker


def run(coroutine: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coroutine, TIMEOUT_S * 3))


def produce(
    bootstrap: str, topic: str, count: int, *, first: int = 0, batch_records: int = 10_000
) -> None:
    """``count`` records, in producer batches of at most ``batch_records``."""
    producer = Producer(producer_config(bootstrap, **{"batch.num.messages": batch_records}))
    produce_and_flush(
        producer,
        topic,
        [{"value": f"job-{first + i}".encode(), "partition": 0} for i in range(count)],
    )


async def share_group(bootstrap: str) -> str:
    """A new share group id, set to start at the earliest offset with long locks."""
    group_id = unique_group_id()
    async with sluice.Admin(bootstrap) as admin:
        await alter_share_group_configs(
            admin,
            group_id,
            set_configs={
                "share.auto.offset.reset": "earliest",
                "share.record.lock.duration.ms": str(LOCK_DURATION_MS),
            },
        )
    return group_id


def consumer(bootstrap: str, topic: str, group_id: str, **options: Any) -> sluice.ShareConsumer:
    settings: dict[str, Any] = {
        "acknowledgement_mode": "explicit",
        "max_poll_records": 10,
        "fetch_max_wait_ms": 200,
    }
    settings.update(options)
    return sluice.ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group_id, **settings)


async def until(condition: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def first_records(
    share_consumer: sluice.ShareConsumer, what: str
) -> list[ShareConsumerRecord]:
    """The first poll that returns records."""
    deadline = time.monotonic() + TIMEOUT_S
    while not (received := await share_consumer.poll(0.5)):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
    return received


@pytest.mark.parametrize("member_count", [2, 4])
def test_consumers_of_one_partition_share_the_work_and_each_record_is_accepted_once(
    broker: BrokerProcess, topic: str, member_count: int
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    total = 300

    async def scenario() -> None:
        group_id = await share_group(broker.bootstrap)
        members = [consumer(broker.bootstrap, topic, group_id) for _ in range(member_count)]
        for member in members:
            await member.start()
        try:
            for member in members:
                await until(lambda m=member: bool(m.assignment()), "an assignment")
            # Batches of 10 records: a fetch takes whole batches (Kafka's batch_optimized
            # acquire mode), so one batch of 300 would be one member's.
            produce(broker.bootstrap, topic, total, batch_records=10)
            accepted: list[tuple[int, int]] = []

            async def work(index: int, member: sluice.ShareConsumer) -> None:
                deadline = time.monotonic() + TIMEOUT_S * 2
                while len(accepted) < total and time.monotonic() < deadline:
                    for record in await member.poll(0.3):
                        await asyncio.sleep(0.002)  # the "processing" of one record
                        member.accept(record)
                        accepted.append((index, record.offset))
                    results = await member.commit()
                    assert all(error is None for error in results.values()), results

            await asyncio.gather(*(work(i, m) for i, m in enumerate(members)))
            by_offset = Counter(offset for _, offset in accepted)
            assert sorted(by_offset) == list(range(total))
            assert set(by_offset.values()) == {1}, "a record was accepted twice"
            by_member = Counter(index for index, _ in accepted)
            assert set(by_member) == set(range(member_count)), f"idle members: {by_member}"
        finally:
            for member in members:
                await member.close()

    run(scenario())


def test_a_released_record_is_delivered_again_with_delivery_count_2(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 1)

    async def scenario() -> None:
        group_id = await share_group(broker.bootstrap)
        async with consumer(broker.bootstrap, topic, group_id) as member:
            (first,) = await first_records(member, "the record")
            assert (first.offset, first.delivery_count, first.value) == (0, 1, b"job-0")
            member.release(first)
            assert await member.commit() == {TopicPartition(topic, 0): None}
            (again,) = await first_records(member, "the released record")
            assert (again.offset, again.delivery_count, again.value) == (0, 2, b"job-0")
            member.accept(again)
            assert await member.commit() == {TopicPartition(topic, 0): None}

    run(scenario())


def test_a_rejected_record_is_not_delivered_again(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 1)

    async def scenario() -> None:
        group_id = await share_group(broker.bootstrap)
        async with consumer(broker.bootstrap, topic, group_id) as member:
            (first,) = await first_records(member, "the record")
            member.reject(first)
            assert await member.commit() == {TopicPartition(topic, 0): None}
            produce(broker.bootstrap, topic, 1, first=1)
            (later,) = await first_records(member, "the next record")
            assert (later.offset, later.delivery_count) == (1, 1)  # offset 0 stays rejected
            member.accept(later)
            await member.commit()

    run(scenario())


def test_close_releases_the_records_it_holds_at_once(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 5)

    async def scenario() -> None:
        group_id = await share_group(broker.bootstrap)
        first = consumer(broker.bootstrap, topic, group_id)
        await first.start()
        try:
            held = await first_records(first, "records")
        finally:
            await first.close()  # explicit mode, nothing acknowledged: all released
        assert {r.delivery_count for r in held} == {1}
        async with consumer(
            broker.bootstrap, topic, group_id, acknowledgement_mode="implicit"
        ) as second:
            again: dict[int, ShareConsumerRecord] = {}
            deadline = time.monotonic() + TIMEOUT_S  # well inside the 60 s lock
            while not {r.offset for r in held} <= set(again):
                assert time.monotonic() < deadline, f"released records not redelivered: {again}"
                again.update((r.offset, r) for r in await second.poll(0.5))
            for record in held:
                assert again[record.offset].delivery_count == 2

    run(scenario())


def test_implicit_mode_accepts_the_previous_poll_on_the_next(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 20)

    async def scenario() -> None:
        group_id = await share_group(broker.bootstrap)
        seen: list[ShareConsumerRecord] = []
        async with consumer(
            broker.bootstrap, topic, group_id, acknowledgement_mode="implicit"
        ) as member:
            deadline = time.monotonic() + TIMEOUT_S
            while len(seen) < 20:
                assert time.monotonic() < deadline, f"only {len(seen)} of 20 records arrived"
                seen += await member.poll(0.5)
            assert await member.commit() == {TopicPartition(topic, 0): None}
        assert sorted(r.offset for r in seen) == list(range(20))
        assert {r.delivery_count for r in seen} == {1}
        async with consumer(broker.bootstrap, topic, group_id) as later:
            assert await later.poll(1.0) == []  # all accepted: nothing left to deliver

    run(scenario())


def test_renew_is_sent_or_refused_by_what_the_broker_serves(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 1)

    async def scenario() -> None:
        group_id = await share_group(broker.bootstrap)
        async with sluice.Admin(broker.bootstrap) as admin:
            connection = await admin.cluster.any_connection()
            serves_v2 = connection.broker_ranges.get(79, (0, -1))[1] >= 2
        async with consumer(broker.bootstrap, topic, group_id) as member:
            (record,) = await first_records(member, "the record")
            if not serves_v2:
                with pytest.raises(UnsupportedApiError, match="v2"):
                    member.renew(record)
            else:
                member.renew(record)
                assert await member.commit() == {TopicPartition(topic, 0): None}
            member.accept(record)
            assert await member.commit() == {TopicPartition(topic, 0): None}

    run(scenario())


def test_explicit_mode_refuses_to_poll_past_unacknowledged_records(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 1)

    async def scenario() -> None:
        group_id = await share_group(broker.bootstrap)
        async with consumer(broker.bootstrap, topic, group_id) as member:
            (record,) = await first_records(member, "the record")
            with pytest.raises(ClientError, match="not acknowledged"):
                await member.poll(0)
            member.accept(record)
            with pytest.raises(ValueError, match="not held"):
                member.accept(record)

    run(scenario())


def test_the_blocking_share_consumer(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 3)

    async def group() -> str:
        return await share_group(broker.bootstrap)

    group_id = asyncio.run(group())
    offsets: list[int] = []
    with sluice.sync.ShareConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group_id,
        acknowledgement_mode="explicit",
    ) as member:
        deadline = time.monotonic() + TIMEOUT_S
        while len(offsets) < 3:
            assert time.monotonic() < deadline
            for record in member.poll(0.5):
                member.accept(record)
                offsets.append(record.offset)
        assert member.commit() == {TopicPartition(topic, 0): None}
    assert sorted(offsets) == [0, 1, 2]


def test_accepting_after_the_lock_expired_is_reported_by_commit(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 1)

    async def scenario() -> None:
        group_id = await share_group(broker.bootstrap)
        async with sluice.Admin(broker.bootstrap) as admin:
            shortest_lock = {"share.record.lock.duration.ms": "15000"}
            await alter_share_group_configs(admin, group_id, set_configs=shortest_lock)
        async with (
            consumer(broker.bootstrap, topic, group_id) as slow,
            consumer(broker.bootstrap, topic, group_id) as other,
        ):
            (late,) = await first_records(slow, "the record")
            # The lock ends after 15 s: the record goes to the other member.
            deadline = time.monotonic() + TIMEOUT_S
            while not (again := await other.poll(0.5)):
                assert time.monotonic() < deadline, "the record was not redelivered"
            assert [(r.offset, r.delivery_count) for r in again] == [(0, 2)]
            slow.accept(late)
            (error,) = (await slow.commit()).values()
            assert error is not None and error.code == ErrorCode.invalid_record_state
            other.accept(again[0])
            assert await other.commit() == {TopicPartition(topic, 0): None}

    run(scenario())
