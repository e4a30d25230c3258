"""Partition assignors: how a group leader splits partitions among the members.

The leader of a consumer group runs one assignor over every member's subscription and
the partition counts of the subscribed topics; the result goes back to the members in
SyncGroup. Assignors are pure functions of their input (no I/O, no clock, no
randomness), so every member would compute the same answer and the unit tests can
compare with Kafka's documented results.

Members are ordered the way Kafka's Java client orders them (``MemberInfo``): static
members (with a ``group.instance.id``) first, by instance id, then dynamic members by
member id. Both assignors below are Kafka's own algorithms:

- ``range``: per topic, the partitions are cut into contiguous ranges, one per member
  subscribed to that topic; the first ``partitions % members`` members get one more.
- ``roundrobin``: every subscribed partition of every topic, sorted by topic then
  partition, is dealt in turn to the members, skipping members not subscribed to the
  partition's topic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sluice.common.ids import TopicPartition


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What one member asked for when it joined."""

    member_id: str
    topics: tuple[str, ...]
    group_instance_id: str | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()


Assignment = dict[str, list[TopicPartition]]
"""Member id → the partitions it gets, sorted."""


class Assignor(Protocol):
    """A partition assignment strategy, named as on the wire (JoinGroup protocol name)."""

    @property
    def name(self) -> str: ...

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment: ...


def member_order(member: MemberSubscription) -> tuple[int, str]:
    """Sort key of Kafka's MemberInfo: static members first (by instance id), then
    dynamic members by member id."""
    if member.group_instance_id is not None:
        return (0, member.group_instance_id)
    return (1, member.member_id)


def _empty_assignment(members: Sequence[MemberSubscription]) -> Assignment:
    return {member.member_id: [] for member in members}


class RangeAssignor:
    """Kafka's ``range`` assignor (see the module docstring)."""

    name = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment:
        assignment = _empty_assignment(members)
        for topic in sorted(partitions_per_topic):
            count = partitions_per_topic[topic]
            subscribed = sorted((m for m in members if topic in m.topics), key=member_order)
            if not subscribed or count <= 0:
                continue
            per_member, extra = divmod(count, len(subscribed))
            for index, member in enumerate(subscribed):
                start = per_member * index + min(index, extra)
                length = per_member + (1 if index < extra else 0)
                assignment[member.member_id].extend(
                    TopicPartition(topic, partition) for partition in range(start, start + length)
                )
        return {member_id: sorted(tps) for member_id, tps in assignment.items()}


class RoundRobinAssignor:
    """Kafka's ``roundrobin`` assignor (see the module docstring)."""

    name = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment:
        assignment = _empty_assignment(members)
        ordered = sorted(members, key=member_order)
        if not ordered:
            return assignment
        subscribed_topics = sorted(
            {topic for m in ordered for topic in m.topics if topic in partitions_per_topic}
        )
        turn = 0
        for topic in subscribed_topics:
            for partition in range(partitions_per_topic[topic]):
                # Deal to the next member (circularly) that subscribed to this topic;
                # one exists, since the topic came from some member's subscription.
                while topic not in ordered[turn % len(ordered)].topics:
                    turn += 1
                assignment[ordered[turn % len(ordered)].member_id].append(
                    TopicPartition(topic, partition)
                )
                turn += 1
        return assignment


ASSIGNORS: dict[str, Assignor] = {
    RangeAssignor.name: RangeAssignor(),
    RoundRobinAssignor.name: RoundRobinAssignor(),
}
"""Assignors by protocol name, as ``partition_assignment_strategy`` names them."""


def assignors_named(names: Sequence[str]) -> list[Assignor]:
    """The assignors of ``names`` in preference order; ``ValueError`` for unknown ones."""
    if not names:
        raise ValueError("partition_assignment_strategy needs at least one assignor")
    chosen = []
    for name in names:
        assignor = ASSIGNORS.get(name)
        if assignor is None:
            known = ", ".join(sorted(ASSIGNORS))
            raise ValueError(f"unknown partition assignment strategy {name!r} (known: {known})")
        chosen.append(assignor)
    return chosen
