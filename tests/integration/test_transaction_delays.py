"""A request of a finished transaction, delayed in the network until the producer has
started its next transaction on the same partitions (the flaw Jepsen found in Kafka
3.8, KAFKA-17754), must change nothing.

A proxy between the client and the broker holds one request of transaction T1: its
EndTxn(commit), or one of its Produce requests. The client gives up on the request,
retries it on a new connection, finishes T1 and begins T2, writing to the same
partitions; then the proxy lets the old request through. With transaction version 2
(EndTxn v5, which Sluice's producer uses) every EndTxn bumps the producer epoch, so the
old request carries an epoch that is already fenced: the late EndTxn cannot commit T2
early, and the late Produce cannot add T1's records into T2.

The checks, on what a read_committed reader sees afterwards: no aborted read (a record
of an aborted transaction), no lost write (a record of a committed transaction
missing), no torn transaction (part of T2 visible while the rest is not), and no
duplicate.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from delaying_proxy import DelayingProxy

import sluice
from sluice.client.admin import NewTopic
from sluice.client.admin_api import Admin
from sluice.common.ids import TopicPartition
from sluice.protocol.versions import ApiKey

PARTITIONS = 2
SCENARIO_TIMEOUT_S = 90.0
REQUEST_TIMEOUT_MS = 5_000
"""Short, so the client gives up on the held request and retries it soon; long enough
that no other request of the scenario times out on a busy machine."""


@pytest.fixture
def proxied(broker_factory):
    """A broker that advertises the proxy's port, and the proxy's socket: bound (not yet
    listening) on a port of the kernel's choice, so that nothing can take the port
    before the proxy listens on it."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        broker = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"})
        yield broker, bound


async def read_committed(bootstrap: str, topic: str, end: bytes) -> dict[int, list[bytes]]:
    """Every committed record of ``topic`` by partition, up to ``end`` in each."""
    values: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    async with sluice.Consumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
    ) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        while not all(end in got for got in values.values()):
            for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                values[tp.partition].extend(r.value for r in records if r.value is not None)
    return values


async def run_scenario(
    broker, bound: socket.socket, topic: str, held_api: ApiKey
) -> dict[int, list[bytes]]:
    proxy = DelayingProxy(broker.host, broker.port)
    await proxy.start(bound)
    bootstrap = f"127.0.0.1:{bound.getsockname()[1]}"
    try:
        async with Admin(bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, PARTITIONS)])
        async with sluice.Producer(
            bootstrap,
            transactional_id=f"delayed-{topic}",
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            linger_ms=0,
        ) as producer:

            async def send_all(prefix: bytes) -> None:
                for partition in range(PARTITIONS):
                    for i in range(3):
                        await producer.send(
                            topic, b"%s-%d-%d" % (prefix, partition, i), partition=partition
                        )

            await producer.begin_transaction()
            if held_api is ApiKey.PRODUCE:
                proxy.hold(ApiKey.PRODUCE)
            await send_all(b"t1")
            if held_api is ApiKey.END_TXN:
                proxy.hold(ApiKey.END_TXN)
            # The held request times out in the client, which retries it on a new
            # connection: T1 commits.
            await producer.commit_transaction()
            assert proxy.held.is_set(), f"no {held_api.name} was held"
            await producer.begin_transaction()
            await send_all(b"t2")
            await producer.flush()
            await proxy.release()  # the old request reaches the broker now, inside T2
            await send_all(b"t2-more")
            await producer.commit_transaction()
            await producer.begin_transaction()
            await send_all(b"t3-aborted")
            await producer.abort_transaction()
            await producer.begin_transaction()
            for partition in range(PARTITIONS):
                await producer.send(topic, b"end", partition=partition)
            await producer.commit_transaction()
        return await read_committed(bootstrap, topic, b"end")
    finally:
        await proxy.close()


@pytest.mark.parametrize("held_api", [ApiKey.END_TXN, ApiKey.PRODUCE], ids=["EndTxn", "Produce"])
def test_a_delayed_request_of_a_finished_transaction_changes_nothing(
    proxied, topic: str, held_api: ApiKey
) -> None:
    broker, bound = proxied
    values = asyncio.run(
        asyncio.wait_for(run_scenario(broker, bound, topic, held_api), SCENARIO_TIMEOUT_S)
    )
    for partition in range(PARTITIONS):
        expected = [
            *(b"t1-%d-%d" % (partition, i) for i in range(3)),
            *(b"t2-%d-%d" % (partition, i) for i in range(3)),
            *(b"t2-more-%d-%d" % (partition, i) for i in range(3)),
            b"end",
        ]
        got = values[partition]
        assert not [v for v in got if v.startswith(b"t3")], f"aborted read: {got}"
        assert len(got) == len(set(got)), f"duplicate: {got}"
        assert got == expected, f"partition {partition}: lost write or torn transaction: {got}"
