"""What a partition's replica decides as leader (Kafka's ISR model), without I/O.

A :class:`LeaderCore` holds the partition state the metadata last gave this replica and
what the leader knows of each follower from its fetches. It is told of new states, of
follower fetches and of the time (``now_ms``, a monotonic clock in milliseconds that the
caller reads), and answers with decisions: the high watermark to set, the ISR to
propose, whether an acks=all append is settled. The broker's ``Partition`` runs it on
the event loop and carries the decisions out on the log, the purgatory and the ISR
writer; a simulator can run it on simulated time.

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
  leaves it. One proposed change at a time: another waits until the metadata holds a
  newer state, or the proposal failed.
* A replica leads only under a state written after this broker registered (its broker
  epoch): a state written before is about its previous run, which may have lost an
  unsynced tail. Leading it at that old epoch would make the followers, fetching at the
  same epoch, truncate what they have to the shorter log; the replica waits instead for
  the controller, which gives such a partition a new leader epoch (and another leader
  when a replica that stayed up is in sync).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sluice.cluster.model import NOT_ORDERED, PartitionState
from sluice.common import errors
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition

UNKNOWN_OFFSET = -1
"""A follower's log end offset before its first fetch from this leader."""


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower, from its fetches."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_log_end_at_last_fetch: int = 0


class Transition(enum.Enum):
    """What a new partition state did to this replica."""

    IGNORED = "ignored"
    """Older than the state held: nothing changed."""
    LEADS = "leads"
    """Leads at a new epoch: the caller begins the epoch in the log, then calls
    :meth:`LeaderCore.begin_leading`."""
    STILL_LEADS = "still leads"
    """Same leader and epoch (another ISR or replica set): followers kept."""
    FOLLOWS = "follows"
    """Led before, follows now."""
    STILL_FOLLOWS = "still follows"


