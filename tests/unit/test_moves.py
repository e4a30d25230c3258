"""Plans that move replicas (``cluster.moves``): a balanced proposal over chosen brokers,
and the moves that empty one broker, keeping racks apart and loads even."""

from __future__ import annotations

from collections import Counter
from random import Random

import pytest

from sluice.cluster.model import BrokerInfo
from sluice.cluster.moves import MoveImpossible, balanced, without_broker
from sluice.common.ids import TopicPartition


def _brokers(count: int, racks: str | None = None) -> list[BrokerInfo]:
    return [
        BrokerInfo(n, "127.0.0.1", 9092 + n, None if racks is None else racks[n])
        for n in range(count)
    ]


def _topic(name: str, *replicas: tuple[int, ...]) -> dict[TopicPartition, tuple[int, ...]]:
    return {TopicPartition(name, i): r for i, r in enumerate(replicas)}


def test_balanced_spreads_onto_a_new_broker_keeping_the_replication_factor() -> None:
    current = _topic("t", *[(0, 1)] * 8)
    proposed = balanced(current, _brokers(4), Random(3))
    assert set(proposed) == set(current)
    assert all(len(set(r)) == 2 for r in proposed.values())
    load = Counter(b for replicas in proposed.values() for b in replicas)
    assert load == {0: 4, 1: 4, 2: 4, 3: 4}
    leaders = Counter(replicas[0] for replicas in proposed.values())
    assert leaders == {0: 2, 1: 2, 2: 2, 3: 2}


def test_balanced_needs_enough_brokers() -> None:
    with pytest.raises(MoveImpossible, match="3 replicas per partition but only 2"):
        balanced(_topic("t", (0, 1, 2)), _brokers(2), Random(1))


def test_decommission_moves_only_the_leaving_brokers_replicas() -> None:
    current = {**_topic("a", (0, 1), (1, 2), (2, 0)), **_topic("b", (0, 2))}
    moved = without_broker(current, 0, _brokers(4))
    assert set(moved) == {TopicPartition("a", 0), TopicPartition("a", 2), TopicPartition("b", 0)}
    assert all(0 not in replicas for replicas in moved.values())
    # In place: a leaving preferred leader is replaced by a preferred leader.
    assert moved[TopicPartition("a", 0)][1] == 1 and moved[TopicPartition("b", 0)][1] == 2
    # The idle broker 3 takes the moves first (fewest replicas).
    assert moved[TopicPartition("a", 0)][0] == 3


def test_decommission_keeps_replicas_on_different_racks() -> None:
    brokers = _brokers(4, racks="xxyy")  # brokers 0,1 in rack x; 2,3 in rack y
    moved = without_broker(_topic("t", (0, 2)), 0, brokers)
    assert moved[TopicPartition("t", 0)] == (1, 2)  # 3 has fewer replicas but shares y


def test_decommission_is_impossible_when_every_other_broker_holds_the_partition() -> None:
    with pytest.raises(MoveImpossible, match="add a broker first"):
        without_broker(_topic("t", (0, 1, 2)), 0, _brokers(3))
