"""The client's answers to a newcomer's mistakes, against a real broker: a str value or
key, a typo in an option, a list of topics where names were expected, no broker
running. Each raises at once with a message that says what to do, and loses nothing
that was sent correctly; the records are read back with confluent-kafka."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from broker_process import BrokerProcess, free_port
from client_helpers import consume_exactly, create_topic, unique_group_id

import sluice
import sluice.sync
from sluice.client.errors import BrokerUnreachableError
from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.protocol.records.builder import RecordInput

SCENARIO_TIMEOUT_S = 60.0
"""Bound of each asyncio scenario: a hang fails the test instead of stalling the run."""

REFUSED_WITHIN_S = 5.0
"""How soon a client must give up on bootstrap addresses that refuse connections (its
bounded retry takes well under a second; the rest is slack for a loaded machine),
against the 30 s of the default request timeout."""


T = TypeVar("T")


def run(scenario: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(SCENARIO_TIMEOUT_S):
            return await scenario

    return asyncio.run(bounded())


def test_a_str_value_or_key_raises_at_send_and_later_sends_still_deliver(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic)

    async def scenario() -> list[int]:
        async with sluice.Producer(broker.bootstrap, linger_ms=0) as producer:
            with pytest.raises(TypeError, match=r"value must be bytes, .* not str: encode it"):
                await producer.send(topic, "a string")
            with pytest.raises(TypeError, match=r"key must be bytes, .* not str"):
                await producer.send(topic, b"v", key="k")
            with pytest.raises(TypeError, match=r"value must be bytes, .* not dict"):
                await producer.send(topic, {"a": 1})
            with pytest.raises(TypeError, match="timestamp_ms must be an int"):
                await producer.send(topic, b"v", timestamp_ms="now")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="topic must be a topic name"):
                await producer.send(b"orders", b"v")  # type: ignore[arg-type]
            good = [await producer.send(topic, f"ok-{i}".encode()) for i in range(3)]
            good.append(await producer.send(topic, bytearray(b"ok-3"), key=memoryview(b"k")))
            return [(await future).offset for future in good]

    assert run(scenario()) == [0, 1, 2, 3]
    messages = consume_exactly(broker.bootstrap, [(topic, 0)], 4, extra_wait_s=0.5)
    assert [m.value() for m in messages] == [b"ok-0", b"ok-1", b"ok-2", b"ok-3"]
    assert messages[3].key() == b"k"


def test_serializers_turn_str_and_objects_into_bytes(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)

    async def scenario() -> None:
        async with sluice.Producer(
            broker.bootstrap,
            key_serializer=str.encode,
            value_serializer=lambda value: json.dumps(value).encode(),
        ) as producer:
            await producer.send_and_wait(topic, {"order": 1}, key="customer-7")
            await producer.send_and_wait(topic, None, key="customer-7")  # a tombstone

    run(scenario())
    messages = consume_exactly(broker.bootstrap, [(topic, 0)], 2)
    assert [(m.key(), m.value()) for m in messages] == [
        (b"customer-7", b'{"order": 1}'),
        (b"customer-7", None),
    ]


def test_one_record_that_cannot_be_encoded_fails_alone_and_the_sender_lives_on(
    broker: BrokerProcess, topic: str
) -> None:
    """``send`` refuses every bad record it can see; one its checks let through (here
    put in the producer's queue directly, past ``send``) fails its own future and the
    records around it, of the same batch, are delivered."""
    create_topic(broker.bootstrap, topic)

    async def scenario() -> None:
        async with sluice.Producer(broker.bootstrap, linger_ms=60_000) as producer:
            before = await producer.send(topic, b"before", partition=0)
            bad: asyncio.Future[sluice.RecordMetadata] = asyncio.get_running_loop().create_future()
            producer._accumulator.append(
                TopicPartition(topic, 0),
                RecordInput(None, "not bytes"),  # type: ignore[arg-type]
                64,
                bad,
                0,
            )
            after = await producer.send(topic, b"after", partition=0)
            await producer.flush()
            assert (await before).offset == 0
            assert (await after).offset == 1
            with pytest.raises(errors.InvalidRecord, match="cannot be encoded"):
                await bad
            later = await producer.send(topic, b"later", partition=0)
            await producer.flush()
            assert (await later).offset == 2

    run(scenario())
    messages = consume_exactly(broker.bootstrap, [(topic, 0)], 3, extra_wait_s=0.5)
    assert [m.value() for m in messages] == [b"before", b"after", b"later"]


def test_the_sync_producer_raises_bad_types_in_the_calling_thread(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic)
    with sluice.sync.Producer(broker.bootstrap) as producer:
        with pytest.raises(TypeError, match=r"value must be bytes, .* not str"):
            producer.send(topic, "a string")
        with pytest.raises(TypeError, match=r"key must be bytes, .* not int"):
            producer.send_and_wait(topic, b"v", key=7)
        assert producer.send(topic, b"fine").result(timeout=SCENARIO_TIMEOUT_S).offset == 0
    assert [m.value() for m in consume_exactly(broker.bootstrap, [(topic, 0)], 1)] == [b"fine"]


@pytest.mark.parametrize("client", ["Producer", "Consumer", "ShareConsumer", "Admin"])
def test_refused_bootstrap_addresses_fail_fast_naming_each(client: str) -> None:
    addresses = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]

    async def start() -> None:
        options: dict[str, object] = {"bootstrap_servers": ",".join(addresses)}
        if client == "ShareConsumer":
            options["group_id"] = "g"
        topics = ("orders",) if client == "ShareConsumer" else ()
        instance = getattr(sluice, client)(*topics, **options)
        await instance.start()

    started = time.monotonic()
    with pytest.raises(BrokerUnreachableError) as raised:
        run(start())
    elapsed_s = time.monotonic() - started
    message = str(raised.value)
    assert all(address in message for address in addresses), message
    assert "connection refused" in message and "sluice serve" in message, message
    assert elapsed_s < REFUSED_WITHIN_S, f"{client} took {elapsed_s:.1f} s to give up"


def test_the_sync_clients_fail_fast_too() -> None:
    address = f"127.0.0.1:{free_port()}"
    for make in (
        lambda: sluice.sync.Producer(address),
        lambda: sluice.sync.Consumer(bootstrap_servers=address),
        lambda: sluice.sync.Admin(address),
    ):
        started = time.monotonic()
        with pytest.raises(BrokerUnreachableError, match=f"cannot reach broker at {address}"):
            make()
        assert time.monotonic() - started < REFUSED_WITHIN_S


def test_a_list_of_topics_is_taken_where_names_are_expected(
    broker: BrokerProcess, topic: str
) -> None:
    topics = [f"{topic}-a", f"{topic}-b"]
    for name in topics:
        create_topic(broker.bootstrap, name)
    with sluice.sync.Producer(broker.bootstrap) as producer:
        for name in topics:
            producer.send_and_wait(name, name.encode())

    async def scenario() -> set[bytes | None]:
        async with sluice.Consumer(
            topics,
            bootstrap_servers=broker.bootstrap,
            group_id=unique_group_id(),
            auto_offset_reset="earliest",
        ) as consumer:
            seen: set[bytes | None] = set()
            while len(seen) < 2:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    seen.update(record.value for record in records)
            return seen

    assert run(scenario()) == {name.encode() for name in topics}

    with sluice.sync.Consumer(
        bootstrap_servers=broker.bootstrap, group_id=unique_group_id()
    ) as consumer:
        consumer.subscribe(topics[0])  # one name where a list was expected
        assert consumer.wait_for_assignment(SCENARIO_TIMEOUT_S) == {TopicPartition(topics[0], 0)}
        with pytest.raises(TypeError, match="topic names"):
            consumer.subscribe([topics[0], 5])  # type: ignore[list-item]


def test_wrong_topic_types_are_clear_type_errors() -> None:
    with pytest.raises(TypeError, match=r"Consumer takes topic names \(str\).* not int 5"):
        sluice.Consumer(5, group_id="g")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="group_id must be a str, not list"):
        sluice.Consumer("orders", group_id=["g"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"topic must be a topic name \(str\), not int 1"):
        sluice.ShareConsumer(["orders", 1], group_id="g")  # type: ignore[arg-type]
    assert sluice.ShareConsumer(["a", "b"], group_id="g").topics == ["a", "b"]
