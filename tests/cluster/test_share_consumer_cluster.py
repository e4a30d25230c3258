"""sluice.ShareConsumer on a three-broker cluster: one share session per partition
leader, and a partition leader or the group's coordinator killed with SIGKILL while
members consume. Every record is accepted and none is lost (records in flight at the
crash may be delivered, and accepted, twice)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from client_helpers import produce_and_flush, producer_config
from cluster_processes import Cluster, running_cluster
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

import sluice
from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.client.admin_share_groups import alter_share_group_configs
from sluice.client.errors import ClientError
from sluice.common.errors import KafkaError

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TIMEOUT_S = 90.0
RETRY_BACKOFF_S = 0.1
"""A member waits this long after a failed poll or commit before it tries again."""
PARTITIONS = 3
PER_PARTITION = 100


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), zookeeper.connect, 3) as started:
        yield started


def _queue(cluster: Cluster) -> tuple[str, str]:
    topic, group = f"queue-{uuid.uuid4().hex[:8]}", f"workers-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin(cluster.running()[0])
    admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[
        topic
    ].result(TIMEOUT_S)
    cluster.wait_for(
        lambda s: topic in s["topics"] and all(p["leader"] >= 0 for p in s["topics"][topic])
    )

    async def configure() -> None:
        async with sluice.Admin(cluster.bootstrap) as client:
            await alter_share_group_configs(
                client, group, set_configs={"share.auto.offset.reset": "earliest"}
            )

    asyncio.run(configure())
    return topic, group


def _produce(cluster: Cluster, topic: str, first: int, count: int) -> None:
    """``count`` records to each partition, valued from ``first`` on."""
    producer = Producer(producer_config(cluster.bootstrap, acks="all"))
    produce_and_flush(
        producer,
        topic,
        (
            {"value": b"%d" % i, "partition": p}
            for p in range(PARTITIONS)
            for i in range(first, first + count)
        ),
    )


async def _consume(
    bootstrap: str, topic: str, group: str, accepted: list[tuple[int, int]], stop: asyncio.Event
) -> None:
    """A member accepting everything it gets, riding out a leader's crash (its polls
    fail while leadership moves; it polls again)."""
    async with sluice.ShareConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        acknowledgement_mode="explicit",
        max_poll_records=20,
        fetch_max_wait_ms=200,
        request_timeout_ms=5000,
    ) as member:
        deadline = time.monotonic() + TIMEOUT_S
        while not stop.is_set():
            # Bounded, and backing off after a failure: a member whose calls fail at once
            # would otherwise hold the event loop (nothing else could stop it).
            assert time.monotonic() < deadline, f"{len(set(accepted))} records accepted"
            try:
                records = await member.poll(0.5)
            except (KafkaError, ClientError):
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            for record in records:
                member.accept(record)
                accepted.append((record.partition, record.offset))
            try:
                await member.commit()
            except (KafkaError, ClientError):
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue


async def _coordinator(cluster: Cluster, group: str) -> int:
    async with sluice.Admin(cluster.bootstrap) as admin:
        return (await admin.find_coordinator(group)).node_id


def _everything(accepted: list[tuple[int, int]]) -> bool:
    return len(set(accepted)) == PARTITIONS * PER_PARTITION


def test_members_read_every_leader_each_record_accepted_once(cluster: Cluster) -> None:
    topic, group = _queue(cluster)
    _produce(cluster, topic, 0, PER_PARTITION)
    leaders = {p["leader"] for p in cluster.status()["topics"][topic]}
    accepted: list[tuple[int, int]] = []

    async def scenario() -> None:
        stop = asyncio.Event()
        members = [
            asyncio.create_task(_consume(cluster.bootstrap, topic, group, accepted, stop))
            for _ in range(2)
        ]
        deadline = time.monotonic() + TIMEOUT_S
        while not _everything(accepted):
            assert time.monotonic() < deadline, f"{len(set(accepted))} records accepted"
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*members)

    asyncio.run(scenario())
    assert len(leaders) > 1, "the partitions' leaders are not spread over brokers"
    counts = Counter(accepted)
    assert set(counts) == {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    assert set(counts.values()) == {1}


@pytest.mark.parametrize("victim_role", ["partition leader", "group coordinator"])
def test_members_ride_out_a_broker_killed_with_sigkill(cluster: Cluster, victim_role: str) -> None:
    topic, group = _queue(cluster)
    half = PER_PARTITION // 2
    _produce(cluster, topic, 0, half)
    if victim_role == "partition leader":
        victim = cluster.broker(cluster.status()["topics"][topic][0]["leader"])
    else:
        victim = cluster.broker(asyncio.run(_coordinator(cluster, group)))
    accepted: list[tuple[int, int]] = []

    async def scenario() -> None:
        stop = asyncio.Event()
        members = [
            asyncio.create_task(_consume(cluster.bootstrap, topic, group, accepted, stop))
            for _ in range(2)
        ]
        deadline = time.monotonic() + TIMEOUT_S
        while len(set(accepted)) < PARTITIONS * half:
            assert time.monotonic() < deadline, f"{len(set(accepted))} records accepted"
            await asyncio.sleep(0.1)
        await asyncio.to_thread(victim.kill9)
        # The second half goes to the partitions' leaders after the crash.
        await asyncio.to_thread(_produce, cluster, topic, half, PER_PARTITION - half)
        while not _everything(accepted):
            assert time.monotonic() < deadline, f"{len(set(accepted))} records accepted"
            assert not any(m.done() for m in members), "a member stopped"
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*members)

    asyncio.run(scenario())
    assert set(accepted) == {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
