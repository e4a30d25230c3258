"""The server-side assignors of consumer groups (KIP-848), against Kafka's documented
behaviour: ``uniform`` is balanced, sticky and (where members send racks) rack-aware;
``range`` gives each member contiguous ranges, co-partitioned across topics with the
same partition count and subscribers. Both assign every partition of a subscribed topic
to exactly one member subscribed to it, and depend only on their arguments."""

from __future__ import annotations

import uuid

from consumer_helpers import topic, topic_id
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.group.consumer_assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    AssignmentSpecMember,
    TargetAssignment,
    assign_range,
    assign_uniform,
)
from sluice.group.consumer_group import TopicImage

A, B, C = topic_id("a"), topic_id("b"), topic_id("c")


def members_of(
    subscriptions: dict[str, set[uuid.UUID]], racks: dict[str, str] | None = None
) -> dict[str, AssignmentSpecMember]:
    racks = racks or {}
    return {
        m: AssignmentSpecMember(frozenset(topics), racks.get(m))
        for m, topics in subscriptions.items()
    }


def topics_of(**counts: int) -> dict[uuid.UUID, TopicImage]:
    return {topic_id(name): topic(name, count) for name, count in counts.items()}


def check_valid(
    result: TargetAssignment,
    members: dict[str, AssignmentSpecMember],
    topics: dict[uuid.UUID, TopicImage],
) -> None:
    """Every partition of a topic someone subscribes to goes to exactly one subscriber."""
    assert set(result) == set(members)
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for member_id, assignment in result.items():
        for topic_id_, partitions in assignment.items():
            assert topic_id_ in members[member_id].subscribed_topic_ids
            for partition in partitions:
                assert 0 <= partition < topics[topic_id_].partition_count
                assert (topic_id_, partition) not in seen, "owned twice"
                seen[(topic_id_, partition)] = member_id
    for topic_id_, image in topics.items():
        if any(topic_id_ in m.subscribed_topic_ids for m in members.values()):
            assert all((topic_id_, p) in seen for p in range(image.partition_count))


def load(result: TargetAssignment) -> dict[str, int]:
    return {m: sum(len(p) for p in a.values()) for m, a in result.items()}


def test_uniform_is_the_default_and_both_assignors_are_known_by_kafkas_names() -> None:
    assert DEFAULT_ASSIGNOR == "uniform"
    assert set(ASSIGNORS) == {"uniform", "range"}


def test_uniform_spreads_one_topic_evenly() -> None:
    members = members_of({"m1": {A}, "m2": {A}, "m3": {A}})
    topics = topics_of(a=8)
    result = assign_uniform(members, topics, {})
    check_valid(result, members, topics)
    assert sorted(load(result).values()) == [2, 3, 3]


def test_uniform_moves_only_what_balance_needs_when_a_member_joins() -> None:
    topics = topics_of(a=6)
    before = assign_uniform(members_of({"m1": {A}, "m2": {A}, "m3": {A}}), topics, {})
    members = members_of({"m1": {A}, "m2": {A}, "m3": {A}, "m4": {A}})
    after = assign_uniform(members, topics, before)
    check_valid(after, members, topics)
    assert sorted(load(after).values()) == [1, 1, 2, 2]
    moved = sum(len(before[m][A] - after[m].get(A, frozenset())) for m in before)
    assert moved == 1, "2, 2, 2, 0 become 2, 2, 1, 1: one partition moves"
    assert load(after)["m4"] == 1


def test_uniform_keeps_an_assignment_that_is_already_balanced() -> None:
    members = members_of({"m1": {A, B}, "m2": {A, B}})
    topics = topics_of(a=3, b=3)
    previous = {
        "m1": {A: frozenset({2}), B: frozenset({0, 1})},
        "m2": {A: frozenset({0, 1}), B: frozenset({2})},
    }
    assert assign_uniform(members, topics, previous) == previous


def test_uniform_with_different_subscriptions_gives_each_member_only_its_topics() -> None:
    members = members_of({"m1": {A}, "m2": {A, B}, "m3": {C}})
    topics = topics_of(a=4, b=2, c=1)
    result = assign_uniform(members, topics, {})
    check_valid(result, members, topics)
    assert result["m3"] == {C: frozenset({0})}
    # a and b (6 partitions) shared by m1 (a only) and m2: 3 each.
    assert load(result)["m1"] == load(result)["m2"] == 3


def test_uniform_prefers_members_in_a_rack_of_the_partitions_replicas() -> None:
    racks = tuple(frozenset({"r1" if p % 2 == 0 else "r2"}) for p in range(6))
    topics = {A: topic("a", 6, racks)}
    members = members_of({"m1": {A}, "m2": {A}}, racks={"m1": "r2", "m2": "r1"})
    result = assign_uniform(members, topics, {})
    assert result == {"m1": {A: frozenset({1, 3, 5})}, "m2": {A: frozenset({0, 2, 4})}}


