"""The racks the KIP-848 assignors see: per partition, the racks of its replicas'
brokers, and nothing at all when no broker has a rack (Kafka's rule)."""

from __future__ import annotations

import uuid

from sluice.broker.handlers.group_topics import partition_racks
from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata


def topic(*replicas: tuple[int, ...]) -> TopicMetadata:
    return TopicMetadata(
        name="orders",
        topic_id=uuid.uuid4(),
        partitions={
            index: PartitionState(replicas=r, leader=r[0], leader_epoch=0, isr=r)
            for index, r in enumerate(replicas)
        },
    )


def brokers(**racks: str | None) -> dict[int, BrokerInfo]:
    return {
        int(name[1:]): BrokerInfo(int(name[1:]), "127.0.0.1", 9092, rack)
        for name, rack in racks.items()
    }


def test_each_partition_gets_the_racks_of_its_replicas() -> None:
    racks = partition_racks(topic((0, 1), (1, 2), (2,)), brokers(b0="a", b1="b", b2=None))
    assert racks == (frozenset({"a", "b"}), frozenset({"b"}), frozenset())


def test_no_racks_anywhere_means_none() -> None:
    assert partition_racks(topic((0, 1), (1,)), brokers(b0=None, b1=None)) == ()


def test_a_replica_on_an_unregistered_broker_adds_no_rack() -> None:
    assert partition_racks(topic((0, 5)), brokers(b0="a")) == (frozenset({"a"}),)
