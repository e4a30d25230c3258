"""The share-group assignor: which members of a share group read which partitions.

In the spirit of Kafka's ``simple`` share assignor (KIP-932). A share group has no
exclusive ownership (records, not partitions, are handed out one consumer at a time), so
a partition may be given to several members, and every member should get work. Each
subscribed topic is assigned on its own, to the members subscribed to it. With ``P``
partitions and ``S`` subscribed members::

    S <= P  every partition goes to exactly one member; each member gets P // S or
            P // S + 1 of them (the extra ones to the members that hold fewest
            partitions of other topics so far)
    S >  P  every member gets exactly one partition; each partition is shared by
            S // P or S // P + 1 members

So, whenever a topic that exists has at least one subscribed member, every one of its
partitions is assigned, and every member subscribed to at least one topic with
partitions gets at least one partition of each such topic.

Stability: a (member, partition) pair of the previous assignment is kept as long as it
fits these quotas; only what does not fit moves, and new partitions go where there is
room. The result depends only on the arguments (members, topics and partitions are
taken in sorted order): the assignor is pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping

ASSIGNOR_NAME = "simple"
"""The name ShareGroupDescribe reports (Kafka's ``group.share.assignors`` default)."""

TopicAssignment = Mapping[str, frozenset[int]]
"""Topic name → partitions of one member."""


def assign(
    subscriptions: Mapping[str, frozenset[str]],
    partition_counts: Mapping[str, int],
    previous: Mapping[str, TopicAssignment],
) -> dict[str, dict[str, frozenset[int]]]:
    """The assignment of every member (member id → topic → partitions).

    ``subscriptions``: member id → topic names it subscribes to. ``partition_counts``:
    topic name → partition count of the topics that exist (others are not assigned).
    ``previous``: the last assignment, kept where it still fits. Members with nothing to
    read get an empty mapping."""
    result: dict[str, dict[str, frozenset[int]]] = {member: {} for member in subscriptions}
    load = dict.fromkeys(subscriptions, 0)
    """Partitions given to each member so far (over the topics already done)."""
    topics = sorted({t for topics in subscriptions.values() for t in topics})
    for topic in topics:
        count = partition_counts.get(topic, 0)
        if count <= 0:
            continue
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        kept = {
            m: sorted(p for p in previous.get(m, {}).get(topic, frozenset()) if p < count)
            for m in members
        }
        if len(members) <= count:
            chosen = _spread(members, count, kept, load)
        else:
            chosen = _share(members, count, kept)
        for member, partitions in chosen.items():
            if partitions:
                result[member][topic] = frozenset(partitions)
                load[member] += len(partitions)
    return result


def _spread(
    members: list[str], count: int, kept: Mapping[str, list[int]], load: Mapping[str, int]
) -> dict[str, set[int]]:
    """At most as many members as partitions: each partition to one member."""
    base, extra = divmod(count, len(members))
    # Who may hold one more: first those that already held more than ``base`` (so they
    # keep them), then those with the least work elsewhere.
    by_preference = sorted(members, key=lambda m: (len(kept[m]) <= base, load[m], m))
    target = {m: base + (i < extra) for i, m in enumerate(by_preference)}
    owned: dict[int, str] = {}
    chosen: dict[str, set[int]] = {m: set() for m in members}
    for member in members:
        for partition in kept[member]:
            if len(chosen[member]) >= target[member]:
                break
            if partition not in owned:
                owned[partition] = member
                chosen[member].add(partition)
    free = iter(p for p in range(count) if p not in owned)
    for member in members:
        while len(chosen[member]) < target[member]:
            chosen[member].add(next(free))
    assert next(free, None) is None, "every partition is assigned"
    return chosen


def _share(members: list[str], count: int, kept: Mapping[str, list[int]]) -> dict[str, set[int]]:
    """More members than partitions: each member gets one, partitions are shared."""
    base, extra = divmod(len(members), count)
    sharers = [0] * count
    extra_left = extra

    def accepts(partition: int) -> bool:
        return sharers[partition] < base or (sharers[partition] == base and extra_left > 0)

    def take(member: str, partition: int) -> None:
        nonlocal extra_left
        if sharers[partition] == base:
            extra_left -= 1
        sharers[partition] += 1
        chosen[member] = {partition}

    chosen: dict[str, set[int]] = {}
    for member in members:
        for partition in kept[member]:
            if accepts(partition):
                take(member, partition)
                break
    for member in members:
        if member not in chosen:
            partition = min((p for p in range(count) if accepts(p)), key=lambda p: sharers[p])
            take(member, partition)
    assert all(sharers), "every partition is assigned"
    return chosen
