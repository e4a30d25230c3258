"""What is wrong with a cluster, from its description and its topics' metadata alone:
partitions without a live leader (offline), online partitions with a replica out of the
ISR (under-replicated, Kafka's meaning), and brokers that partitions name as replicas
but that the cluster no longer lists (down).

Pure: ``sluice cluster status`` and the web console both read their answers from here,
so they never disagree about what is offline.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sluice.client.admin import ClusterDescription
from sluice.client.cluster import PartitionMetadata, TopicMetadata
from sluice.common.ids import NodeId


def is_offline(partition: PartitionMetadata, live: frozenset[NodeId]) -> bool:
    """Whether the partition has no live leader (no leader, or one not listed)."""
    return partition.leader_id not in live


def is_under_replicated(partition: PartitionMetadata, live: frozenset[NodeId]) -> bool:
    """Whether an online partition has a replica out of its ISR."""
    return not is_offline(partition, live) and len(partition.isr_ids) < len(partition.replica_ids)


def down_replicas(partition: PartitionMetadata, live: frozenset[NodeId]) -> tuple[NodeId, ...]:
    """The partition's replicas on brokers the cluster does not list."""
    return tuple(r for r in partition.replica_ids if r not in live)


@dataclass(frozen=True)
class ClusterHealth:
    """A cluster's description and topics, and what is wrong with them."""

    described: ClusterDescription
    topics: Sequence[TopicMetadata]

    @property
    def live(self) -> frozenset[NodeId]:
        """The brokers the cluster lists (registered, so alive)."""
        return frozenset(b.node_id for b in self.described.brokers)

    @property
    def partitions(self) -> list[PartitionMetadata]:
        return [p for topic in self.topics for p in topic.partitions]

    def offline(self) -> list[PartitionMetadata]:
        """Partitions without a live leader."""
        live = self.live
        return [p for p in self.partitions if is_offline(p, live)]

    def under_replicated(self) -> list[PartitionMetadata]:
        """Online partitions with a replica out of the ISR (Kafka's under-replicated)."""
        live = self.live
        return [p for p in self.partitions if is_under_replicated(p, live)]

    def down_brokers(self) -> list[NodeId]:
        """Brokers named as replicas of some partition but not listed: down (or removed
        without their partitions being moved away), sorted."""
        return sorted(named_brokers(self.partitions) - self.live)

    def leaders(self) -> dict[NodeId, int]:
        """Partitions led per broker (listed brokers all present, with 0)."""
        counts = dict.fromkeys(sorted(self.live), 0)
        for p in self.partitions:
            if p.leader_id in counts:
                counts[p.leader_id] += 1
        return counts

    def replicas(self) -> dict[NodeId, int]:
        """Replicas held per broker, down brokers included."""
        counts = dict.fromkeys(sorted(self.live), 0)
        for p in self.partitions:
            for replica in p.replica_ids:
                counts[replica] = counts.get(replica, 0) + 1
        return counts


def named_brokers(partitions: Iterable[PartitionMetadata]) -> set[NodeId]:
    """Every broker named as a replica of one of ``partitions``."""
    return {replica for p in partitions for replica in p.replica_ids}
