"""Plans that move partition replicas between brokers, for ``sluice topics reassign`` and
``sluice cluster decommission``: pure functions from the current assignment to a target
one, which the cluster then carries out as reassignments (``leadership.reassigned``).

* :func:`balanced` spreads topics over a chosen set of brokers as a new topic would be
  spread (``placement``: leaders round-robin, racks alternating), e.g. onto a broker
  just added. Like Kafka's ``--generate``, it does not try to keep replicas in place.
* :func:`without_broker` moves every replica off one broker and nothing else: each
  replica there is replaced, in the same position (so a preferred leader's replacement
  is preferred), by the broker that keeps the partition on most racks and then holds
  the fewest replicas.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from random import Random

from sluice.cluster import placement
from sluice.cluster.model import BrokerInfo
from sluice.common.ids import TopicPartition

Assignment = dict[TopicPartition, tuple[int, ...]]
"""Each partition's replicas, preferred leader first."""


class MoveImpossible(ValueError):
    """The plan cannot be made; the message says why and what would make it possible."""


def balanced(
    current: Mapping[TopicPartition, Sequence[int]],
    brokers: Sequence[BrokerInfo],
    random: Random,
) -> Assignment:
    """Every partition of ``current``'s topics placed anew over ``brokers``, keeping each
    topic's replication factor."""
    by_topic: dict[str, list[TopicPartition]] = {}
    for topic_partition in current:
        by_topic.setdefault(topic_partition.topic, []).append(topic_partition)
    proposed: Assignment = {}
    for topic, partitions in sorted(by_topic.items()):
        factor = len(current[partitions[0]])
        if factor > len(brokers):
            raise MoveImpossible(
                f"topic {topic!r} has {factor} replicas per partition but only "
                f"{len(brokers)} broker(s) were given; give at least {factor}"
            )
        count = max(p.partition for p in partitions) + 1
        placed = placement.new_topic(topic, count, factor, {}, brokers, random)
        for topic_partition in partitions:
            proposed[topic_partition] = placed.partitions[topic_partition.partition].replicas
    return proposed


def without_broker(
    current: Mapping[TopicPartition, Sequence[int]],
    leaving: int,
    brokers: Sequence[BrokerInfo],
) -> Assignment:
    """The partitions that have a replica on ``leaving``, each with that replica moved
    to another of ``brokers``."""
    racks = {b.node_id: b.rack for b in brokers}
    load = Counter(r for replicas in current.values() for r in replicas)
    candidates = sorted(b.node_id for b in brokers if b.node_id != leaving)
    moved: Assignment = {}
    for topic_partition, replicas in sorted(current.items()):
        if leaving not in replicas:
            continue
        staying = [r for r in replicas if r != leaving]
        free = [b for b in candidates if b not in replicas]
        if not free:
            raise MoveImpossible(
                f"{topic_partition} has {len(replicas)} replicas and every other broker "
                "already holds one; add a broker first, or lower its replication factor"
            )
        racks_used = {racks.get(r) for r in staying}
        chosen = min(free, key=lambda b: (racks.get(b) in racks_used, load[b], b))
        load[chosen] += 1
        load[leaving] -= 1
        moved[topic_partition] = tuple(chosen if r == leaving else r for r in replicas)
    return moved
