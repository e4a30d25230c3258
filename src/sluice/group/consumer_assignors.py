"""The server-side assignors of consumer groups (KIP-848): ``uniform`` and ``range``.

An assignor is a pure function: the members (what each subscribes to, its rack), the
subscribed topics that exist (partition counts, replica racks) and the previous target
assignment in; the new target of every member out (member id → topic id → partitions).
Members, topics and partitions are taken in sorted order, so the result depends only on
the arguments.

``uniform`` (the default, Kafka's ``group.consumer.assignors`` first entry)
    Balanced: no member can take a partition of a topic it subscribes to from a member
    holding two or more partitions more than it (with one subscription shared by all,
    every member gets ⌊P/N⌋ or ⌈P/N⌉ of the P partitions). Sticky: a partition stays
    with its previous owner unless balance needs it elsewhere. Rack-aware where
    members send a rack and partitions have replica racks: among the members that may
    take a partition without hurting balance, one in a rack of its replicas is chosen
    (balance first, then racks, as in Kafka).

``range`` (Kafka's ``range``)
    Per topic, the members subscribed to it sorted by member id each get a contiguous
    range of partitions: ⌊P/N⌋ each, the first ``P mod N`` members one more. Topics with
    the same partition count and the same subscribers are co-partitioned: partition p
    of each goes to the same member (what joins over keys need). Not rack-aware:
    co-partitioning wins over racks.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sluice.group.consumer_group import Assignment, TopicImage

UNIFORM_ASSIGNOR = "uniform"
RANGE_ASSIGNOR = "range"
DEFAULT_ASSIGNOR = UNIFORM_ASSIGNOR
"""Kafka's ``group.consumer.assignors`` is ``uniform,range``; the first is the default."""


@dataclass(frozen=True)
class AssignmentSpecMember:
    """What an assignor knows of a member."""

    subscribed_topic_ids: frozenset[uuid.UUID]
    rack_id: str | None = None


TargetAssignment = dict[str, dict[uuid.UUID, frozenset[int]]]
"""Member id → topic id → partitions."""

Assignor = Callable[
    [Mapping[str, AssignmentSpecMember], Mapping[uuid.UUID, TopicImage], Mapping[str, Assignment]],
    TargetAssignment,
]

_Partition = tuple[uuid.UUID, int]


def _finish(
    members: Mapping[str, AssignmentSpecMember], owned: Mapping[str, set[_Partition]]
) -> TargetAssignment:
    result: TargetAssignment = {}
    for member_id in members:
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic_id, partition in owned.get(member_id, set()):
            by_topic.setdefault(topic_id, set()).add(partition)
        result[member_id] = {t: frozenset(p) for t, p in sorted(by_topic.items())}
    return result


def assign_uniform(
    members: Mapping[str, AssignmentSpecMember],
    topics: Mapping[uuid.UUID, TopicImage],
    previous: Mapping[str, Assignment],
) -> TargetAssignment:
    """The ``uniform`` assignor (see the module docstring)."""
    member_ids = sorted(members)
    eligible: dict[_Partition, list[str]] = {}
    for topic_id in sorted(topics):
        subscribers = [m for m in member_ids if topic_id in members[m].subscribed_topic_ids]
        if subscribers:
            for partition in range(topics[topic_id].partition_count):
                eligible[(topic_id, partition)] = subscribers
    owned: dict[str, set[_Partition]] = {m: set() for m in member_ids}
    owner: dict[_Partition, str] = {}

    def on_rack(member_id: str, key: _Partition) -> bool:
        rack = members[member_id].rack_id
        return rack is not None and rack in topics[key[0]].racks_of(key[1])

    # 1. Stickiness: keep what still exists and is still subscribed to.
    for member_id in member_ids:
        for topic_id, partitions in sorted(previous.get(member_id, {}).items()):
            for partition in sorted(partitions):
                key = (topic_id, partition)
                if member_id in eligible.get(key, ()) and key not in owner:
                    owner[key] = member_id
                    owned[member_id].add(key)
    # 2. The rest, most constrained first, to the least loaded member (on rack if one of
    # the least loaded is).
    free = sorted((k for k in eligible if k not in owner), key=lambda k: (len(eligible[k]), k))
    for key in free:
        least = min(len(owned[m]) for m in eligible[key])
        candidates = [m for m in eligible[key] if len(owned[m]) == least]
        chosen = next((m for m in candidates if on_rack(m, key)), candidates[0])
        owner[key] = chosen
        owned[chosen].add(key)
    # 3. Balance: move partitions from a member to one holding two or more fewer. Each
    # move lowers the sum of squared loads by at least 2, so this ends.
    moves_max = len(eligible) ** 2 + 1
    for _ in range(moves_max):
        move = _balancing_move(member_ids, owned, eligible, on_rack)
        if move is None:
            break
        key, donor, receiver = move
        owned[donor].remove(key)
        owned[receiver].add(key)
        owner[key] = receiver
    else:
        raise AssertionError("uniform assignor: balancing did not end")
    return _finish(members, owned)


def _balancing_move(
    member_ids: list[str],
    owned: Mapping[str, set[_Partition]],
    eligible: Mapping[_Partition, list[str]],
    on_rack: Callable[[str, _Partition], bool],
) -> tuple[_Partition, str, str] | None:
    """A partition to move from a loaded member to a less loaded one, or None."""
    by_load = sorted(member_ids, key=lambda m: (len(owned[m]), m))
    for donor in reversed(by_load):
        for receiver in by_load:
            if len(owned[donor]) <= len(owned[receiver]) + 1:
                break
            movable = [k for k in owned[donor] if receiver in eligible[k]]
            if movable:
                # Prefer what lands on the receiver's rack, then what was off the
                # donor's rack; the highest partitions move (the lowest stay put).
                best = max(movable, key=lambda k: (on_rack(receiver, k), not on_rack(donor, k), k))
                return best, donor, receiver
    return None


def assign_range(
    members: Mapping[str, AssignmentSpecMember],
    topics: Mapping[uuid.UUID, TopicImage],
    previous: Mapping[str, Assignment],
) -> TargetAssignment:
    """The ``range`` assignor (see the module docstring); ``previous`` is not needed:
    the ranges depend only on the members and partition counts."""
    del previous
    owned: dict[str, set[_Partition]] = {m: set() for m in members}
    for topic_id in sorted(topics):
        subscribers = sorted(m for m in members if topic_id in members[m].subscribed_topic_ids)
        if not subscribers:
            continue
        count = topics[topic_id].partition_count
        base, extra = divmod(count, len(subscribers))
        start = 0
        for index, member_id in enumerate(subscribers):
            size = base + (index < extra)
            owned[member_id].update((topic_id, p) for p in range(start, start + size))
            start += size
        assert start == count, "every partition assigned"
    return _finish(members, owned)


ASSIGNORS: Mapping[str, Assignor] = {
    UNIFORM_ASSIGNOR: assign_uniform,
    RANGE_ASSIGNOR: assign_range,
}
"""The server assignors a member may name (Kafka's ``group.consumer.assignors``)."""
