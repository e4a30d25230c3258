"""The controller's decisions (``leadership.reconcile``) and the controller itself over a
real embedded metadata store: leaders move off brokers that left, partitions with no live
in-sync replica go offline and lead again when it returns, restarted brokers get a new
leader epoch, dead and restarted followers leave the ISR, and a fenced controller stops
writing."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path
from types import MappingProxyType

import pytest

from sluice.cluster.controller import Controller
from sluice.cluster.embedded import EmbeddedMetadataStore
from sluice.cluster.image import MetadataImage
from sluice.cluster.leadership import preferred_leader_changes, reconcile
from sluice.cluster.model import (
    NO_LEADER,
    NOT_ORDERED,
    BrokerInfo,
    PartitionState,
    TopicMetadata,
)
from sluice.cluster.store import ControllerFenced, PartitionChange


def _image(live: dict[int, int], partitions: dict[int, PartitionState]) -> MetadataImage:
    brokers = {n: BrokerInfo(n, "127.0.0.1", 9092 + n, epoch=e) for n, e in live.items()}
    topic = TopicMetadata("t", uuid.uuid4(), partitions)
    return MetadataImage("c", MappingProxyType(brokers), None, MappingProxyType({"t": topic}))


def _state(
    replicas: tuple[int, ...], leader: int, epoch: int = 3, version: int = 7
) -> PartitionState:
    return PartitionState(replicas, leader, epoch, replicas, version)


def test_nothing_changes_while_every_leader_is_live() -> None:
    image = _image({1: 0, 2: 0}, {0: _state((1,), 1), 1: _state((2, 1), 2)})
    assert reconcile(image) == []


def test_a_leader_that_left_is_replaced_by_the_first_live_in_sync_replica() -> None:
    image = _image({2: 0, 3: 0}, {0: _state((1, 3, 2), 1)})
    (change,) = reconcile(image)
    assert change == PartitionChange("t", 0, PartitionState((1, 3, 2), 3, 4, (3, 2), 7))


def test_a_partition_without_a_live_in_sync_replica_goes_offline_keeping_its_isr() -> None:
    image = _image({2: 0}, {0: _state((1,), 1)})
    (change,) = reconcile(image)
    assert change.state == PartitionState((1,), NO_LEADER, 4, (1,), 7)
    offline = _image({2: 0}, {0: change.state})
    assert reconcile(offline) == []  # still nobody to lead
    back = _image({1: 5, 2: 0}, {0: change.state})
    (returned,) = reconcile(back)
    assert returned.state == PartitionState((1,), 1, 5, (1,), 7)


def test_a_dead_follower_leaves_the_isr_without_a_new_leader_epoch() -> None:
    image = _image({1: 0, 3: 0}, {0: _state((1, 2, 3), 1)})
    (change,) = reconcile(image)
    assert change.state == PartitionState((1, 2, 3), 1, 3, (1, 3), 7)


def test_a_restarted_follower_leaves_the_isr_until_it_catches_up() -> None:
    image = _image({1: 0, 2: 8, 3: 0}, {0: _state((1, 2, 3), 1)})
    (change,) = reconcile(image, restarted={2})
    assert change.state == PartitionState((1, 2, 3), 1, 3, (1, 3), 7)


def test_a_replica_that_stayed_up_leads_rather_than_a_restarted_one() -> None:
    """The first replica restarted (it may have lost an unflushed tail) and the leader died:
    the replica that stayed up leads, and the restarted one is out of the ISR."""
    image = _image({2: 9, 3: 0}, {0: _state((2, 1, 3), 1)})
    (change,) = reconcile(image, restarted={2})
    assert change.state == PartitionState((2, 1, 3), 3, 4, (3,), 7)


def test_a_restarted_leader_leads_again_at_the_next_epoch() -> None:
    image = _image({1: 9}, {0: _state((1,), 1)})
    (change,) = reconcile(image, restarted={1})
    assert change.state.leader == 1 and change.state.leader_epoch == 4


def test_a_leader_registered_since_its_state_was_written_hands_over() -> None:
    """A controller elected after the leader crashed and registered again never saw its
    previous broker epoch; the state, written before the new registration, shows the
    restart: a replica that stayed up leads at the next epoch, the restarted one is out
    of the ISR."""
    state = dataclasses.replace(_state((1, 2, 3), 1), written_at=100)
    image = _image({1: 120, 2: 50, 3: 60}, {0: state})
    (change,) = reconcile(image)
    assert change.state == PartitionState((1, 2, 3), 2, 4, (2, 3), 7)


def test_a_follower_registered_since_its_state_was_written_leaves_the_isr() -> None:
    state = dataclasses.replace(_state((1, 2, 3), 1), written_at=100)
    image = _image({1: 50, 2: 120, 3: 60}, {0: state})
    (change,) = reconcile(image)
    assert change.state == PartitionState((1, 2, 3), 1, 3, (1, 3), 7)


@pytest.mark.parametrize("written_at", [130, NOT_ORDERED])
def test_registrations_older_than_the_state_or_unordered_change_nothing(written_at: int) -> None:
    state = dataclasses.replace(_state((1, 2, 3), 1), written_at=written_at)
    image = _image({1: 120, 2: 50, 3: 60}, {0: state})
    assert reconcile(image) == []


async def _wait_for(predicate: object, timeout_s: float = 5.0) -> None:
    assert callable(predicate)
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


def test_the_controller_moves_leadership_through_the_store(tmp_path: Path) -> None:
    asyncio.run(_controller_moves_leadership(tmp_path))


async def _controller_moves_leadership(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path)
    await store.register_broker(BrokerInfo(1, "127.0.0.1", 9093))
    await store.register_broker(BrokerInfo(2, "127.0.0.1", 9094))
    topic = TopicMetadata("t", uuid.uuid4(), {0: _state((2,), 2, 0, 0), 1: _state((1,), 1, 0, 0)})
    await store.create_topics([topic])
    controller = Controller(store, 1)
    store.subscribe(lambda image: controller.notify())
    task = asyncio.create_task(controller.run())
    try:
        await _wait_for(lambda: controller.epoch is not None)
        first_epoch = controller.epoch
        # Broker 2 leaves: its partition goes offline at the next leader epoch.
        brokers = dict(store.image().brokers)
        del brokers[2]
        store._brokers.pop(2)  # the embedded store's live brokers are in memory
        store._image = dataclasses.replace(store.image(), brokers=MappingProxyType(brokers))
        controller.notify()
        await _wait_for(lambda: not store.image().topics["t"].partitions[0].is_online)
        offline = store.image().topics["t"].partitions[0]
        assert (offline.leader_epoch, offline.version) == (1, 1)
        # It registers again: it leads again.
        await store.register_broker(BrokerInfo(2, "127.0.0.1", 9094))
        await _wait_for(lambda: store.image().topics["t"].partitions[0].leader == 2)
        assert store.image().topics["t"].partitions[0].leader_epoch == 2
        assert store.image().topics["t"].partitions[1].leader_epoch == 0  # untouched
        assert controller.epoch == first_epoch
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_a_controller_fenced_by_a_newer_epoch_writes_nothing(tmp_path: Path) -> None:
    asyncio.run(_fenced_controller_writes_nothing(tmp_path))


async def _fenced_controller_writes_nothing(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path)
    await store.register_broker(BrokerInfo(1, "127.0.0.1", 9093))
    await store.create_topics([TopicMetadata("t", uuid.uuid4(), {0: _state((1,), 1, 0, 0)})])
    old_epoch = await store.elect_controller(1)
    assert old_epoch is not None
    await store.elect_controller(1)  # a newer election (another broker, in a cluster)
    state = store.image().topics["t"].partitions[0]
    moved = dataclasses.replace(state, leader_epoch=state.leader_epoch + 1)
    with pytest.raises(ControllerFenced):
        await store.update_partitions([PartitionChange("t", 0, moved)], old_epoch)
    assert store.image().topics["t"].partitions[0] == state


def test_with_unclean_election_a_live_out_of_sync_replica_leads() -> None:
    state = PartitionState((1, 2), 1, 3, (1,), 7)  # 2 lagged and left the ISR; 1 died
    image = _image({2: 0}, {0: state})
    (offline,) = reconcile(image)
    assert offline.state.leader == NO_LEADER
    (unclean,) = reconcile(image, unclean_allowed=lambda topic: True)
    assert unclean.state == PartitionState((1, 2), 2, 4, (2,), 7)


def test_leadership_goes_back_to_preferred_replicas_past_the_imbalance() -> None:
    """Broker 1 is preferred for four partitions and leads one: 75% is led elsewhere."""
    partitions = {
        index: PartitionState((1, 2), 1 if index == 0 else 2, 5, (1, 2), 3) for index in range(4)
    }
    image = _image({1: 0, 2: 0}, partitions)
    assert preferred_leader_changes(image, imbalance_percentage=75) == []
    changes = preferred_leader_changes(image, imbalance_percentage=10)
    assert {c.partition for c in changes} == {1, 2, 3}
    assert all(c.state.leader == 1 and c.state.leader_epoch == 6 for c in changes)
    # A preferred replica out of the ISR is not elected.
    lagging = {i: dataclasses.replace(s, isr=(2,)) for i, s in partitions.items()}
    assert preferred_leader_changes(_image({1: 0, 2: 0}, lagging), 10) == []
