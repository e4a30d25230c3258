"""The broker's topics as the group coordinator's assignors see them (KIP-848 consumer
groups): name, topic id, partition count, the racks of each partition's replicas, and
whether the topic is internal. ConsumerGroupHeartbeat and a classic JoinGroup to a
consumer group hand them to the coordinator."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from sluice.broker.topics import INTERNAL_TOPIC_PREFIX
from sluice.group.consumer_group import TopicImage

if TYPE_CHECKING:
    from sluice.broker.topics import TopicManager
    from sluice.cluster.model import BrokerInfo, TopicMetadata


class BrokerTopics(Mapping[str, TopicImage]):
    """The broker's topics as the assignors see them, looked up on demand, with the
    racks of each partition's replicas (none when no broker has a rack, as in Kafka)."""

    def __init__(self, topics: TopicManager) -> None:
        self._topics = topics

    def __getitem__(self, name: str) -> TopicImage:
        topic = self._topics.get(name)
        if topic is None:
            raise KeyError(name)
        racks = partition_racks(topic, self._topics.image.brokers)
        return TopicImage(
            topic.topic_id,
            name,
            topic.partition_count,
            racks,
            is_internal=name.startswith(INTERNAL_TOPIC_PREFIX),
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self._topics.all())

    def __len__(self) -> int:
        return len(self._topics.all())


def partition_racks(
    topic: TopicMetadata, brokers: Mapping[int, BrokerInfo]
) -> tuple[frozenset[str], ...]:
    """Per partition, the racks of its replicas' brokers; empty when no replica's broker
    has a rack (Kafka's rule: then the assignors ignore racks)."""
    racks = []
    for index in range(topic.partition_count):
        state = topic.partitions.get(index)
        found = set()
        for replica in state.replicas if state is not None else ():
            broker = brokers.get(replica)
            if broker is not None and broker.rack is not None:
                found.add(broker.rack)
        racks.append(frozenset(found))
    return tuple(racks) if any(racks) else ()
