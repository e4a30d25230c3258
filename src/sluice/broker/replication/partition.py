"""One partition replica hosted by this broker: its log and its part in replication.

A replica is the leader or a follower, as the partition state in the metadata says::

                       state names this broker leader (new epoch)
          follower ─────────────────────────────────────────────▶ leader
             ▲  fetches from the leader                              │ appends produced
             │  (broker.replica_fetcher), appends                    │ batches, tracks each
             │  its batches as they are                              │ follower's log end,
             └────────────────────────────────────────────────────── │ moves the high
                       state names another leader (or none)          ▼ watermark, asks for
                                                                       ISR changes

The leader (Kafka's ISR model):

* Each follower fetch names the follower's log end offset (its fetch offset); the
  follower is *caught up* at a fetch that reaches the leader's log end, or that reaches
  what was the leader's log end at its previous fetch (then it was caught up as of that
  earlier fetch).
* The high watermark is the smallest log end offset of the ISR, counting members being
  added or removed by a change not yet written (KIP-497's "maximal ISR"), so it never
  counts on a replica the metadata does not yet hold in sync, nor drops one too soon. A
  follower whose log end the leader has not yet heard of holds the high watermark back.
* A follower outside the ISR whose log end reaches the high watermark and the start of
  the leader's epoch joins it; one in the ISR not caught up for ``replica.lag.time.max.ms``
  leaves it. Both are conditional writes of the partition state (version = Kafka's
  partition epoch), made by :class:`IsrChanges` (``broker.replication.isr``), one at a time per
  partition; a write that loses to a newer state is simply dropped.
* A new leader epoch starts at the log end offset, written to the leader-epoch checkpoint
  at once, so followers can ask where their epochs end (OffsetForLeaderEpoch).

A single node is a cluster of one: its ISR is itself, so the high watermark follows the
log end at once, through the same path.

Who may touch the partition's log (one owner at a time)::

    hosted      the event loop: appends, reads, truncation, retention, checkpoints; a
                worker thread only through what the loop hands it for one job (the
                flusher's duplicated descriptors and checkpoint job, the cleaner's
                plan), inside :meth:`Partition.lent_to_worker_thread`
    detached    nobody on the loop (produce gets NOT_LEADER_OR_FOLLOWER, the follower's
                fetcher lets go, the flusher, retention and the cleaner skip it); once
                every job lent out has come back (:meth:`Partition.wait_until_returned`)
                the deletion owns it: it closes the log in a worker thread and renames
                its directory (``broker.replication.replica_manager``)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from sluice.broker.replication.purgatory import Purgatory
from sluice.cluster.model import PartitionState
from sluice.common import errors
from sluice.common.clock import Clock
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.records.batch import BatchHeader
from sluice.protocol.records.delayed import Delivery
from sluice.storage import AppendResult, PartitionLog

log = logging.getLogger(__name__)

UNKNOWN_OFFSET = -1
"""A follower's log end offset before its first fetch from this leader."""


def log_end_key(topic_partition: TopicPartition) -> Hashable:
    """The purgatory key follower fetches wait on: woken by every append (consumers and
    acks=all producers wait on the partition itself, woken when the high watermark
    moves)."""
    return ("log end", topic_partition)


class IsrChangeSink(Protocol):
    """Where a leader sends the ISR it wants written (``broker.replication.isr.IsrChanges``)."""

    def submit(self, partition: Partition, isr: tuple[int, ...]) -> None: ...


