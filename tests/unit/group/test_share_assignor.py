"""The share assignor's promises, checked on examples and on generated groups.

For each topic that exists with P > 0 partitions and S > 0 subscribed members:

- coverage: every partition is assigned to at least one subscribed member;
- work for everyone: every subscribed member gets at least one of its partitions;
- balance: with S <= P each partition has exactly one member and members hold P // S or
  P // S + 1 partitions; with S > P each member holds exactly one partition and each
  partition has S // P or S // P + 1 members;
- nothing is assigned to a member that does not subscribe to the topic, nor of a topic
  that does not exist;
- determinism: the same arguments give the same answer, in any mapping order;
- stability: feeding the answer back as the previous assignment changes nothing.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.group.share_assignor import assign

TOPIC_NAMES = ("a", "b", "c", "d")


def check_promises(
    subscriptions: dict[str, frozenset[str]],
    counts: dict[str, int],
    result: dict[str, dict[str, frozenset[int]]],
) -> None:
    assert set(result) == set(subscriptions)
    for member, topics in result.items():
        for topic in topics:
            assert topic in subscriptions[member], f"{member} got {topic} it does not want"
            assert counts.get(topic, 0) > 0, f"{topic} does not exist"
            assert topics[topic], "no empty entries"
    for topic, count in counts.items():
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if count <= 0 or not members:
            continue
        holders: Counter[int] = Counter()
        for member in members:
            partitions = result[member].get(topic, frozenset())
            assert partitions, f"{member} got no partition of {topic}"
            assert all(0 <= p < count for p in partitions)
            holders.update(partitions)
        assert set(holders) == set(range(count)), f"{topic}: not every partition assigned"
        if len(members) <= count:
            assert set(holders.values()) == {1}
            base = count // len(members)
            sizes = {len(result[m][topic]) for m in members}
            assert sizes <= {base, base + 1}, sizes
        else:
            assert all(len(result[m][topic]) == 1 for m in members)
            base = len(members) // count
            assert set(holders.values()) <= {base, base + 1}, holders


def test_fewer_members_than_partitions_spread_evenly() -> None:
    subscriptions = {"m1": frozenset({"a"}), "m2": frozenset({"a"})}
    result = assign(subscriptions, {"a": 5}, {})
    assert sorted(len(result[m]["a"]) for m in subscriptions) == [2, 3]
    check_promises(subscriptions, {"a": 5}, result)


def test_more_members_than_partitions_share() -> None:
    subscriptions = {f"m{i}": frozenset({"a"}) for i in range(5)}
    result = assign(subscriptions, {"a": 2}, {})
    holders = Counter(p for m in subscriptions for p in result[m]["a"])
    assert sorted(holders.values()) == [2, 3]
    check_promises(subscriptions, {"a": 2}, result)


def test_missing_topics_and_members_without_work() -> None:
    subscriptions = {"m1": frozenset({"gone"}), "m2": frozenset({"a"})}
    assert assign(subscriptions, {"a": 1}, {}) == {"m1": {}, "m2": {"a": frozenset({0})}}


def test_a_new_member_moves_only_what_it_must() -> None:
    previous = {"m1": {"a": frozenset(range(6))}, "m2": {"a": frozenset(range(6, 12))}}
    subscriptions = {m: frozenset({"a"}) for m in ("m1", "m2", "m3")}
    result = assign(subscriptions, {"a": 12}, previous)
    assert result["m1"]["a"] <= previous["m1"]["a"]
    assert result["m2"]["a"] <= previous["m2"]["a"]
    assert len(result["m3"]["a"]) == 4
    moved = sum(len(previous[m]["a"] - result[m]["a"]) for m in ("m1", "m2"))
    assert moved == 4, "exactly the new member's share moves"


def test_a_leaving_member_leaves_the_others_alone() -> None:
    subscriptions = {m: frozenset({"a"}) for m in ("m1", "m2", "m3")}
    first = assign(subscriptions, {"a": 9}, {})
    del subscriptions["m3"]
    second = assign(subscriptions, {"a": 9}, first)
    for member in ("m1", "m2"):
        assert first[member]["a"] <= second[member]["a"]


def test_extra_partitions_go_to_members_with_less_work_elsewhere() -> None:
    subscriptions = {"m1": frozenset({"a", "b"}), "m2": frozenset({"a", "b"})}
    result = assign(subscriptions, {"a": 3, "b": 3}, {})
    assert [sum(len(p) for p in result[m].values()) for m in ("m1", "m2")] == [3, 3]


subscriptions_strategy = st.dictionaries(
    st.text("mnopq", min_size=1, max_size=3),
    st.frozensets(st.sampled_from(TOPIC_NAMES), max_size=4),
    max_size=12,
)
counts_strategy = st.dictionaries(
    st.sampled_from(TOPIC_NAMES[:3]), st.integers(min_value=0, max_value=9)
)


@settings(max_examples=300, deadline=None)
@given(subscriptions_strategy, counts_strategy, subscriptions_strategy)
def test_promises_hold_for_any_group(
    subscriptions: dict[str, frozenset[str]],
    counts: dict[str, int],
    earlier: dict[str, frozenset[str]],
) -> None:
    previous = assign(earlier, counts, {})
    result = assign(subscriptions, counts, previous)
    check_promises(subscriptions, counts, result)
    reordered = dict(reversed(list(subscriptions.items())))
    assert assign(reordered, dict(reversed(list(counts.items()))), previous) == result
    assert assign(subscriptions, counts, result) == result, "stable once assigned"
