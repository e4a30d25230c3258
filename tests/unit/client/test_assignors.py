"""Range and round-robin assignors against Kafka's documented examples and invariants."""

from __future__ import annotations

import random

import pytest

from sluice.client.assignors import (
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    assignors_named,
)
from sluice.client.membership import decode_subscription, encode_subscription
from sluice.common.ids import TopicPartition


def tps(*names: str) -> list[TopicPartition]:
    """``"t0p1"`` → TopicPartition("t0", 1)."""
    out = []
    for name in names:
        topic, _, partition = name.partition("p")
        out.append(TopicPartition(topic, int(partition)))
    return out


def members(*specs: tuple[str, tuple[str, ...]]) -> list[MemberSubscription]:
    return [MemberSubscription(member_id, topics) for member_id, topics in specs]


def test_range_two_topics_three_partitions_two_members() -> None:
    # Kafka's RangeAssignor javadoc example.
    result = RangeAssignor().assign(
        {"t0": 3, "t1": 3}, members(("C1", ("t0", "t1")), ("C0", ("t0", "t1")))
    )
    assert result == {"C0": tps("t0p0", "t0p1", "t1p0", "t1p1"), "C1": tps("t0p2", "t1p2")}


def test_round_robin_two_topics_three_partitions_two_members() -> None:
    # Kafka's RoundRobinAssignor javadoc example.
    result = RoundRobinAssignor().assign(
        {"t0": 3, "t1": 3}, members(("C0", ("t0", "t1")), ("C1", ("t0", "t1")))
    )
    assert result == {"C0": tps("t0p0", "t0p2", "t1p1"), "C1": tps("t0p1", "t1p0", "t1p2")}


def test_round_robin_unequal_subscriptions() -> None:
    # Kafka's RoundRobinAssignor javadoc example with different subscriptions.
    result = RoundRobinAssignor().assign(
        {"t0": 1, "t1": 2, "t2": 3},
        members(("C0", ("t0",)), ("C1", ("t0", "t1")), ("C2", ("t0", "t1", "t2"))),
    )
    assert result == {
        "C0": tps("t0p0"),
        "C1": tps("t1p0"),
        "C2": tps("t1p1", "t2p0", "t2p1", "t2p2"),
    }


def test_range_gives_extra_partitions_to_first_members() -> None:
    result = RangeAssignor().assign({"t": 7}, members(("b", ("t",)), ("a", ("t",)), ("c", ("t",))))
    assert [len(result[m]) for m in ("a", "b", "c")] == [3, 2, 2]
    assert result["a"] == tps("tp0", "tp1", "tp2")


def test_static_members_sort_before_dynamic_ones() -> None:
    group = [
        MemberSubscription("a-dynamic", ("t",)),
        MemberSubscription("z-static", ("t",), group_instance_id="instance-1"),
    ]
    result = RangeAssignor().assign({"t": 2}, group)
    assert result == {"z-static": tps("tp0"), "a-dynamic": tps("tp1")}


def test_members_without_matching_topics_get_nothing_and_missing_topics_are_skipped() -> None:
    for assignor in (RangeAssignor(), RoundRobinAssignor()):
        result = assignor.assign({"t": 2}, members(("a", ("t",)), ("b", ("gone",))))
        assert result == {"a": tps("tp0", "tp1"), "b": []}


@pytest.mark.parametrize("assignor", [RangeAssignor(), RoundRobinAssignor()])
def test_every_partition_assigned_once_and_deterministic(assignor: RangeAssignor) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    topics = {f"t{i}": rng.randint(1, 12) for i in range(rng.randint(1, 5))}
    group = [
        MemberSubscription(f"m{i}", tuple(rng.sample(sorted(topics), rng.randint(1, len(topics)))))
        for i in range(rng.randint(1, 6))
    ]
    result = assignor.assign(topics, group)
    assert result == assignor.assign(topics, list(reversed(group))), f"seed {seed}"
    handed = [tp for partitions in result.values() for tp in partitions]
    subscribed = {t for m in group for t in m.topics}
    expected = {TopicPartition(t, p) for t in subscribed for p in range(topics[t])}
    assert sorted(handed) == sorted(expected), f"seed {seed}"
    by_member = {m.member_id: m for m in group}
    for member_id, partitions in result.items():
        assert all(tp.topic in by_member[member_id].topics for tp in partitions), f"seed {seed}"


def test_assignors_named() -> None:
    assert [a.name for a in assignors_named(["roundrobin", "range"])] == ["roundrobin", "range"]
    with pytest.raises(ValueError, match="unknown partition assignment strategy"):
        assignors_named(["sticky-ish"])


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_bytes_round_trip(version: int) -> None:
    data = encode_subscription(["b", "a"], tps("ap1"), version=version)
    decoded = decode_subscription("m", None, data)
    assert decoded.topics == ("a", "b")
    assert decoded.owned_partitions == (tuple(tps("ap1")) if version >= 1 else ())


def owning(member_id: str, topics: tuple[str, ...], owned: list[TopicPartition]):
    return MemberSubscription(member_id, topics, owned_partitions=tuple(owned))


def test_cooperative_sticky_fresh_group_is_balanced() -> None:
    result = CooperativeStickyAssignor().assign({"t": 6}, members(("a", ("t",)), ("b", ("t",))))
    assert sorted(len(p) for p in result.values()) == [3, 3]
    assert sorted(tp for p in result.values() for tp in p) == tps(*(f"tp{i}" for i in range(6)))


def test_cooperative_sticky_moves_partitions_in_two_rebalances() -> None:
    assignor = CooperativeStickyAssignor()
    everything = tps(*(f"tp{i}" for i in range(6)))
    # b joins while a owns everything: a keeps half, the rest is only taken away.
    first = assignor.assign({"t": 6}, [owning("a", ("t",), everything), owning("b", ("t",), [])])
    assert first == {"a": tps("tp0", "tp1", "tp2"), "b": []}
    # a revoked the other half and rejoined: now b gets it, a keeps its own.
    second = assignor.assign({"t": 6}, [owning("a", ("t",), first["a"]), owning("b", ("t",), [])])
    assert second == {"a": tps("tp0", "tp1", "tp2"), "b": tps("tp3", "tp4", "tp5")}
    # Stable: the same input gives the same output.
    again = assignor.assign(
        {"t": 6}, [owning("a", ("t",), second["a"]), owning("b", ("t",), second["b"])]
    )
    assert again == second


def test_cooperative_sticky_never_hands_an_owned_partition_to_another_member() -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    topics = {f"t{i}": rng.randint(1, 10) for i in range(rng.randint(1, 4))}
    everything = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    rng.shuffle(everything)
    count = rng.randint(1, 5)
    owned: list[list[TopicPartition]] = [[] for _ in range(count + 1)]
    for tp in everything:
        owned[rng.randrange(count + 1)].append(tp)  # the last list: nobody owns it
    group = [owning(f"m{i}", tuple(topics), owned[i]) for i in range(count)]
    result = CooperativeStickyAssignor().assign(topics, group)
    owner = {tp: f"m{i}" for i in range(count) for tp in owned[i]}
    handed = [tp for partitions in result.values() for tp in partitions]
    assert len(handed) == len(set(handed)), f"seed {seed}"
    for member_id, partitions in result.items():
        assert all(owner.get(tp, member_id) == member_id for tp in partitions), f"seed {seed}"
    # Unowned partitions are all handed out, balanced within one.
    assert set(owned[count]) <= set(handed), f"seed {seed}"
    if not any(owned[:count]):
        sizes = [len(p) for p in result.values()]
        assert max(sizes) - min(sizes) <= 1, f"seed {seed}"
