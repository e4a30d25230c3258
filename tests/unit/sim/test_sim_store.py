"""The simulated metadata store keeps the real stores' rules: broker epochs that grow
with every registration, one controller at a time with a growing epoch, and partition
writes conditional on versions and the controller epoch, all or nothing."""

from __future__ import annotations

import dataclasses

import pytest

from sluice.cluster.store import ControllerFenced, PartitionChange, StaleVersion
from sluice.common.ids import TopicPartition
from sluice.sim.store import SimMetadataStore

TP = TopicPartition("t", 0)


def _store() -> SimMetadataStore:
    store = SimMetadataStore()
    for node in range(3):
        store.register(node)
    store.create_topic("t", [(0, 1, 2), (1, 2, 0)], {"min.insync.replicas": "2"})
    return store


def _change(store: SimMetadataStore, partition: int, **fields: object) -> PartitionChange:
    state = store.state(TopicPartition("t", partition))
    return PartitionChange("t", partition, dataclasses.replace(state, **fields))


def test_a_broker_that_registers_again_has_a_newer_epoch() -> None:
    store = _store()
    first = store.brokers[1].epoch
    store.expire(1)
    assert 1 not in store.image().brokers
    assert store.register(1).epoch > first


def test_one_controller_at_a_time_each_with_a_newer_epoch() -> None:
    store = _store()
    assert store.elect_controller(0) == 1
    assert store.elect_controller(1) is None
    store.expire(0)
    assert store.image().controller is None
    assert store.elect_controller(1) == 2
    assert store.elect_controller(0) is None, "not registered"


def _controller_epoch(store: SimMetadataStore) -> int:
    epoch = store.elect_controller(0)
    assert epoch is not None
    return epoch


def test_writes_are_conditional_on_the_version_and_bump_it() -> None:
    store = _store()
    epoch = _controller_epoch(store)
    (written,) = store.update_partitions([_change(store, 0, isr=(0, 1))], epoch)
    assert written.version == 1 and written.isr == (0, 1)
    assert store.state(TP) == written
    with pytest.raises(StaleVersion):
        store.update_partitions([_change(store, 0, isr=(0,), version=0)], epoch)
    assert store.state(TP).isr == (0, 1)


def test_a_fenced_controller_writes_nothing() -> None:
    store = _store()
    epoch = store.elect_controller(0)
    assert epoch is not None
    store.expire(0)
    store.register(0)
    assert store.elect_controller(1) == epoch + 1
    with pytest.raises(ControllerFenced):
        store.update_partitions([_change(store, 0, leader=1, leader_epoch=1)], epoch)
    store.update_partitions([_change(store, 0, leader=1, leader_epoch=1)], epoch + 1)
    assert store.state(TP).leader == 1
    assert [(carried, tp) for carried, tp, _ in store.writes] == [(epoch + 1, TP)]


def test_a_write_of_several_partitions_is_all_or_nothing() -> None:
    store = _store()
    epoch = _controller_epoch(store)
    stale = _change(store, 1, isr=(1, 2), version=5)
    with pytest.raises(StaleVersion):
        store.update_partitions([_change(store, 0, isr=(0, 1)), stale], epoch)
    assert store.state(TP).isr == (0, 1, 2) and store.writes == []


def test_every_write_is_ordered_after_the_registrations_before_it() -> None:
    store = _store()
    epoch = _controller_epoch(store)
    (written,) = store.update_partitions([_change(store, 0, isr=(0, 1))], epoch)
    later = store.register(2)
    assert later.epoch > written.written_at
