"""KIP-966's strict min ISR in the leader's decisions: the high watermark stays while the
ISR is below min.insync.replicas (so a replica that left such an ISR, an eligible leader
replica, has every committed record), and moves on once the ISR is back."""

from __future__ import annotations

import dataclasses

from sluice.cluster.model import PartitionState
from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.replication.leader import LeaderCore

TP = TopicPartition("t", 0)
EPOCH = 3


def _leader(isr: tuple[int, ...], replicas: tuple[int, ...] = (0, 1, 2)) -> LeaderCore:
    state = PartitionState(replicas=replicas, leader=0, leader_epoch=EPOCH, isr=isr, version=7)
    core = LeaderCore(TP, 0, state, changes_isr=True)
    core.begin_leading(1_000, 0)
    return core


def test_the_high_watermark_stays_while_the_isr_is_below_min_insync() -> None:
    core = _leader((0,))
    assert core.high_watermark_to_set(10, 0, min_insync=2) is None
    assert core.high_watermark_to_set(10, 0, min_insync=1) == 10, "min.insync.replicas=1"
    core.update_state(dataclasses.replace(core.state, isr=(0, 1), version=8), 1_100)
    core.record_follower_fetch(1, 10, 10, 1_200)
    assert core.high_watermark_to_set(10, 0, min_insync=2) == 10, "the ISR is back"


def test_min_insync_counts_at_most_the_replicas() -> None:
    core = _leader((0, 1), replicas=(0, 1))
    core.record_follower_fetch(1, 10, 10, 1_100)
    assert core.high_watermark_to_set(10, 0, min_insync=3) == 10


def test_a_waiting_acks_all_append_is_answered_once_the_isr_falls_below_min_insync() -> None:
    core = _leader((0, 1))
    assert core.acks_all_outcome(10, EPOCH, 0, 2) is False, "waits for follower 1"
    core.update_state(dataclasses.replace(core.state, isr=(0,), version=8), 1_100)
    outcome = core.acks_all_outcome(10, EPOCH, 0, 2)
    assert isinstance(outcome, errors.NotEnoughReplicasAfterAppend)
