"""The Schema Registry in a cluster of three brokers sharing a ZooKeeper: every broker
answers, calls to the brokers that do not lead ``_schemas``-0 are forwarded to the one
that does, ids are the same whichever broker is asked, and when the leader stops (or is
SIGKILLed) another takes over and ids go on without a collision.

The first test runs three ``sluice serve`` processes and Confluent's client; the second
runs the brokers in this test's event loop with the registry's logic stood in for
(:mod:`registry_stand_in`), to look inside them (which broker hosts the registry).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
from cluster_processes import running_cluster
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from registry_stand_in import blocked_check, call_registry, registry_url, running_broker

from sluice.broker.app import Broker
from sluice.common.ids import TopicPartition
from sluice.protocol.private import DESCRIBE_DELAYS, PrivateRequest

SETTLE_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.05
JSON_BODY = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
REGISTRY_PARTITION = TopicPartition("_schemas", 0)


def _avro(name: str, *fields: str) -> Schema:
    record = {
        "type": "record",
        "name": name,
        "fields": [{"name": field, "type": "string", "default": ""} for field in fields],
    }
    return Schema(json.dumps(record), "AVRO")


def test_any_broker_of_a_cluster_serves_the_registry_through_a_leader_kill(
    tmp_path: Path, zookeeper_connect: str
) -> None:
    with running_cluster(tmp_path, zookeeper_connect, 3) as cluster:
        urls = [broker.schema_registry_url for broker in cluster.brokers]
        assert all(url is not None for url in urls), cluster.log_tails()
        clients = [SchemaRegistryClient({"url": url}) for url in urls]
        first = clients[0].register_schema("orders-value", _avro("Order", "id"))
        second = clients[1].register_schema("payments-value", _avro("Payment", "id"))
        assert (first, second) == (1, 2)
        for client in clients:
            assert client.register_schema("orders-value", _avro("Order", "id")) == 1
            assert sorted(client.get_subjects()) == ["orders-value", "payments-value"]
            latest = client.get_latest_version("payments-value")
            assert (latest.schema_id, latest.version) == (2, 1)
        admin = cluster.admin(cluster.brokers[0])
        leader = admin.list_topics("_schemas", timeout=10).topics["_schemas"].partitions[0].leader
        survivors = [b for b in cluster.brokers if b.node_id != leader]
        cluster.broker(leader).kill()
        client = SchemaRegistryClient({"url": survivors[0].schema_registry_url})
        evolved = client.register_schema("orders-value", _avro("Order", "id", "note"))
        assert evolved == 3
        again = SchemaRegistryClient({"url": survivors[1].schema_registry_url})
        assert again.get_latest_version("orders-value").schema_id == 3
        assert again.get_schema(1).schema_str == client.get_schema(1).schema_str
        # The killed broker comes back on the same registry port and sees the same ids.
        cluster.broker(leader).start()
        back = SchemaRegistryClient({"url": cluster.broker(leader).schema_registry_url})
        assert back.get_latest_version("orders-value").schema_id == 3
        assert back.register_schema("refunds-value", _avro("Refund", "id")) == 4


async def _settled(what: str, holds: Callable[[], bool]) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not holds():
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(POLL_INTERVAL_S)  # polling interval, not a synchronization


async def _register(session: aiohttp.ClientSession, broker: Broker, subject: str) -> int:
    url = f"{registry_url(broker)}/subjects/{subject}/versions"
    status, body, _ = await call_registry(session, "POST", url, data=b"{}", headers=JSON_BODY)
    assert status == 200, body
    schema_id = body["id"]
    assert isinstance(schema_id, int)
    return schema_id


def test_any_broker_answers_and_ids_go_on_when_the_leader_stops(
    tmp_path: Path, zookeeper_connect: str
) -> None:
    async def scenario() -> None:
        async with AsyncExitStack() as stack:
            session = await stack.enter_async_context(aiohttp.ClientSession())
            brokers = [
                await stack.enter_async_context(
                    running_broker(
                        tmp_path / f"broker-{node_id}",
                        {
                            "zookeeper.connect": zookeeper_connect,
                            "node.id": str(node_id),
                            "zookeeper.session.timeout.ms": "4000",
                        },
                    )
                )
                for node_id in range(3)
            ]
            await _settled(
                "every broker sees three brokers",
                lambda: all(len(b.applier.image.brokers) == 3 for b in brokers),
            )
            # Each broker registers one subject; every id is new and every broker
            # agrees on each.
            ids = [await _register(session, b, f"s{b.config.node_id}-value") for b in brokers]
            assert ids == [1, 2, 3]
            for broker in brokers:
                for node_id, expected in enumerate(ids):
                    assert await _register(session, broker, f"s{node_id}-value") == expected
                status, subjects, _ = await call_registry(
                    session, "GET", f"{registry_url(broker)}/subjects"
                )
                assert (status, subjects) == (200, ["s0-value", "s1-value", "s2-value"])
            state = brokers[0].applier.image.partition(REGISTRY_PARTITION)
            assert state is not None and len(state.replicas) == 3
            leader = next(b for b in brokers if b.config.node_id == state.leader)
            others = [b for b in brokers if b is not leader]
            # Only the leader hosts the registry.
            assert leader.schema_registry is not None
            assert leader.schema_registry.runtime.loaded_partitions() == [0]
            for broker in others:
                assert broker.schema_registry is not None
                assert broker.schema_registry.runtime.loaded_partitions() == []
            leader.request_stop()
            # Calls keep being answered, by the next leader once elected.
            assert await _register(session, others[0], "after-value") == 4
            assert await _register(session, others[1], "after-value") == 4
            assert await _register(session, others[1], "s1-value") == 2
            new_state = others[0].applier.image.partition(REGISTRY_PARTITION)
            assert new_state is not None and new_state.leader != leader.config.node_id
            for broker in others:
                status, subjects, _ = await call_registry(
                    session, "GET", f"{registry_url(broker)}/subjects"
                )
                assert subjects == ["after-value", "s0-value", "s1-value", "s2-value"]

    asyncio.run(scenario())


def test_a_slow_forwarded_call_holds_up_no_other_traffic_between_brokers(
    tmp_path: Path, zookeeper_connect: str
) -> None:
    """A registration that takes long at the leader (here a parse held until the test
    releases it) travels on the registry's own connection: the broker's other requests
    to the leader (transactions, share state, the controller channel) go on meanwhile."""

    async def scenario() -> None:
        async with AsyncExitStack() as stack:
            session = await stack.enter_async_context(aiohttp.ClientSession())
            brokers = [
                await stack.enter_async_context(
                    running_broker(
                        tmp_path / f"broker-{node_id}",
                        {"zookeeper.connect": zookeeper_connect, "node.id": str(node_id)},
                    )
                )
                for node_id in range(2)
            ]
            await _settled(
                "every broker sees two brokers",
                lambda: all(len(b.applier.image.brokers) == 2 for b in brokers),
            )
            assert await _register(session, brokers[0], "a-value") == 1
            state = brokers[0].applier.image.partition(REGISTRY_PARTITION)
            assert state is not None
            other = next(b for b in brokers if b.config.node_id != state.leader)
            started, release = blocked_check("slow")
            slow = asyncio.create_task(
                call_registry(
                    session,
                    "POST",
                    f"{registry_url(other)}/check",
                    data=b'{"block": "slow"}',
                    headers=JSON_BODY,
                )
            )
            try:
                await _settled("the slow call reached the leader's parse", started.is_set)
                assert other.peers is not None
                answer = await asyncio.wait_for(
                    other.peers.request_private(
                        state.leader,
                        PrivateRequest(
                            DESCRIBE_DELAYS, {"topic": "a", "partitions": None, "limit": 1}
                        ),
                        SETTLE_TIMEOUT_S,
                    ),
                    SETTLE_TIMEOUT_S,
                )
                assert "partitions" in answer
                assert not slow.done(), "the slow call was still at the leader"
            finally:
                release.set()
            status, body, _ = await slow
            assert status == 200 and body["work"] == {"block": "slow"}, body

    asyncio.run(scenario())