@dataclass
class FollowerState:
    """What the leader knows of one follower, from its fetches."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_log_end_at_last_fetch: int = 0


class Partition:
    def __init__(
        self,
        topic_partition: TopicPartition,
        log: PartitionLog,
        state: PartitionState,
        node_id: int,
        purgatory: Purgatory,
        clock: Clock,
        isr_changes: IsrChangeSink | None = None,
    ) -> None:
        self.topic_partition = topic_partition
        self.log = log
        self.state = state
        self._node_id = node_id
        self._purgatory = purgatory
        self._clock = clock
        self._isr_changes = isr_changes
        self._followers: dict[int, FollowerState] = {}
        self._pending_isr: tuple[int, ...] | None = None
        """An ISR this leader asked to write, from the state at ``_pending_from_version``."""
        self._pending_from_version = -1
        self.detached = False
        """No longer hosted here (deleted, or moved off this broker by a reassignment)."""
        self.dirty = False
        """Appended to since the last fsync (the flusher's work list)."""
        self.last_flush_ms = 0
        """Monotonic time of the last fsync the flusher started."""
        self.last_checkpoint_ms = 0
        """Monotonic time the flusher last wrote this partition's checkpoints."""
        self._lent = 0
        """Jobs on worker threads using the log's files (a flush, a cleaning)."""
        self._returned = asyncio.Event()
        self._returned.set()
        if self.is_leader:
            self._become_leader()
            self._advance_high_watermark()  # alone in the ISR: up to the log end at once

    # ── state ──────────────────────────────────────────────────────────────────────

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self._node_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def has_followers(self) -> bool:
        return len(self.state.replicas) > 1

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The ISR plus members a pending change adds (or has not yet removed)."""
        return frozenset(self.state.isr) | frozenset(self._pending_isr or ())

    def update_state(self, state: PartitionState) -> None:
        """Take a newer partition state from the metadata (or from this leader's own ISR
        write): become leader, follower, or stay, keeping what still holds."""
        current = self.state
        if (state.leader_epoch, state.version) < (current.leader_epoch, current.version):
            log.debug("%s: ignoring an older state %s", self.topic_partition, state)
            return
        was_leader = self.is_leader
        self.state = state
        if self._pending_isr is not None and state.version > self._pending_from_version:
            self._pending_isr = None  # written, or lost to a newer state: decided either way
        if self.is_leader and (not was_leader or state.leader_epoch != current.leader_epoch):
            self._become_leader()
        elif self.is_leader:
            self._keep_followers()
        else:
            self._followers.clear()
            self._pending_isr = None
            if was_leader:
                log.info(
                    "%s: broker %d now follows %d (epoch %d)",
                    self.topic_partition,
                    self._node_id,
                    state.leader,
                    state.leader_epoch,
                )
        # Waiting producers and fetches look again: leadership or the ISR moved.
        self._purgatory.notify(self.topic_partition)
        self._purgatory.notify(log_end_key(self.topic_partition))
        self._advance_high_watermark()

    def _become_leader(self) -> None:
        now = self._clock.monotonic_ms()
        self.log.begin_leader_epoch(self.state.leader_epoch)
        self._followers = {
            replica: FollowerState(
                last_caught_up_ms=now if replica in self.state.isr else 0,
                last_fetch_ms=now,
            )
            for replica in self.state.replicas
            if replica != self._node_id
        }
        self._pending_isr = None
        log.info(
            "%s: broker %d leads at epoch %d from offset %d (ISR %s)",
            self.topic_partition,
            self._node_id,
            self.state.leader_epoch,
            self.log.log_end_offset,
            list(self.state.isr),
        )

    def _keep_followers(self) -> None:
        """Same leader and epoch, other replicas (a reassignment) or ISR: followers that
        remain keep what the leader knows of them."""
        now = self._clock.monotonic_ms()
        self._followers = {
            replica: self._followers.get(replica)
            or FollowerState(last_caught_up_ms=now if replica in self.state.isr else 0)
            for replica in self.state.replicas
            if replica != self._node_id
        }

    @contextlib.contextmanager
    def lent_to_worker_thread(self) -> Iterator[None]:
        """On the event loop, around a job that uses the log's files on a worker thread
        (and what the loop does with its result): a deletion waits until it ends."""
        assert not self.detached, f"{self.topic_partition} is detached"
        self._lent += 1
        self._returned.clear()
        try:
            yield
        finally:
            self._lent -= 1
            if self._lent == 0:
                self._returned.set()

    async def wait_until_returned(self) -> None:
        """Wait until no job lent the log to a worker thread (a detached partition: no
        new one starts, so this ends after one fsync or one cancelled cleaning)."""
        await self._returned.wait()

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Raise unless this replica leads at the epoch the client believes in."""
        if self.detached:
            raise errors.NotLeaderOrFollower(f"{self.topic_partition} is no longer hosted here")
        if not self.is_leader:
            raise errors.NotLeaderOrFollower(
                f"{self.topic_partition} is led by broker {self.state.leader}"
            )
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                raise errors.for_code(errors.ErrorCode.fenced_leader_epoch)(
                    f"{self.topic_partition}: epoch {current_leader_epoch} < {self.leader_epoch}"
                )
            if current_leader_epoch > self.leader_epoch:
                raise errors.for_code(errors.ErrorCode.unknown_leader_epoch)(
                    f"{self.topic_partition}: epoch {current_leader_epoch} > {self.leader_epoch}"
                )

    # ── leader ─────────────────────────────────────────────────────────────────────

    def append(
        self,
        batch: bytearray,
        *,
        acks: int,
        header: BatchHeader | None = None,
        fired_origins: Sequence[int] | None = None,
        parked: Sequence[Delivery] | None = None,
    ) -> AppendResult:
        """Append one validated batch as leader (``header``: its parsed header, if the
        caller has it). Synchronous: appends from pipelined requests happen in the order
        the requests arrived. acks=all is refused with NOT_ENOUGH_REPLICAS while the ISR
        is smaller than min.insync.replicas."""
        self.check_leader()
        if acks == -1:
            self.check_enough_replicas(errors.NotEnoughReplicas)
        result = self.log.append(
            batch,
            leader_epoch=self.leader_epoch,
            header=header,
            fired_origins=fired_origins,
            parked=parked,
        )
        if not result.duplicate:
            self.dirty = True
            if self.has_followers:
                self._purgatory.notify(log_end_key(self.topic_partition))
            self._advance_high_watermark()
        return result

    def append_marker(
        self, *, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int
    ) -> AppendResult:
        """Write a transaction marker as leader (WriteTxnMarkers); markers are written
        with acks=all, so the ISR must meet min.insync.replicas."""
        self.check_leader()
        self.check_enough_replicas(errors.NotEnoughReplicas)
        result = self.log.append_marker(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            committed=committed,
            coordinator_epoch=coordinator_epoch,
            leader_epoch=self.leader_epoch,
        )
        self.dirty = True
        if self.has_followers:
            self._purgatory.notify(log_end_key(self.topic_partition))
        self._advance_high_watermark()
        return result

    def check_enough_replicas(self, error: type[errors.KafkaError]) -> None:
        """Raise ``error`` when the ISR is smaller than min.insync.replicas."""
        min_insync = self.log.config.min_insync_replicas
        if len(self.state.isr) < min_insync:
            raise error(
                f"{self.topic_partition} has {len(self.state.isr)} in-sync replica(s), "
                f"min.insync.replicas is {min_insync}"
            )

    def record_follower_fetch(self, replica: int, fetch_offset: int) -> None:
        """A follower fetched from ``fetch_offset`` (so its log ends there): note whether
        it is caught up, move the high watermark, and ask for it to join the ISR when it
        qualifies. Raises NOT_LEADER_OR_FOLLOWER for a broker that is not a replica."""
        follower = self._followers.get(replica)
        if follower is None:
            raise errors.NotLeaderOrFollower(
                f"broker {replica} is not a replica of {self.topic_partition}"
            )
        now = self._clock.monotonic_ms()
        leader_log_end = self.log.log_end_offset
        if fetch_offset >= leader_log_end:
            follower.last_caught_up_ms = now
        elif fetch_offset >= follower.leader_log_end_at_last_fetch:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.leader_log_end_at_last_fetch = leader_log_end
        follower.last_fetch_ms = now
        follower.log_end_offset = fetch_offset
        self._advance_high_watermark()
        if (
            replica not in self.maximal_isr
            and fetch_offset >= self.log.high_watermark
            and fetch_offset >= self.log.leader_epoch_cache.start_offset_of(self.leader_epoch)
        ):
            self._propose_isr((*self.state.isr, replica))

    def shrink_isr_if_lagging(self, lag_time_max_ms: int) -> None:
        """Ask for the ISR without followers not caught up for ``lag_time_max_ms``."""
        if not self.is_leader or self._pending_isr is not None:
            return
        now = self._clock.monotonic_ms()
        lagging = {
            replica
            for replica in self.state.isr
            if replica != self._node_id
            and (follower := self._followers.get(replica)) is not None
            and now - follower.last_caught_up_ms > lag_time_max_ms
        }
        if lagging:
            log.info(
                "%s: followers %s have not caught up for %d ms; leaving the ISR",
                self.topic_partition,
                sorted(lagging),
                lag_time_max_ms,
            )
            self._propose_isr(tuple(r for r in self.state.isr if r not in lagging))

    def _propose_isr(self, isr: tuple[int, ...]) -> None:
        if self._isr_changes is None or self._pending_isr is not None:
            return
        self._pending_isr = isr
        self._pending_from_version = self.state.version
        self._isr_changes.submit(self, isr)

    def isr_change_failed(self, from_version: int) -> None:
        """The ISR write made from ``from_version`` did not happen: allow another."""
        if self._pending_from_version == from_version:
            self._pending_isr = None
            self._advance_high_watermark()

    def _advance_high_watermark(self) -> None:
        if not self.is_leader:
            return
        new_high_watermark = self.log.log_end_offset
        # maximal_isr without building it (called on every append): the ISR alone
        # while no change is pending.
        pending = self._pending_isr
        for replica in self.state.isr if not pending else self.maximal_isr:
            if replica == self._node_id:
                continue
            follower = self._followers.get(replica)
            if follower is None or follower.log_end_offset == UNKNOWN_OFFSET:
                return  # not heard from since this leader began: wait for it
            new_high_watermark = min(new_high_watermark, follower.log_end_offset)
        if new_high_watermark > self.log.high_watermark:
            self.log.update_high_watermark(new_high_watermark)
            self._purgatory.notify(self.topic_partition)

    def acks_all_outcome(self, end_offset: int, leader_epoch: int) -> KafkaError | bool:
        """For an acks=all append made at ``leader_epoch`` and ending before
        ``end_offset``: False while it waits for the ISR; True once committed with at
        least min.insync.replicas in sync; else the error to answer
        (NOT_LEADER_OR_FOLLOWER when leadership moved meanwhile: the new leader may not
        have it; NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below
        min.insync.replicas before it was committed)."""
        if self.detached or not self.is_leader or self.leader_epoch != leader_epoch:
            return errors.NotLeaderOrFollower(
                f"{self.topic_partition}: leadership moved (epoch {self.leader_epoch}, "
                f"leader {self.state.leader}) before the append at epoch {leader_epoch} "
                "was replicated"
            )
        if self.log.high_watermark < end_offset:
            return False
        try:
            self.check_enough_replicas(errors.NotEnoughReplicasAfterAppend)
        except errors.NotEnoughReplicasAfterAppend as e:
            return e
        return True

    # ── follower ───────────────────────────────────────────────────────────────────

    def append_as_follower(self, records: bytes | memoryview, leader_high_watermark: int) -> None:
        """Append batches fetched from the leader as they are, and take the leader's high
        watermark (as far as this log reaches)."""
        assert not self.is_leader, "a leader appends produced batches, not fetched ones"
        if len(records):
            self.log.append_as_follower(records)
            self.dirty = True
        self.log.update_high_watermark(min(leader_high_watermark, self.log.log_end_offset))


async def settled_acks_all(
    purgatory: Purgatory, hosted: Partition, end_offset: int, leader_epoch: int, timeout_s: float
) -> KafkaError | bool:
    """Wait until the acks=all append to ``hosted`` that ends before ``end_offset``, made
    at ``leader_epoch``, is settled, or ``timeout_s`` passes; its
    :meth:`Partition.acks_all_outcome` then (False: it timed out waiting for the ISR)."""
    await purgatory.wait_until(
        [hosted.topic_partition],
        lambda: hosted.acks_all_outcome(end_offset, leader_epoch) is not False,
        timeout_s,
    )
    return hosted.acks_all_outcome(end_offset, leader_epoch)
