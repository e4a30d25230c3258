"""One partition replica hosted by this broker: its log and its part in replication.

A replica is the leader or a follower, as the partition state in the metadata says::

                       state names this broker leader (new epoch)
          follower ─────────────────────────────────────────────▶ leader
             ▲  fetches from the leader                              │ appends produced
             │  (replica_fetcher), appends                           │ batches, tracks each
             │  its batches as they are                              │ follower's log end,
             └────────────────────────────────────────────────────── │ moves the high
                       state names another leader (or none)          ▼ watermark, asks for
                                                                       ISR changes

The leader's decisions (Kafka's ISR model: who is caught up, the high watermark, ISR
joins and departures, acks=all outcomes) are :class:`sluice.replication.leader.LeaderCore`'s,
without I/O; this class carries them out: it appends, moves the log's high watermark,
wakes the purgatory, and hands proposed ISRs to :class:`IsrChanges`
(``broker.replication.isr``), which writes them one at a time per partition (a write that
loses to a newer state is simply dropped). A new leader epoch starts at the log end
offset, written to the leader-epoch checkpoint at once, so followers can ask where their
epochs end (OffsetForLeaderEpoch).

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
from typing import Protocol

from sluice.broker.replication.purgatory import Purgatory
from sluice.cluster.model import NOT_ORDERED, PartitionState
from sluice.common import errors
from sluice.common.clock import Clock
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.records.batch import BatchHeader
from sluice.protocol.records.delayed import Delivery
from sluice.replication.leader import LeaderCore, Transition
from sluice.storage import AppendResult, PartitionLog

log = logging.getLogger(__name__)


def log_end_key(topic_partition: TopicPartition) -> Hashable:
    """The purgatory key follower fetches wait on: woken by every append (consumers and
    acks=all producers wait on the partition itself, woken when the high watermark
    moves)."""
    return ("log end", topic_partition)


class IsrChangeSink(Protocol):
    """Where a leader sends the ISR it wants written (``broker.replication.isr.IsrChanges``)."""

    def submit(self, partition: Partition, isr: tuple[int, ...]) -> None: ...


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
        registered_at: int = NOT_ORDERED,
    ) -> None:
        """``registered_at``: this broker's epoch (it leads no state written before it
        registered: :class:`LeaderCore`)."""
        self.topic_partition = topic_partition
        self.log = log
        self._node_id = node_id
        self._purgatory = purgatory
        self._clock = clock
        self._isr_changes = isr_changes
        self.core = LeaderCore(
            topic_partition,
            node_id,
            state,
            changes_isr=isr_changes is not None,
            registered_at=registered_at,
        )
        """The leader's decisions (no I/O): this partition carries them out."""
        self._waits_under_epoch: int | None = None
        """The leader epoch of the state of a previous run this replica waits under (it
        was said once in the log), or None."""
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
            self._begin_leading()
            self._advance_high_watermark()  # alone in the ISR: up to the log end at once
        self._say_if_waiting()

    # ── state ──────────────────────────────────────────────────────────────────────

    @property
    def state(self) -> PartitionState:
        return self.core.state

    @property
    def is_leader(self) -> bool:
        return self.core.is_leader

    @property
    def leader_epoch(self) -> int:
        return self.core.state.leader_epoch

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def has_followers(self) -> bool:
        return self.core.has_followers

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The ISR plus members a pending change adds (or has not yet removed)."""
        return self.core.maximal_isr

    def update_state(self, state: PartitionState) -> None:
        """Take a newer partition state from the metadata (or from this leader's own ISR
        write): become leader, follower, or stay, keeping what still holds."""
        transition = self.core.update_state(state, self._clock.monotonic_ms())
        if transition is Transition.IGNORED:
            log.debug("%s: ignoring an older state %s", self.topic_partition, state)
            return
        if transition is Transition.LEADS:
            self._begin_leading()
        elif transition is Transition.FOLLOWS and not self.core.named_leader_of_a_previous_run:
            log.debug(
                "%s: broker %d now follows %d (epoch %d)",
                self.topic_partition,
                self._node_id,
                state.leader,
                state.leader_epoch,
            )
        self._say_if_waiting()
        self._look_again()

    def registered(self, epoch: int) -> None:
        """This broker registered with broker epoch ``epoch`` (at start, or again after
        its session was lost): it leads no state written before (a state of its previous
        run waits for the controller), and leads again a state it had set aside before
        registering when the store does not order writes and registrations."""
        was_leader = self.is_leader
        self.core.registered(epoch)
        if self.is_leader and not was_leader:
            self._begin_leading()
        self._say_if_waiting()
        if self.is_leader != was_leader:
            self._look_again()

    def _say_if_waiting(self) -> None:
        """Say in the log, once per state, that this replica waits for the controller:
        the state naming it leader was written before this broker registered."""
        if not self.core.named_leader_of_a_previous_run:
            self._waits_under_epoch = None
            return
        epoch = self.core.state.leader_epoch
        if self._waits_under_epoch != epoch:
            self._waits_under_epoch = epoch
            log.debug(
                "%s: the state naming broker %d leader (epoch %d) was written before this "
                "broker registered: it waits for the controller to decide again",
                self.topic_partition,
                self._node_id,
                epoch,
            )

    def _look_again(self) -> None:
        """Waiting producers and fetches look again: leadership or the ISR moved."""
        self._purgatory.notify(self.topic_partition)
        self._purgatory.notify(log_end_key(self.topic_partition))
        self._advance_high_watermark()

    def _begin_leading(self) -> None:
        state = self.core.state
        self.log.begin_leader_epoch(state.leader_epoch)
        self.core.begin_leading(
            self._clock.monotonic_ms(),
            self.log.leader_epoch_cache.start_offset_of(state.leader_epoch),
        )
        # Per partition at DEBUG; the replica manager sums each change up in one line.
        log.debug(
            "%s: broker %d leads at epoch %d from offset %d (ISR %s)",
            self.topic_partition,
            self._node_id,
            state.leader_epoch,
            self.log.log_end_offset,
            list(state.isr),
        )

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
        self.core.check_leader(current_leader_epoch, detached=self.detached)

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
        self.core.check_enough_replicas(self.log.config.min_insync_replicas, error)

    def record_follower_fetch(self, replica: int, fetch_offset: int) -> None:
        """A follower fetched from ``fetch_offset`` (so its log ends there): note whether
        it is caught up, move the high watermark, and ask for it to join the ISR when it
        qualifies. Raises NOT_LEADER_OR_FOLLOWER for a broker that is not a replica."""
        core = self.core
        core.record_follower_fetch(
            replica, fetch_offset, self.log.log_end_offset, self._clock.monotonic_ms()
        )
        self._advance_high_watermark()
        isr = core.join_proposal(replica, fetch_offset, self.log.high_watermark)
        if isr is not None:
            self._submit_isr(isr)

    def shrink_isr_if_lagging(self, lag_time_max_ms: int) -> None:
        """Ask for the ISR without followers not caught up for ``lag_time_max_ms``."""
        lagging = self.core.lagging_followers(lag_time_max_ms, self._clock.monotonic_ms())
        if lagging:
            log.info(
                "%s: followers %s have not caught up for %d ms; leaving the ISR",
                self.topic_partition,
                sorted(lagging),
                lag_time_max_ms,
            )
            isr = self.core.shrink_proposal(lagging)
            if isr is not None:
                self._submit_isr(isr)

    def _submit_isr(self, isr: tuple[int, ...]) -> None:
        assert self._isr_changes is not None  # the core proposes only when there is one
        self._isr_changes.submit(self, isr)

    def isr_change_failed(self, from_version: int) -> None:
        """The ISR write made from ``from_version`` did not happen: allow another."""
        if self.core.isr_change_failed(from_version):
            self._advance_high_watermark()

    def _advance_high_watermark(self) -> None:
        log_ = self.log
        high_watermark = self.core.high_watermark_to_set(
            log_.log_end_offset, log_.high_watermark, log_.config.min_insync_replicas
        )
        if high_watermark is not None:
            log_.update_high_watermark(high_watermark)
            self._purgatory.notify(self.topic_partition)

    def acks_all_outcome(self, end_offset: int, leader_epoch: int) -> KafkaError | bool:
        """For an acks=all append made at ``leader_epoch`` and ending before
        ``end_offset``: False while it waits for the ISR; True once committed with
        min.insync.replicas in sync; else the error to answer
        (:meth:`LeaderCore.acks_all_outcome`)."""
        return self.core.acks_all_outcome(
            end_offset,
            leader_epoch,
            self.log.high_watermark,
            self.log.config.min_insync_replicas,
            detached=self.detached,
        )

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
