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

``cooperative-sticky`` (:class:`CooperativeStickyAssignor`) is this module's own
simplified sticky algorithm for the cooperative protocol; it is not Kafka's
implementation, but obeys the same contract (balanced, sticky, and a moved partition is
revoked one rebalance before it is assigned elsewhere).
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


class CooperativeStickyAssignor:
    """``cooperative-sticky``: balanced like round-robin, but members keep what they
    own where balance allows, and a partition that must move is first only taken away
    (the owner revokes it and rejoins) and handed to its new member in the next
    rebalance, so no partition is ever owned by two members at once.

    Steps, all deterministic: (1) each member keeps the partitions it owns that still
    exist and that it subscribes to (a partition claimed twice stays with the first
    member in member order); (2) members above their quota give up their highest
    partitions — the quota is ``partitions // members``, plus one for as many members
    as ``partitions % members`` (those already holding the most keep the extra one);
    (3) free partitions, sorted, go one by one to the least-loaded subscribed member;
    (4) partitions that changed owner are withheld from the new owner this round.
    With unequal subscriptions step (3) balances only among members that subscribe.
    """

    name = "cooperative-sticky"
    cooperative = True

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment:
        ordered = sorted(members, key=member_order)
        assignment: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ordered}
        if not ordered:
            return assignment
        subscribed = {m.member_id: set(m.topics) for m in ordered}
        existing = {
            TopicPartition(topic, partition)
            for m in ordered
            for topic in m.topics
            if topic in partitions_per_topic
            for partition in range(partitions_per_topic[topic])
        }
        previous_owner: dict[TopicPartition, str] = {}
        for member in ordered:
            for tp in sorted(member.owned_partitions):
                if tp in previous_owner:
                    continue
                previous_owner[tp] = member.member_id
                if tp in existing and tp.topic in subscribed[member.member_id]:
                    assignment[member.member_id].append(tp)
        per_member, extra = divmod(len(existing), len(ordered))
        by_load = sorted(ordered, key=lambda m: (-len(assignment[m.member_id]), member_order(m)))
        quota = {
            m.member_id: per_member + (1 if index < extra else 0) for index, m in enumerate(by_load)
        }
        for member_id, owned in assignment.items():
            owned.sort()
            del owned[quota[member_id] :]
        taken = {tp for owned in assignment.values() for tp in owned}
        for tp in sorted(existing - taken):
            candidates = [m for m in ordered if tp.topic in subscribed[m.member_id]]
            below = [m for m in candidates if len(assignment[m.member_id]) < quota[m.member_id]]
            chosen = min(
                below or candidates,
                key=lambda m: (len(assignment[m.member_id]), member_order(m)),
            )
            assignment[chosen.member_id].append(tp)
        return {
            member_id: sorted(tp for tp in owned if previous_owner.get(tp, member_id) == member_id)
            for member_id, owned in assignment.items()
        }


def is_cooperative(assignor: Assignor) -> bool:
    """True for assignors of the cooperative (incremental) rebalance protocol."""
    return bool(getattr(assignor, "cooperative", False))


ASSIGNORS: dict[str, Assignor] = {
    RangeAssignor.name: RangeAssignor(),
    RoundRobinAssignor.name: RoundRobinAssignor(),
    CooperativeStickyAssignor.name: CooperativeStickyAssignor(),
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
