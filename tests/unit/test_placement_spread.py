"""Placement of new topics over several brokers (Kafka's rack-aware round-robin), checked
on many seeds: leaders and replicas spread evenly, no broker twice in a partition, racks
covered, and growth continuing where the topic left off."""

from __future__ import annotations

import collections
import os
import random
from random import Random

import pytest

from sluice.cluster import placement
from sluice.cluster.model import BrokerInfo
from sluice.common.errors import ErrorCode, KafkaError

SEED = int(os.environ.get("SLUICE_TEST_SEED", random.randrange(2**32)))


def _brokers(racks: list[str | None]) -> list[BrokerInfo]:
    return [BrokerInfo(i, "127.0.0.1", 9092 + i, rack) for i, rack in enumerate(racks)]


@pytest.mark.parametrize("broker_count", [1, 2, 3, 5])
@pytest.mark.parametrize("replication_factor", [1, 2, 3])
def test_leaders_and_replicas_spread_evenly(broker_count: int, replication_factor: int) -> None:
    if replication_factor > broker_count:
        return
    rng = Random(SEED)
    brokers = _brokers([None] * broker_count)
    for _ in range(20):
        count = broker_count * rng.randint(1, 4)
        topic = placement.new_topic("t", count, replication_factor, {}, brokers, rng)
        leaders = collections.Counter(s.leader for s in topic.partitions.values())
        replicas = collections.Counter(r for s in topic.partitions.values() for r in s.replicas)
        assert set(leaders.values()) == {count // broker_count}, f"seed {SEED}: {leaders}"
        assert set(replicas.values()) == {count * replication_factor // broker_count}, (
            f"seed {SEED}: {replicas}"
        )
        for state in topic.partitions.values():
            assert len(set(state.replicas)) == replication_factor, f"seed {SEED}"
            assert state.leader == state.replicas[0] and state.isr == state.replicas


def test_the_start_is_random_so_topics_do_not_all_lead_on_one_broker() -> None:
    rng = Random(SEED)
    brokers = _brokers([None] * 3)
    first_leaders = {
        placement.new_topic(f"t{i}", 1, 1, {}, brokers, rng).partitions[0].leader for i in range(60)
    }
    assert first_leaders == {0, 1, 2}, f"seed {SEED}"


def test_replicas_cover_every_rack_before_repeating_one() -> None:
    rng = Random(SEED)
    brokers = _brokers(["a", "a", "b", "b", "c", "c"])
    rack_of = {b.node_id: b.rack for b in brokers}
    for _ in range(20):
        topic = placement.new_topic("t", 12, 3, {}, brokers, rng)
        for state in topic.partitions.values():
            assert len({rack_of[r] for r in state.replicas}) == 3, f"seed {SEED}: {state}"


def test_added_partitions_continue_the_round_robin() -> None:
    rng = Random(SEED)
    brokers = _brokers([None] * 3)
    topic = placement.new_topic("t", 3, 1, {}, brokers, rng)
    grown = placement.with_partitions(topic, 12, brokers, rng)
    leaders = collections.Counter(s.leader for s in grown.partitions.values())
    assert set(leaders.values()) == {4}, f"seed {SEED}: {leaders}"
    assert {i: grown.partitions[i] for i in range(3)} == topic.partitions


def test_a_replication_factor_above_the_live_brokers_is_refused() -> None:
    with pytest.raises(KafkaError) as raised:
        placement.new_topic("t", 3, 4, {}, _brokers([None] * 3), Random(SEED))
    assert raised.value.code == ErrorCode.invalid_replication_factor
    assert "larger than available brokers: 3" in str(raised.value.message)
