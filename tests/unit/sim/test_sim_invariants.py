"""The invariants checked while a simulation runs: each breach is noted with its kind
and simulated time, and what replication legitimately does (a follower that has yet to
truncate its diverged tail, a retried send acknowledged again at its offset) is none."""

from __future__ import annotations

from sluice.common.ids import TopicPartition
from sluice.sim import invariants
from sluice.sim.disk import SimLog, SimRecord
from sluice.sim.invariants import Monitor

TP = TopicPartition("t", 0)


def _log(name: str, values: str, epoch: int = 0, high_watermark: int = 0) -> SimLog:
    log = SimLog(name)
    log.append([SimRecord(epoch, 1, index, value) for index, value in enumerate(values)])
    log.update_high_watermark(high_watermark)
    return log


class _Cluster:
    def __init__(self, **logs: SimLog) -> None:
        self.now_ms = 0
        self.logs = {int(name[1:]): log for name, log in logs.items()}
        self.monitor = Monitor(lambda: self.now_ms, lambda _tp: self.logs)


def test_two_brokers_acknowledging_at_one_epoch_is_a_violation() -> None:
    cluster = _Cluster()
    cluster.monitor.acknowledged(TP, 0, 3, 10, producer_id=1, sequence=0)
    cluster.monitor.acknowledged(TP, 0, 3, 10, producer_id=1, sequence=0)  # a retry: same
    assert cluster.monitor.count == 0
    cluster.now_ms = 1_234
    cluster.monitor.acknowledged(TP, 1, 3, 11, producer_id=1, sequence=1)
    (violation,) = cluster.monitor.violations
    assert violation.kind == invariants.TWO_LEADERS_ACKNOWLEDGE and violation.at_ms == 1_234
    assert "at 1234 ms" in str(violation)


def test_a_producers_offsets_follow_its_sequences_and_never_move() -> None:
    monitor = _Cluster().monitor
    monitor.acknowledged(TP, 0, 0, 5, producer_id=1, sequence=0)
    monitor.acknowledged(TP, 0, 0, 9, producer_id=1, sequence=2)
    monitor.acknowledged(TP, 0, 0, 7, producer_id=1, sequence=1)  # acked out of order: fine
    assert monitor.count == 0
    monitor.acknowledged(TP, 0, 0, 8, producer_id=1, sequence=3)  # below sequence 2's
    monitor.acknowledged(TP, 0, 0, 12, producer_id=1, sequence=0)  # a second offset
    monitor.acknowledged(TP, 0, 0, 5, producer_id=2, sequence=0)  # another's offset
    assert [v.kind for v in monitor.violations] == [invariants.OFFSETS_NONMONOTONIC] * 3


def test_a_leaders_high_watermark_stays_below_its_isr_and_never_goes_down() -> None:
    leader = _log("leader", "abcd", high_watermark=0)
    cluster = _Cluster(b0=leader, b1=_log("follower", "ab"))
    monitor = cluster.monitor
    monitor.follower_fetched(TP, 0, 0, 1, 2)
    leader.update_high_watermark(2)
    monitor.leader_high_watermark(TP, 0, 0, {0, 1}, leader)
    assert monitor.count == 0
    leader.update_high_watermark(3)  # the follower said its log ends at 2
    monitor.leader_high_watermark(TP, 0, 0, {0, 1}, leader)
    leader.update_high_watermark(1)
    monitor.leader_high_watermark(TP, 0, 0, {0, 1}, leader)
    assert [v.kind for v in monitor.violations] == [
        invariants.HIGH_WATERMARK_ABOVE_ISR,
        invariants.HIGH_WATERMARK_DECREASED,
    ]


def test_records_below_a_high_watermark_match_the_committed_ones() -> None:
    leader = _log("leader", "abc", high_watermark=3)
    diverged = _log("diverged", "abX", epoch=0)  # has not fetched since: may differ
    cluster = _Cluster(b0=leader, b1=diverged)
    monitor = cluster.monitor
    monitor.leader_high_watermark(TP, 0, 1, {0}, leader)
    assert monitor.count == 0
    monitor.follower_fetched(TP, 0, 1, 1, 3)  # the leader took its fetch from 3
    (violation,) = monitor.violations
    assert violation.kind == invariants.COMMITTED_DIFFERS and "offset 2" in str(violation)


def test_a_truncated_and_rewritten_tail_is_checked_again() -> None:
    leader = _log("leader", "abc", high_watermark=3)
    follower = _log("follower", "abc", high_watermark=3)
    monitor = _Cluster(b0=leader, b1=follower).monitor
    monitor.leader_high_watermark(TP, 0, 0, {0}, leader)
    monitor.follower_high_watermark(TP, 1, follower)
    follower.truncate_to(1)
    follower.append([SimRecord(1, 2, 0, "Y"), SimRecord(1, 2, 1, "Z")])
    follower.update_high_watermark(3)
    monitor.follower_high_watermark(TP, 1, follower)
    assert [v.kind for v in monitor.violations] == [invariants.COMMITTED_DIFFERS]


def test_a_leader_without_every_committed_record_is_a_violation() -> None:
    leader = _log("leader", "abcd", high_watermark=4)
    short = _log("short", "ab")
    monitor = _Cluster(b0=leader, b1=short).monitor
    monitor.leader_high_watermark(TP, 0, 0, {0}, leader)
    monitor.begins_leading(TP, 0, 1, leader)
    assert monitor.count == 0
    monitor.begins_leading(TP, 1, 2, short)
    (violation,) = monitor.violations
    assert violation.kind == invariants.LEADER_LACKS_COMMITTED


def test_a_broker_leading_a_stale_epoch_may_hold_a_diverged_log() -> None:
    leader = _log("leader", "abcd", epoch=2, high_watermark=4)
    stale = _log("stale", "abXY", epoch=0)  # resumed from a pause on an old image
    monitor = _Cluster(b0=leader, b1=stale).monitor
    monitor.leader_high_watermark(TP, 0, 2, {0}, leader)
    monitor.begins_leading(TP, 1, 1, stale)
    assert monitor.count == 0
    monitor.begins_leading(TP, 1, 3, stale)
    assert [v.kind for v in monitor.violations] == [invariants.COMMITTED_DIFFERS]
