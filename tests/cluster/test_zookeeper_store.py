"""What only the ZooKeeper store has: ephemeral broker registrations, one controller at a
time, fencing of a controller whose session expired, and a broker that registers again
with a new epoch once its session is back."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

import pytest
from zookeeper_sessions import SESSION_TIMEOUT_S, expire_session

from sluice.cluster.image import MetadataImage
from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata, new_topic_id
from sluice.cluster.store import BrokerIdInUse, ControllerFenced, PartitionChange
from sluice.cluster.zookeeper import ZooKeeperMetadataStore

SCENARIO_TIMEOUT_S = 60.0


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(SCENARIO_TIMEOUT_S):
            await scenario()

    asyncio.run(bounded())


async def opened(connect: str) -> ZooKeeperMetadataStore:
    store = ZooKeeperMetadataStore(connect, session_timeout_s=SESSION_TIMEOUT_S)
    await store.start()
    return store


async def eventually(
    store: ZooKeeperMetadataStore, condition: Callable[[MetadataImage], bool]
) -> MetadataImage:
    seen = asyncio.Event()
    loop = asyncio.get_running_loop()
    store.subscribe(lambda image: loop.call_soon_threadsafe(seen.set))
    while not condition(store.image()):
        await seen.wait()
        seen.clear()
    return store.image()


def test_a_registration_lasts_as_long_as_the_session(zookeeper_connect: str) -> None:
    async def scenario() -> None:
        watcher = await opened(zookeeper_connect)
        broker = await opened(zookeeper_connect)
        registered = await broker.register_broker(BrokerInfo(7, "127.0.0.1", 9099, "r1"))
        assert registered.epoch > 0
        image = await eventually(watcher, lambda image: 7 in image.brokers)
        assert image.brokers[7] == registered
        await broker.close()
        await eventually(watcher, lambda image: 7 not in image.brokers)
        await watcher.close()

    run(scenario)


def test_a_second_live_broker_with_the_same_id_is_refused(zookeeper_connect: str) -> None:
    async def scenario() -> None:
        first = await opened(zookeeper_connect)
        await first.register_broker(BrokerInfo(3, "10.0.0.1", 9092))
        second = await opened(zookeeper_connect)
        with pytest.raises(BrokerIdInUse) as refused:
            await second.register_broker(BrokerInfo(3, "10.0.0.2", 9092))
        message = str(refused.value)
        assert "broker id 3" in message and "10.0.0.1:9092" in message
        assert "--node-id" in message
        await second.close()
        await first.close()

    run(scenario)


def test_one_controller_at_a_time_and_the_next_after_it_leaves(zookeeper_connect: str) -> None:
    async def scenario() -> None:
        stores = [await opened(zookeeper_connect) for _ in range(3)]
        won = await asyncio.gather(*(s.elect_controller(i) for i, s in enumerate(stores)))
        winners = [i for i, epoch in enumerate(won) if epoch is not None]
        assert len(winners) == 1, won
        winner = winners[0]
        first_epoch = won[winner]
        assert first_epoch is not None
        others = [s for i, s in enumerate(stores) if i != winner]
        await stores[winner].close()
        await eventually(others[0], lambda image: image.controller is None)
        again = await asyncio.gather(*(s.elect_controller(10 + i) for i, s in enumerate(others)))
        assert sum(epoch is not None for epoch in again) == 1
        assert max(e for e in again if e is not None) == first_epoch + 1
        for store in others:
            await store.close()

    run(scenario)


def test_a_controller_whose_session_expired_is_fenced(zookeeper_connect: str) -> None:
    async def scenario() -> None:
        paused = await opened(zookeeper_connect)
        registered = await paused.register_broker(BrokerInfo(1, "127.0.0.1", 9093))
        old_epoch = await paused.elect_controller(1)
        assert old_epoch is not None
        state = PartitionState((1,), 1, 0, (1,))
        await paused.create_topics([TopicMetadata("t", new_topic_id(), {0: state})])
        other = await opened(zookeeper_connect)
        await other.register_broker(BrokerInfo(2, "127.0.0.1", 9094))
        expire_session(zookeeper_connect, paused)
        await eventually(other, lambda image: image.controller is None)
        new_epoch = await other.elect_controller(2)
        assert new_epoch == old_epoch + 1
        # Once reconnected it registers again, with a new broker epoch...
        back = await eventually(
            other, lambda image: 1 in image.brokers and image.brokers[1].epoch != registered.epoch
        )
        assert back.brokers[1].host == "127.0.0.1"
        # ...and when it writes with the view it had before the pause, ZooKeeper refuses.
        stale = dataclasses.replace(state, leader=1, leader_epoch=5)
        with pytest.raises(ControllerFenced):
            await paused.update_partitions([PartitionChange("t", 0, stale)], old_epoch)
        image = await eventually(other, lambda image: "t" in image.topics)
        assert image.topics["t"].partitions[0].leader_epoch == 0
        await paused.close()
        await other.close()

    run(scenario)


def test_a_broker_registered_after_a_state_was_written_is_seen_as_restarted(
    zookeeper_connect: str,
) -> None:
    """Broker epochs and partition writes are on one scale (ZooKeeper's zxids): a state
    written before a broker's registration names it as registered since; once written
    again, no longer."""

    async def scenario() -> None:
        crashed = await opened(zookeeper_connect)
        first = await crashed.register_broker(BrokerInfo(1, "127.0.0.1", 9093))
        state = PartitionState((1,), 1, 0, (1,))
        await crashed.create_topics([TopicMetadata("t", new_topic_id(), {0: state})])
        image = await eventually(crashed, lambda image: "t" in image.topics)
        written = image.topics["t"].partitions[0]
        assert written.written_at > first.epoch
        assert written.registered_since(image.brokers) == set()
        await crashed.close()

        restarted = await opened(zookeeper_connect)
        again = await restarted.register_broker(BrokerInfo(1, "127.0.0.1", 9093))
        image = await eventually(restarted, lambda image: 1 in image.brokers)
        assert again.epoch > written.written_at
        assert image.topics["t"].partitions[0].registered_since(image.brokers) == {1}
        moved = dataclasses.replace(image.topics["t"].partitions[0], leader_epoch=1)
        epoch = await restarted.elect_controller(1)
        assert epoch is not None
        (stored,) = await restarted.update_partitions([PartitionChange("t", 0, moved)], epoch)
        assert stored.written_at > again.epoch
        image = await eventually(
            restarted, lambda image: image.topics["t"].partitions[0].leader_epoch == 1
        )
        assert image.topics["t"].partitions[0] == stored
        assert stored.registered_since(image.brokers) == set()
        await restarted.close()

    run(scenario)


def test_an_unreachable_zookeeper_is_a_clear_error() -> None:
    async def scenario() -> None:
        store = ZooKeeperMetadataStore("127.0.0.1:1", session_timeout_s=2.0, connect_timeout_s=1.0)
        with pytest.raises(Exception) as failed:
            await store.start()
        assert "cannot reach ZooKeeper at 127.0.0.1:1" in str(failed.value)

    run(scenario)
