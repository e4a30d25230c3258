"""Which open transactions ``find-hanging`` reports, decided without a broker: old
enough, and not finishable by their coordinator."""

from __future__ import annotations

from sluice.client.admin_producers import (
    NO_TRANSACTION,
    OpenTransaction,
    ProducerState,
    hanging_among,
    open_transactions_older_than,
)
from sluice.common.ids import TopicPartition

A = TopicPartition("a", 0)
B = TopicPartition("a", 1)


def producer(producer_id: int, last_ms: int, start: int = 5) -> ProducerState:
    return ProducerState(producer_id, 0, 3, last_ms, 0, start)


def test_only_open_transactions_older_than_the_limit_are_candidates() -> None:
    states = {
        A: [producer(1, 1_000), producer(2, 9_500), producer(3, 1_000, NO_TRANSACTION)],
        B: [producer(4, 8_999)],
    }
    found = open_transactions_older_than(states, now_ms=10_000, age_ms=1_000)
    assert [(c.topic_partition, c.producer.producer_id) for c in found] == [(A, 1), (B, 4)]
    assert open_transactions_older_than(states, now_ms=10_000, age_ms=9_000) == []


def test_hanging_unless_the_coordinator_holds_the_partition() -> None:
    candidates = [
        OpenTransaction(A, producer(1, 0)),  # no transactional id listed
        OpenTransaction(A, producer(2, 0)),  # id unknown to its coordinator
        OpenTransaction(A, producer(3, 0)),  # coordinator's transaction holds A
        OpenTransaction(B, producer(3, 0)),  # ...but not B
    ]
    ids = {2: "gone", 3: "live"}
    held = {"gone": None, "live": frozenset({A})}
    assert hanging_among(candidates, ids, held) == [candidates[0], candidates[1], candidates[3]]
