"""Invariants of replication checked while a simulation runs, not only on its final
history: the brokers tell the :class:`Monitor` what they decide as they decide it, and
the monitor holds each decision against what it saw (its own record of follower
fetches, the committed log so far, every replica's log) and notes each breach with the
simulated time. A breach is a :class:`Violation`; a run with any is an anomaly.

    two-leaders-acknowledge   two brokers acknowledged writes of one partition at the
                              same leader epoch
    high-watermark-decreased  a leader's high watermark went down within its epoch
    high-watermark-above-isr  a leader moved its high watermark past the log end of an
                              ISR member it counted (its last fetch in this epoch says
                              so), or past its own log end
    committed-differs         a record of a replica differs from the committed record at
                              its offset (the leaders' logs below their high watermarks
                              make up the committed log), below the replica's high
                              watermark or below the offset of a fetch of it that the
                              leader took (a fetch the leader takes says the follower's
                              log matches the leader's up to there); checked whenever a
                              high watermark moves and a leader takes a fetch. A replica
                              that has not fetched since it diverged may differ: it has
                              yet to truncate
    leader-lacks-committed    a broker began leading an epoch newer than every epoch that
                              committed records, without every committed record (a
                              leader elected from the ISR has them all: the high
                              watermark never passed an ISR member's log end). A broker
                              that resumes from a pause may lead an older epoch from a
                              stale image, short: it commits nothing there, which the
                              other invariants hold it to
    offsets-nonmonotonic      an acknowledged offset breaks a producer's order in the
                              partition (a later sequence at a lower offset), or one
                              sequence of a producer was acknowledged at two offsets, or
                              one offset to two records

The last one is idempotence's promise seen from the producers' side: whatever the
retries, a sequence has one offset and sequences keep their order."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sluice.common.ids import TopicPartition
from sluice.sim.disk import SimLog, SimRecord

TWO_LEADERS_ACKNOWLEDGE = "two-leaders-acknowledge"
HIGH_WATERMARK_DECREASED = "high-watermark-decreased"
HIGH_WATERMARK_ABOVE_ISR = "high-watermark-above-isr"
COMMITTED_DIFFERS = "committed-differs"
LEADER_LACKS_COMMITTED = "leader-lacks-committed"
OFFSETS_NONMONOTONIC = "offsets-nonmonotonic"

VIOLATIONS_KEPT_MAX = 20
"""Violations a monitor keeps (the first ones; all are counted)."""


@dataclass(frozen=True, slots=True)
class Violation:
    at_ms: int
    kind: str
    partition: TopicPartition
    description: str

    def __str__(self) -> str:
        return (
            f"at {self.at_ms} ms: {self.kind} in {self.partition.topic}-"
            f"{self.partition.partition}: {self.description}"
        )


class Monitor:
    def __init__(
        self,
        now_ms: Callable[[], int],
        replica_logs: Callable[[TopicPartition], dict[int, SimLog]],
    ) -> None:
        self._now_ms = now_ms
        self._replica_logs = replica_logs
        """Every replica's log of a partition, by broker."""
        self.violations: list[Violation] = []
        self.count = 0
        self._acknowledger: dict[tuple[TopicPartition, int], int] = {}
        """(partition, leader epoch) → the broker that acknowledged writes at it."""
        self._high_watermarks: dict[tuple[TopicPartition, int, int], int] = {}
        """(partition, leader, leader epoch) → the leader's high watermark."""
        self._fetched: dict[tuple[TopicPartition, int, int], dict[int, int]] = {}
        """(partition, leader, leader epoch) → follower → the log end of its last fetch."""
        self._committed: dict[TopicPartition, list[SimRecord]] = {}
        self._committing_epoch: dict[TopicPartition, int] = {}
        """partition → the newest leader epoch whose leader extended the committed log."""
        self._checked: dict[tuple[TopicPartition, int], int] = {}
        """(partition, replica) → the offset below which its log matched the committed."""
        self._sequences: dict[tuple[TopicPartition, int, int], tuple[list[int], list[int]]] = {}
        """(partition, producer id) → its acknowledged sequences, sorted, and offsets."""
        self._offset_holds: dict[TopicPartition, dict[int, tuple[int, int, int]]] = {}
        """partition → acknowledged offset → (producer id, sequence)."""
        self.acknowledgements: list[tuple[int, TopicPartition, int, int, int]] = []
        """Every acknowledgement: (time, partition, leader, leader epoch, offset)."""

    def _violated(self, kind: str, partition: TopicPartition, description: str) -> None:
        self.count += 1
        if len(self.violations) < VIOLATIONS_KEPT_MAX:
            self.violations.append(Violation(self._now_ms(), kind, partition, description))

    # ── what the brokers tell ──────────────────────────────────────────────────────

    def begins_leading(
        self, partition: TopicPartition, leader: int, epoch: int, log: SimLog
    ) -> None:
        """``leader`` begins leading ``epoch`` with ``log``."""
        if epoch <= self._committing_epoch.get(partition, -1):
            return  # a stale epoch (a broker resuming on an old image): it may diverge
        committed = len(self._committed.get(partition, ()))
        if log.log_end_offset < committed:
            self._violated(
                LEADER_LACKS_COMMITTED,
                partition,
                f"broker {leader} leads epoch {epoch} with a log ending at "
                f"{log.log_end_offset}, short of the {committed} committed records (its "
                f"machine crashes took {log.lost_in_crashes} unsynced records)",
            )
        self._check_committed(partition, leader, log, committed)

    def follower_fetched(
        self, partition: TopicPartition, leader: int, epoch: int, follower: int, offset: int
    ) -> None:
        """The leader of ``epoch`` took a fetch of ``follower`` from ``offset``."""
        self._fetched.setdefault((partition, leader, epoch), {})[follower] = offset
        log = self._replica_logs(partition).get(follower)
        if log is not None:
            self._check_committed(partition, follower, log, offset)

    def leader_high_watermark(
        self,
        partition: TopicPartition,
        leader: int,
        epoch: int,
        isr: Iterable[int],
        log: SimLog,
    ) -> None:
        """The leader of ``epoch`` moved its high watermark on ``log``, counting ``isr``."""
        high_watermark = log.high_watermark
        key = (partition, leader, epoch)
        before = self._high_watermarks.get(key, 0)
        if high_watermark < before:
            self._violated(
                HIGH_WATERMARK_DECREASED,
                partition,
                f"leader {leader} at epoch {epoch} moved its high watermark from {before} "
                f"down to {high_watermark}",
            )
        self._high_watermarks[key] = high_watermark
        fetched = self._fetched.get(key, {})
        for member in sorted(isr):
            # A member not heard from in this epoch may have nothing yet.
            end = log.log_end_offset if member == leader else fetched.get(member, 0)
            if high_watermark > end:
                self._violated(
                    HIGH_WATERMARK_ABOVE_ISR,
                    partition,
                    f"leader {leader} at epoch {epoch} moved its high watermark to "
                    f"{high_watermark}, past the log end {end} of ISR member {member}",
                )
        if high_watermark > len(self._committed.get(partition, ())):
            self._committing_epoch[partition] = max(
                epoch, self._committing_epoch.get(partition, -1)
            )
        self._check_committed(partition, leader, log, high_watermark, extend=True)
        for replica, replica_log in sorted(self._replica_logs(partition).items()):
            if replica != leader:
                below = max(replica_log.high_watermark, fetched.get(replica, 0))
                self._check_committed(partition, replica, replica_log, below)

    def follower_high_watermark(self, partition: TopicPartition, replica: int, log: SimLog) -> None:
        """A follower took the leader's high watermark with what it fetched."""
        self._check_committed(partition, replica, log, log.high_watermark)

    def acknowledged(
        self,
        partition: TopicPartition,
        leader: int,
        epoch: int,
        offset: int,
        producer_id: int,
        sequence: int,
        producer_epoch: int = 0,
    ) -> None:
        """``leader`` acknowledged an acks=all write appended at ``epoch`` (a record of
        ``producer_id`` at ``producer_epoch`` with ``sequence``; a transaction marker has
        sequence -1 and is checked only for the leader that acknowledged it)."""
        self.acknowledgements.append((self._now_ms(), partition, leader, epoch, offset))
        acknowledger = self._acknowledger.setdefault((partition, epoch), leader)
        if acknowledger != leader:
            self._violated(
                TWO_LEADERS_ACKNOWLEDGE,
                partition,
                f"brokers {acknowledger} and {leader} both acknowledged writes at leader "
                f"epoch {epoch} (offset {offset})",
            )
        holds = self._offset_holds.setdefault(partition, {})
        record = holds.setdefault(offset, (producer_id, producer_epoch, sequence))
        if record != (producer_id, producer_epoch, sequence):
            self._violated(
                OFFSETS_NONMONOTONIC,
                partition,
                f"offset {offset} acknowledged for producer {record[0]} epoch {record[1]} "
                f"sequence {record[2]} and for producer {producer_id} epoch {producer_epoch} "
                f"sequence {sequence}",
            )
        if sequence < 0:
            return  # a marker: no sequence to order
        # Sequences start again at 0 with each producer epoch (transaction version 2
        # bumps it at every transaction's end).
        sequences, offsets = self._sequences.setdefault(
            (partition, producer_id, producer_epoch), ([], [])
        )
        at = bisect.bisect_left(sequences, sequence)
        if at < len(sequences) and sequences[at] == sequence:
            if offsets[at] != offset:
                self._violated(
                    OFFSETS_NONMONOTONIC,
                    partition,
                    f"producer {producer_id} sequence {sequence} acknowledged at offsets "
                    f"{offsets[at]} and {offset}",
                )
            return
        if (at > 0 and offsets[at - 1] >= offset) or (at < len(offsets) and offsets[at] <= offset):
            neighbour = at - 1 if at > 0 and offsets[at - 1] >= offset else at
            self._violated(
                OFFSETS_NONMONOTONIC,
                partition,
                f"producer {producer_id} sequence {sequence} acknowledged at offset {offset}, "
                f"sequence {sequences[neighbour]} at offset {offsets[neighbour]}",
            )
        sequences.insert(at, sequence)
        offsets.insert(at, offset)

    # ── the committed log ──────────────────────────────────────────────────────────

    def _check_committed(
        self,
        partition: TopicPartition,
        replica: int,
        log: SimLog,
        below: int,
        *,
        extend: bool = False,
    ) -> None:
        """The records of ``log`` below ``below`` not yet checked against the committed
        log (a leader's, below its high watermark, extend it)."""
        committed = self._committed.setdefault(partition, [])
        key = (partition, replica)
        checked = min(self._checked.get(key, 0), log.take_dropped_from())
        below = min(below, log.log_end_offset)
        end = min(below, len(committed))
        records = log.records
        for offset in range(checked, end):
            if records[offset] != committed[offset]:
                self._violated(
                    COMMITTED_DIFFERS,
                    partition,
                    f"replica {replica} holds {records[offset]} at offset {offset} (checked "
                    f"below {below}, its high watermark {log.high_watermark}); committed "
                    f"there: {committed[offset]}",
                )
                break
        if extend and below > len(committed):
            committed.extend(records[len(committed) : below])
            end = below
        self._checked[key] = max(checked, end)
