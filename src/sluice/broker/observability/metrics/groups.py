"""Scrape-time metrics of the consumer and share groups this broker coordinates (the
groups of the ``__consumer_offsets`` partitions loaded here), and their lag.

Groups of the consumer group protocol (KIP-848) have the classic groups' series: their
members, their group epoch as the generation, and the lag of their committed offsets
(which the coordinator keeps in a classic group's place: that place is not counted as a
classic group); the partitions they "have assigned" are those their members own.

The lag of a group on a partition is the partition's high watermark minus the group's
committed offset, never below 0: read at scrape time for partitions led here, else from
:class:`~sluice.broker.observability.metrics.end_offsets.RemoteEndOffsets` (a few seconds
stale), else from a follower replica here; a partition whose end offset is not known yet
has no lag sample.

A partition assigned to a consumer member without a committed offset has no lag series
either (its lag is unknown, not 0): its end offset is exported
(``sluice_consumer_group_log_end_offset``) and counted per group in
``sluice_consumer_group_partitions_without_committed_offset``. Bookkeeping groups
(:mod:`sluice.common.bookkeeping_groups`: Spark's exactly-once progress, whose offsets
are batch ids) have no lag series at all and are named by
``sluice_consumer_group_bookkeeping``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sluice.broker.observability.metrics.end_offsets import RemoteEndOffsets
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.common.bookkeeping_groups import is_bookkeeping_group
from sluice.common.ids import TopicPartition
from sluice.group.consumer_group import ConsumerGroup, ConsumerGroupState
from sluice.group.coordinator import GroupCoordinator
from sluice.group.runtime import GroupCoordinatorRuntime
from sluice.group.state import Group, GroupState

CLASSIC = "classic"
CONSUMER = "consumer"
SHARE = "share"


def coordinators(groups: GroupCoordinatorRuntime) -> Iterator[GroupCoordinator]:
    """The loaded group coordinators (one per ``__consumer_offsets`` partition here)."""
    for partition in groups.loaded_partitions():
        shard = groups.shard(partition)
        if shard is not None:
            yield shard


def committed_partitions(groups: GroupCoordinatorRuntime) -> set[TopicPartition]:
    """Every partition some group coordinated here has an offset committed for or has
    assigned to a member: those whose end offsets the lag metrics need."""
    found: set[TopicPartition] = set()
    for coordinator in coordinators(groups):
        for group in coordinator.groups():
            found.update(group.offsets, group.assigned_partitions())
        for consumer_group in coordinator.consumer_groups():
            found.update(owned_partitions(consumer_group))
    return found


def owned_partitions(group: ConsumerGroup) -> frozenset[TopicPartition]:
    """The partitions the members of a consumer group (KIP-848) own, assigned or still
    to revoke, by name (a topic the group no longer knows by name is left out)."""
    names = {topic.topic_id: name for name, topic in group.subscribed_topics.items()}
    return frozenset(
        TopicPartition(names[topic_id], partition)
        for member in group.members.values()
        for topic_id, partition in member.owned()
        if topic_id in names
    )


def is_bookkeeping(group: Group) -> bool:
    return is_bookkeeping_group(
        group.group_id,
        protocol_type=group.protocol_type,
        member_count=len(group.members),
        offset_metadata=[value.metadata for value in group.offsets.values()],
    )


def lag(high_watermark: int, committed: int) -> int:
    """How many records the group has yet to consume (never negative: a commit may be
    ahead of a follower's or a stale end offset)."""
    return max(high_watermark - committed, 0)


class GroupCollector(Collector):
    def __init__(
        self,
        groups: GroupCoordinatorRuntime,
        replicas: ReplicaManager,
        end_offsets: RemoteEndOffsets | None,
    ) -> None:
        self._groups = groups
        self._replicas = replicas
        self._end_offsets = end_offsets

    def _high_watermark(self, topic_partition: TopicPartition) -> int | None:
        hosted = self._replicas.find(topic_partition)
        if hosted is not None and hosted.is_leader:
            return hosted.high_watermark
        if self._end_offsets is not None:
            remote = self._end_offsets.high_watermark(topic_partition)
            if remote is not None:
                return remote
        return None if hosted is None else hosted.high_watermark

    @staticmethod
    def _add_consumer_group(
        group: ConsumerGroup,
        states: Counter[tuple[str, str]],
        members: GaugeMetricFamily,
        generation: GaugeMetricFamily,
    ) -> None:
        states[CONSUMER, group.state.value] += 1
        members.add_metric([group.group_id], len(group.members))
        generation.add_metric([group.group_id], group.group_epoch)

    def collect(self) -> Iterator[Metric]:
        states: Counter[tuple[str, str]] = Counter(
            {(CLASSIC, state.value): 0 for state in GroupState}
            | {(CONSUMER, state.value): 0 for state in ConsumerGroupState}
        )
        members = GaugeMetricFamily(
            "sluice_consumer_group_members", "Members of the group", labels=["group"]
        )
        generation = GaugeMetricFamily(
            "sluice_consumer_group_generation",
            "The group's generation (a consumer or share group's group epoch)",
            labels=["group"],
        )
        rebalances = CounterMetricFamily(
            "sluice_consumer_group_rebalances",
            "Rebalances begun since this coordinator loaded the group",
            labels=["group"],
        )
        committed = GaugeMetricFamily(
            "sluice_consumer_group_committed_offset",
            "The group's committed offset",
            labels=["group", "topic", "partition"],
        )
        lags = GaugeMetricFamily(
            "sluice_consumer_group_lag",
            "High watermark minus the group's committed offset (at least 0)",
            labels=["group", "topic", "partition"],
        )
        lag_sums = GaugeMetricFamily(
            "sluice_consumer_group_lag_sum",
            "The group's lag over the partitions whose end offset is known",
            labels=["group"],
        )
        end_offsets = GaugeMetricFamily(
            "sluice_consumer_group_log_end_offset",
            "High watermark of a partition the group committed or has assigned",
            labels=["group", "topic", "partition"],
        )
        without_offset = GaugeMetricFamily(
            "sluice_consumer_group_partitions_without_committed_offset",
            "Partitions assigned to the group's members without a committed offset "
            "(their lag is unknown)",
            labels=["group"],
        )
        bookkeeping = GaugeMetricFamily(
            "sluice_consumer_group_bookkeeping",
            "1 for a group whose offsets record progress, not positions (no lag series)",
            labels=["group"],
        )
        for coordinator in coordinators(self._groups):
            consumer_groups = {g.group_id: g for g in coordinator.consumer_groups()}
            for group in sorted(coordinator.groups(), key=lambda g: g.group_id):
                group_id = group.group_id
                consumer_group = consumer_groups.pop(group_id, None)
                if consumer_group is None:
                    states[CLASSIC, group.state.value] += 1
                    members.add_metric([group_id], len(group.members))
                    generation.add_metric([group_id], group.generation_id)
                    rebalances.add_metric([group_id], group.rebalances)
                    assigned = group.assigned_partitions()
                else:
                    # A consumer group's committed offsets are kept in a classic group's
                    # place, which is no group of its own.
                    self._add_consumer_group(consumer_group, states, members, generation)
                    assigned = owned_partitions(consumer_group)
                for topic_partition, value in sorted(group.offsets.items()):
                    labels = [group_id, topic_partition.topic, str(topic_partition.partition)]
                    committed.add_metric(labels, value.offset)
                if is_bookkeeping(group):
                    bookkeeping.add_metric([group_id], 1)
                    continue
                total = None
                for topic_partition in sorted(assigned | group.offsets.keys()):
                    labels = [group_id, topic_partition.topic, str(topic_partition.partition)]
                    high_watermark = self._high_watermark(topic_partition)
                    if high_watermark is None:
                        continue
                    end_offsets.add_metric(labels, high_watermark)
                    offset = group.offsets.get(topic_partition)
                    if offset is None:
                        continue  # nothing committed: the lag is unknown, not 0
                    behind = lag(high_watermark, offset.offset)
                    lags.add_metric(labels, behind)
                    total = behind + (total or 0)
                if total is not None:
                    lag_sums.add_metric([group_id], total)
                without_offset.add_metric(
                    [group_id], sum(1 for tp in assigned if tp not in group.offsets)
                )
            for consumer_group in sorted(consumer_groups.values(), key=lambda g: g.group_id):
                # Nothing committed yet: no lag, but every partition owned is unknown.
                self._add_consumer_group(consumer_group, states, members, generation)
                owned = owned_partitions(consumer_group)
                for topic_partition in sorted(owned):
                    high_watermark = self._high_watermark(topic_partition)
                    if high_watermark is not None:
                        end_offsets.add_metric(
                            [
                                consumer_group.group_id,
                                topic_partition.topic,
                                str(topic_partition.partition),
                            ],
                            high_watermark,
                        )
                without_offset.add_metric([consumer_group.group_id], len(owned))
            for share_group in sorted(coordinator.share_groups(), key=lambda g: g.group_id):
                states[SHARE, share_group.state.value] += 1
                members.add_metric([share_group.group_id], len(share_group.members))
                generation.add_metric([share_group.group_id], share_group.group_epoch)
        by_state = GaugeMetricFamily(
            "sluice_consumer_groups",
            "Groups coordinated here, by type (classic, consumer or share) and state",
            labels=["type", "state"],
        )
        for (kind, state), count in sorted(states.items()):
            by_state.add_metric([kind, state], count)
        yield from (
            by_state,
            members,
            generation,
            rebalances,
            committed,
            lags,
            lag_sums,
            end_offsets,
            without_offset,
            bookkeeping,
        )
        if self._end_offsets is not None:
            yield GaugeMetricFamily(
                "sluice_consumer_group_lag_end_offsets_age_seconds",
                "Age of the oldest end offset asked from another broker for the lag",
                value=self._end_offsets.oldest_age_s(),
            )