class LeaderCore:
    def __init__(
        self,
        topic_partition: TopicPartition,
        node_id: int,
        state: PartitionState,
        *,
        changes_isr: bool,
        registered_at: int = NOT_ORDERED,
    ) -> None:
        """``changes_isr``: whether this leader may propose ISR changes (a broker of a
        cluster; a single node's ISR is itself). ``registered_at``: this broker's epoch
        (when it registered, on the scale of the states' ``written_at``), or NOT_ORDERED
        where the store does not order them."""
        self.topic_partition = topic_partition
        self.node_id = node_id
        self.registered_at = registered_at
        self.state = state
        self._leads = self._leads_under(state)
        self._changes_isr = changes_isr
        self.followers: dict[int, FollowerState] = {}
        self.pending_isr: tuple[int, ...] | None = None
        """An ISR this leader proposed, from the state at ``pending_from_version``."""
        self.pending_from_version = -1
        self._epoch_start_offset = 0

    # ── state ──────────────────────────────────────────────────────────────────────

    @property
    def is_leader(self) -> bool:
        return self._leads

    def _leads_under(self, state: PartitionState) -> bool:
        if state.leader != self.node_id:
            return False
        if NOT_ORDERED in (self.registered_at, state.written_at):
            return True  # a store that does not order them (one node): nothing to tell
        return state.written_at >= self.registered_at

    def registered(self, epoch: int) -> None:
        """This broker registered anew (a new session): states written before it are no
        longer its to lead (what it knew of its followers goes with the leadership)."""
        self.registered_at = epoch
        self._leads = self._leads_under(self.state)
        if not self._leads:
            self.followers.clear()
            self.pending_isr = None

    @property
    def named_leader_of_a_previous_run(self) -> bool:
        """The state names this broker leader, but was written before it registered:
        it neither leads nor follows until the controller decides again."""
        return self.state.leader == self.node_id and not self._leads

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def has_followers(self) -> bool:
        return len(self.state.replicas) > 1

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The ISR plus members a pending change adds (or has not yet removed)."""
        return frozenset(self.state.isr) | frozenset(self.pending_isr or ())

    def update_state(self, state: PartitionState, now_ms: int) -> Transition:
        """Take a newer partition state from the metadata (or from this leader's own ISR
        change): lead, follow, or stay, keeping what still holds."""
        current = self.state
        if (state.leader_epoch, state.version) < (current.leader_epoch, current.version):
            return Transition.IGNORED
        was_leader = self.is_leader
        self.state = state
        self._leads = self._leads_under(state)
        if self.pending_isr is not None and state.version > self.pending_from_version:
            self.pending_isr = None  # written, or lost to a newer state: decided either way
        if self.is_leader and (not was_leader or state.leader_epoch != current.leader_epoch):
            return Transition.LEADS
        if self.is_leader:
            self.followers = {
                replica: self.followers.get(replica)
                or FollowerState(last_caught_up_ms=now_ms if replica in state.isr else 0)
                for replica in state.replicas
                if replica != self.node_id
            }
            return Transition.STILL_LEADS
        self.followers.clear()
        self.pending_isr = None
        return Transition.FOLLOWS if was_leader else Transition.STILL_FOLLOWS

    def begin_leading(self, now_ms: int, epoch_start_offset: int) -> None:
        """This replica leads at the state's epoch, which starts at ``epoch_start_offset``
        of its log: followers in the ISR count as caught up now."""
        self._epoch_start_offset = epoch_start_offset
        self.followers = {
            replica: FollowerState(
                last_caught_up_ms=now_ms if replica in self.state.isr else 0,
                last_fetch_ms=now_ms,
            )
            for replica in self.state.replicas
            if replica != self.node_id
        }
        self.pending_isr = None

    # ── checks ─────────────────────────────────────────────────────────────────────

    def check_leader(self, current_leader_epoch: int = -1, *, detached: bool = False) -> None:
        """Raise unless this replica leads at the epoch the client believes in."""
        if detached:
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

    def check_enough_replicas(self, min_insync: int, error: type[KafkaError]) -> None:
        """Raise ``error`` when the ISR is smaller than ``min_insync``."""
        if len(self.state.isr) < min_insync:
            raise error(
                f"{self.topic_partition} has {len(self.state.isr)} in-sync replica(s), "
                f"min.insync.replicas is {min_insync}"
            )

    def under_min_insync(self, min_insync: int) -> bool:
        """Whether the ISR is smaller than ``min_insync`` (never counted above the
        replicas, Kafka's effective min ISR)."""
        return len(self.state.isr) < min(min_insync, len(self.state.replicas))

    # ── decisions ──────────────────────────────────────────────────────────────────

    def high_watermark_to_set(
        self, log_end_offset: int, high_watermark: int, min_insync: int = 1
    ) -> int | None:
        """The high watermark the leader's log moves to (the smallest log end of the
        maximal ISR), or None when it does not move (a follower not heard from since
        this leader began holds it back, or the ISR is below ``min_insync``, the
        topic's min.insync.replicas, at most the replicas: KIP-966's strict min ISR,
        which lets a replica that leaves such an ISR be an eligible leader replica,
        sure to have every committed record)."""
        if not self.is_leader or self.under_min_insync(min_insync):
            return None
        new_high_watermark = log_end_offset
        # maximal_isr without building it (called on every append): the ISR alone
        # while no change is pending.
        pending = self.pending_isr
        for replica in self.state.isr if not pending else self.maximal_isr:
            if replica == self.node_id:
                continue
            follower = self.followers.get(replica)
            if follower is None or follower.log_end_offset == UNKNOWN_OFFSET:
                return None  # not heard from since this leader began: wait for it
            new_high_watermark = min(new_high_watermark, follower.log_end_offset)
        return new_high_watermark if new_high_watermark > high_watermark else None

    def record_follower_fetch(
        self, replica: int, fetch_offset: int, log_end_offset: int, now_ms: int
    ) -> None:
        """A follower fetched from ``fetch_offset`` (so its log ends there): note whether
        it is caught up. Raises NOT_LEADER_OR_FOLLOWER for a broker that is not a
        replica. The caller then moves the high watermark and asks :meth:`join_proposal`."""
        follower = self.followers.get(replica)
        if follower is None:
            raise errors.NotLeaderOrFollower(
                f"broker {replica} is not a replica of {self.topic_partition}"
            )
        if fetch_offset >= log_end_offset:
            follower.last_caught_up_ms = now_ms
        elif fetch_offset >= follower.leader_log_end_at_last_fetch:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.leader_log_end_at_last_fetch = log_end_offset
        follower.last_fetch_ms = now_ms
        follower.log_end_offset = fetch_offset

    def join_proposal(
        self, replica: int, fetch_offset: int, high_watermark: int
    ) -> tuple[int, ...] | None:
        """The ISR with ``replica`` added, proposed now, when its log end reaches the high
        watermark and the start of this leader's epoch; else None."""
        if (
            replica not in self.maximal_isr
            and fetch_offset >= high_watermark
            and fetch_offset >= self._epoch_start_offset
        ):
            return self._propose((*self.state.isr, replica))
        return None

    def lagging_followers(self, lag_time_max_ms: int, now_ms: int) -> frozenset[int]:
        """Followers in the ISR not caught up for ``lag_time_max_ms`` (none while a
        proposed change is pending)."""
        if not self.is_leader or self.pending_isr is not None:
            return frozenset()
        return frozenset(
            replica
            for replica in self.state.isr
            if replica != self.node_id
            and (follower := self.followers.get(replica)) is not None
            and now_ms - follower.last_caught_up_ms > lag_time_max_ms
        )

    def shrink_proposal(self, lagging: frozenset[int]) -> tuple[int, ...] | None:
        """The ISR without ``lagging``, proposed now (None if a change is pending)."""
        return self._propose(tuple(r for r in self.state.isr if r not in lagging))

    def _propose(self, isr: tuple[int, ...]) -> tuple[int, ...] | None:
        if not self._changes_isr or self.pending_isr is not None:
            return None
        self.pending_isr = isr
        self.pending_from_version = self.state.version
        return isr

    def isr_change_failed(self, from_version: int) -> bool:
        """The ISR change proposed from ``from_version`` did not happen: allow another.
        True when that was the pending one (the high watermark may move again)."""
        if self.pending_from_version != from_version:
            return False
        self.pending_isr = None
        return True

    def acks_all_outcome(
        self,
        end_offset: int,
        leader_epoch: int,
        high_watermark: int,
        min_insync: int,
        *,
        detached: bool = False,
    ) -> KafkaError | bool:
        """For an acks=all append made at ``leader_epoch`` and ending before
        ``end_offset``: False while it waits for the ISR; True once committed with at
        least ``min_insync`` replicas in sync; else the error to answer
        (NOT_LEADER_OR_FOLLOWER when leadership moved meanwhile: the new leader may not
        have it; NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below
        min.insync.replicas before it was committed)."""
        if detached or not self.is_leader or self.leader_epoch != leader_epoch:
            return errors.NotLeaderOrFollower(
                f"{self.topic_partition}: leadership moved (epoch {self.leader_epoch}, "
                f"leader {self.state.leader}) before the append at epoch {leader_epoch} "
                "was replicated"
            )
        if high_watermark < end_offset:
            if self.under_min_insync(min_insync):
                # The high watermark stays while the ISR is below min.insync.replicas
                # (strict min ISR): answer now, as when the ISR shrank after the high
                # watermark passed it, rather than hold the producer until it times out
                # (Kafka holds it).
                return errors.NotEnoughReplicasAfterAppend(
                    f"{self.topic_partition} has {len(self.state.isr)} in-sync replica(s), "
                    f"min.insync.replicas is {min_insync}"
                )
            return False
        try:
            self.check_enough_replicas(min_insync, errors.NotEnoughReplicasAfterAppend)
        except errors.NotEnoughReplicasAfterAppend as e:
            return e
        return True