def test_uniform_puts_balance_before_racks() -> None:
    racks = tuple(frozenset({"r1"}) for _ in range(4))
    topics = {A: topic("a", 4, racks)}
    members = members_of({"m1": {A}, "m2": {A}}, racks={"m1": "r1", "m2": "r2"})
    assert sorted(load(assign_uniform(members, topics, {})).values()) == [2, 2]


def test_uniform_drops_partitions_of_topics_gone_or_unsubscribed_and_of_shrunk_topics() -> None:
    previous = {"m1": {A: frozenset({0, 1, 5}), B: frozenset({0})}}
    members = members_of({"m1": {A}})
    assert assign_uniform(members, topics_of(a=2, b=1), previous) == {"m1": {A: frozenset({0, 1})}}


def test_range_gives_contiguous_ranges_in_member_id_order() -> None:
    members = members_of({"m3": {A}, "m1": {A}, "m2": {A}})
    result = assign_range(members, topics_of(a=7), {})
    assert result == {
        "m1": {A: frozenset({0, 1, 2})},
        "m2": {A: frozenset({3, 4})},
        "m3": {A: frozenset({5, 6})},
    }


def test_range_co_partitions_topics_with_the_same_partition_count_and_subscribers() -> None:
    members = members_of({"m1": {A, B}, "m2": {A, B}, "m3": {A, B, C}})
    topics = topics_of(a=5, b=5, c=2)
    result = assign_range(members, topics, {})
    check_valid(result, members, topics)
    for assignment in result.values():
        assert assignment[A] == assignment[B]
    assert result["m3"][C] == frozenset({0, 1})


def test_a_member_without_subscribed_topics_gets_an_empty_assignment() -> None:
    members = members_of({"m1": {A}, "m2": set()})
    for assignor in (assign_uniform, assign_range):
        assert assignor(members, topics_of(a=2), {})["m2"] == {}


@st.composite
def groups(
    draw: st.DrawFn,
) -> tuple[
    dict[str, AssignmentSpecMember],
    dict[uuid.UUID, TopicImage],
    dict[str, dict[uuid.UUID, frozenset[int]]],
]:
    topic_names = ("a", "b", "c", "d")
    counts = {n: draw(st.integers(0, 9)) for n in topic_names}
    topics = {topic_id(n): topic(n, c) for n, c in counts.items() if c > 0}
    member_ids = draw(
        st.lists(st.sampled_from([f"m{i}" for i in range(8)]), min_size=1, unique=True)
    )
    ids = [topic_id(n) for n in topic_names]
    members = {
        m: AssignmentSpecMember(
            frozenset(draw(st.sets(st.sampled_from(ids)))),
            draw(st.sampled_from([None, "r1", "r2"])),
        )
        for m in member_ids
    }
    previous = {
        m: {
            t: frozenset(draw(st.sets(st.integers(0, 10), max_size=4)))
            for t in draw(st.sets(st.sampled_from(ids), max_size=2))
        }
        for m in draw(st.lists(st.sampled_from(member_ids), unique=True))
    }
    return members, topics, previous


@settings(max_examples=300, deadline=None)
@given(groups())
def test_uniform_is_valid_balanced_deterministic_and_stable(
    group: tuple[
        dict[str, AssignmentSpecMember],
        dict[uuid.UUID, TopicImage],
        dict[str, dict[uuid.UUID, frozenset[int]]],
    ],
) -> None:
    members, topics, previous = group
    result = assign_uniform(members, topics, previous)
    check_valid(result, members, topics)
    # Balanced: no partition could go from a member to one holding two fewer.
    loads = load(result)
    for donor, assignment in result.items():
        for receiver, spec in members.items():
            if loads[donor] > loads[receiver] + 1:
                assert not any(t in spec.subscribed_topic_ids for t in assignment)
    # Deterministic whatever the mappings' order; stable when fed its own answer.
    reversed_members = dict(reversed(list(members.items())))
    assert (
        assign_uniform(reversed_members, dict(reversed(list(topics.items()))), previous) == result
    )
    assert assign_uniform(members, topics, result) == result


@settings(max_examples=200, deadline=None)
@given(groups())
def test_range_is_valid_and_balanced_per_topic(
    group: tuple[
        dict[str, AssignmentSpecMember],
        dict[uuid.UUID, TopicImage],
        dict[str, dict[uuid.UUID, frozenset[int]]],
    ],
) -> None:
    members, topics, previous = group
    result = assign_range(members, topics, previous)
    check_valid(result, members, topics)
    for topic_id_, image in topics.items():
        sizes = [
            len(result[m].get(topic_id_, ()))
            for m, s in members.items()
            if topic_id_ in s.subscribed_topic_ids
        ]
        if sizes:
            assert max(sizes) - min(sizes) <= 1 and sum(sizes) == image.partition_count
