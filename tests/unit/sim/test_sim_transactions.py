"""Transactions in the simulated cluster: transactional producers commit and abort
through Sluice's transaction coordinator (its state in a replicated partition) while
brokers crash, read_committed consumers see what the checker expects, a fenced producer
cannot write, and the defect that reads past the last stable offset is found."""

from __future__ import annotations

import dataclasses

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.sim import history
from sluice.sim.broker import ProduceAnswer, ProduceRequest
from sluice.sim.cluster import Settings, SimCluster, run
from sluice.sim.disk import SimRecord

SEEDS_TO_FIND_READ_PAST_LSO = 3
"""``read-past-lso`` is found within this many seeds (docs/replication.md)."""


def _transactions(log: history.History) -> list[history.Transaction]:
    return [op for op in log.operations if isinstance(op, history.Transaction)]


def test_transactions_commit_and_abort_and_read_committed_polls_see_only_commits() -> None:
    seed = 3
    result = run(seed)
    assert result.result.valid, f"seed {seed}\n{result.result.summary()}"
    ended = _transactions(result.history)
    outcomes = {t.outcome for t in ended}
    assert {"ok", "fail"} <= outcomes, f"seed {seed}: {outcomes}"
    committed = {v for t in ended if t.outcome == "ok" for v in t.values}
    aborted = {v for t in ended if t.outcome == "fail" for v in t.values}
    read_committed: set[history.Value] = set()
    read_uncommitted: set[history.Value] = set()
    for op in result.history.operations:
        if isinstance(op, history.Poll):
            values = {r.value for r in op.records}
            (read_committed if op.read_committed else read_uncommitted).update(values)
    assert committed and committed <= read_committed, "every commit was read to its end"
    assert not aborted & read_committed
    assert aborted & read_uncommitted, "read_uncommitted consumers see aborted values"


def test_the_read_past_lso_defect_is_found() -> None:
    found = any(
        history.ABORTED_READ
        in run(seed, Settings(), frozenset({"read-past-lso"})).result.anomaly_kinds
        for seed in range(1, SEEDS_TO_FIND_READ_PAST_LSO + 1)
    )
    assert found, f"read-past-lso went unnoticed in {SEEDS_TO_FIND_READ_PAST_LSO} seeds"


def test_a_producer_fenced_by_a_newer_epoch_cannot_write() -> None:
    """A marker at epoch 1 fences a late produce of epoch 0 (a zombie, or a send of the
    finished transaction delayed in the network); epoch 1 starts its sequences at 0."""
    cluster = SimCluster(1, Settings(transactional_producers=0))
    world = cluster.world
    for broker in cluster.brokers:
        broker.start()
    cluster.store.create_topic("t", [(0, 1, 2)], {"min.insync.replicas": "2"})
    cluster.publish()
    world.run_until(2_000)
    answers: list[ProduceAnswer] = []
    cluster.network.attach(100, lambda _sender, answer: answers.append(answer))
    tp = TopicPartition("t", 0)
    first = ProduceRequest(1, tp, 7, 0, "a", 0, True)
    marker = ProduceRequest(2, tp, 7, -1, "", 1, True, "commit")
    late = dataclasses.replace(first, request_id=3, sequence=1, value="late")
    next_epoch = ProduceRequest(4, tp, 7, 0, "b", 1, True)
    for request in (first, marker, late, next_epoch):
        cluster.network.send(100, 0, request)
        world.run_until(world.now_ms + 500)
    assert [(a.request_id, a.error_code) for a in answers] == [
        (1, ErrorCode.none),
        (2, ErrorCode.none),
        (3, ErrorCode.invalid_producer_epoch),
        (4, ErrorCode.none),
    ]
    log = cluster.brokers[0].logs[tp]
    assert [(r.value, r.control) for r in log.records] == [
        ("a", None),
        ("", "commit"),
        ("b", None),
    ]
    assert log.records[2] == SimRecord(0, 7, 0, "b", 1, True)
