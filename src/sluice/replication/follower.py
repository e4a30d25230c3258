"""A follower's decisions, for the partitions it copies from one leader.

:class:`FollowerCore` holds the partitions followed from one leader and decides each
round of the fetcher (`sluice.broker.replication.replica_fetcher`, which owns the
connection, sends the requests and carries out the commands on the logs)::

    follow(), or a new leader epoch ──▶ TRUNCATING ──EpochQuery (latest epoch here)───────┐
                                          ▲        on_epoch_answers: TruncateTo           │
                                          │        truncation_target(); the leader lacks  │
                                          │        this epoch → ask again with the next   │
                                          │        older one                              ▼
                    diverging epoch in ───┤                                          FETCHING
                    a fetch answer, or    │   FetchQuery (fetch offset = log end, last     │
                    out of range above    │   fetched epoch, the session's plan):          │
                    the leader's end ─────┘   on_fetch_answer: AppendFetched, StartAt ◀────┘

A round (:meth:`FollowerCore.begin_round`): the partitions whose retry time has come are
ready; those truncating and holding an epoch are asked in one OffsetForLeaderEpoch (a
log without any epoch has nothing to cut and fetches at once); then the ready partitions
not truncating are fetched in one Fetch (:meth:`FollowerCore.fetch_query`), each asking at
most what its topic's reassignment throttle holds (:class:`ReplicationThrottle`: a
partition whose bucket is empty waits until it refills). When nothing is ready, or every
partition to fetch is throttled to nothing, the round is a :class:`WaitUntil`.

An answer that a later metadata image will settle (NOT_LEADER_OR_FOLLOWER, a fenced or
unknown epoch, any other partition error) holds that partition back for
``replica.fetch.backoff.ms``; so does a batch the log refuses (it truncates again after).
A session error makes the next fetch full without holding anything back; a lost
connection is made again after ``replica.fetch.backoff.ms``. Answers about a partition
no longer followed as it was asked (unfollowed, followed again at another epoch, or
detached for deletion) are ignored.

Time is ``now_ms``, milliseconds of the broker's monotonic clock, given with each input.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from sluice.common.config import BrokerConfig
from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.replication.follower_session import FetchPlan, FollowerFetchSession, Wanted
from sluice.storage.leader_epoch import UNDEFINED_EPOCH

log = logging.getLogger(__name__)

PARTITION_MAX_BYTES_UNLIMITED = 2**31 - 1
"""A partition's byte limit in a fetch when no throttle lowers it below
``replica.fetch.max.bytes``."""

SESSION_ERRORS = frozenset(
    {
        ErrorCode.fetch_session_id_not_found,
        ErrorCode.invalid_fetch_session_epoch,
        ErrorCode.fetch_session_topic_id_error,
    }
)
"""Answers about the fetch session itself: the next fetch is a full one."""

MS_PER_S = 1000


class FollowerLogView(Protocol):
    """What the follower's decisions read of a partition's log (in memory)."""

    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def latest_epoch(self) -> int: ...
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(the largest epoch here not above ``epoch``, where it ends here), or
        (-1, -1) when there is none."""
        ...


class FollowedReplica(Protocol):
    """A partition this broker follows, as the decisions see it."""

    @property
    def log(self) -> FollowerLogView: ...
    @property
    def leader_epoch(self) -> int:
        """The leader epoch of the metadata applied here."""
        ...

    @property
    def detached(self) -> bool:
        """Being deleted: its log is no longer this partition's."""
        ...


R = TypeVar("R", bound=FollowedReplica)


# ── commands ───────────────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Drop every offset from ``offset`` on (an offset at or past the log end drops only
    an empty epoch there)."""

    topic_partition: TopicPartition
    offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class StartAt:
    """Empty the log and start it at ``offset``: the leader's log starts past its end."""

    topic_partition: TopicPartition
    offset: int


@dataclass(frozen=True, slots=True)
class AppendFetched:
    """Append the leader's batches as they are and take its high watermark; then follow
    its log start offset where :func:`log_start_to_follow` says so. A batch the log
    refuses is reported back with :meth:`FollowerCore.on_append_failed`."""

    topic_partition: TopicPartition
    records: bytes | memoryview
    leader_high_watermark: int
    leader_log_start_offset: int


FollowerCommand = TruncateTo | StartAt | AppendFetched


# ── answers, as the shell reads them off the wire ──────────────────────────────────


@dataclass(frozen=True, slots=True)
class EpochAnswer:
    """One partition of an OffsetForLeaderEpoch answer."""

    topic_partition: TopicPartition
    error_code: int
    leader_epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of a Fetch answer; ``diverging_epoch`` is (epoch, end offset) when
    the answer has the field."""

    topic_partition: TopicPartition
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes | memoryview | None
    diverging_epoch: tuple[int, int] | None = None


# ── pure rules ─────────────────────────────────────────────────────────────────────


def truncation_target(
    leader_epoch: int, leader_end_offset: int, log: FollowerLogView
) -> tuple[int, bool, str]:
    """Kafka's truncation rule for the leader's answer "epoch ``leader_epoch`` (the
    largest it has not above the one asked) ends at ``leader_end_offset``": (the offset
    to truncate to, whether to ask again with this log's next older epoch, why).

    Never to a stale high watermark: records above it may be committed (the leader
    counted this follower when it moved its own); records above where the epoch ends at
    the leader never will be."""
    if leader_epoch == UNDEFINED_EPOCH or leader_end_offset < 0:
        # The leader has no epoch this old: nothing above the high watermark here can be
        # trusted, what is below it is committed.
        return log.high_watermark, False, "the leader has no such epoch"
    epoch_here, end_here = log.end_offset_for_epoch(leader_epoch)
    target = (
        leader_end_offset if epoch_here == UNDEFINED_EPOCH else min(leader_end_offset, end_here)
    )
    # When this log lacked the leader's epoch, its own next older one must be checked too.
    ask_again = epoch_here not in (leader_epoch, UNDEFINED_EPOCH)
    return target, ask_again, f"epoch {leader_epoch} ends at {leader_end_offset}"


def out_of_range_start(log: FollowerLogView, leader_log_start_offset: int) -> int | None:
    """After OFFSET_OUT_OF_RANGE: the offset to start this log at when the leader's log
    starts past its end; None when this log reaches past the leader's end (truncate)."""
    if log.log_end_offset < leader_log_start_offset:
        return leader_log_start_offset
    return None


def log_start_to_follow(log: FollowerLogView, leader_log_start_offset: int) -> int | None:
    """After an append: the leader's log start offset when this log should delete the
    records before it (it is ahead of this log's start, and committed here)."""
    if log.log_start_offset < leader_log_start_offset <= log.high_watermark:
        return leader_log_start_offset
    return None


class ReplicationThrottle:
    """``reassignment.throttled.rate``: a token bucket per topic for the partitions this
    broker is being added to by a reassignment, shared by all of its fetchers. A fetch
    asks such a partition for at most what its topic's bucket holds; a partition whose
    bucket is empty waits until it refills (a first batch may overdraw it: KIP-74).

    Levels are kept in byte-milliseconds (bytes × 1000) so that integer milliseconds
    refill them exactly."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[int, int]] = {}
        """Topic → (byte-milliseconds available, when last refilled, ms)."""

    def available(self, topic: str, rate_bytes_per_s: int, now_ms: int) -> int:
        """Bytes the topic may copy now (refilled up to one second's worth; negative
        while a batch overdrew it)."""
        full = rate_bytes_per_s * MS_PER_S
        level, since_ms = self._buckets.get(topic, (full, now_ms))
        level = min(full, level + (now_ms - since_ms) * rate_bytes_per_s)
        self._buckets[topic] = (level, now_ms)
        return level // MS_PER_S

    def spend(self, topic: str, size_bytes: int, now_ms: int) -> None:
        level, _ = self._buckets.get(topic, (0, now_ms))
        self._buckets[topic] = (level - size_bytes * MS_PER_S, now_ms)

    def ready_at_ms(self, topic: str, rate_bytes_per_s: int, now_ms: int) -> int:
        """When the topic's bucket holds a whole byte again (what :meth:`available`
        offers: a fraction of one is no byte to ask for, so waiting less would only
        find the bucket still empty)."""
        level, _ = self._buckets.get(topic, (0, now_ms))
        if level >= MS_PER_S:
            return now_ms
        return now_ms + -(-(MS_PER_S - level) // rate_bytes_per_s)


# ── the followed partitions and their rounds ──────────────────────────────────────


@dataclass(eq=False)
class Followed(Generic[R]):
    """One partition followed from this leader, at the leader epoch it was followed at
    (followed again, it is a new :class:`Followed`: answers to the old one are
    ignored)."""

    topic_partition: TopicPartition
    replica: R
    leader_epoch: int
    truncating: bool = True
    retry_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class WaitUntil:
    """Nothing to ask now: wait until ``at_ms`` (or until a partition is followed)."""

    at_ms: int


@dataclass(frozen=True, slots=True)
class EpochAsk:
    """One partition of an OffsetForLeaderEpoch request."""

    topic_partition: TopicPartition
    current_leader_epoch: int
    leader_epoch: int
    """The latest epoch of this log: where does it end at the leader?"""


@dataclass(frozen=True)
class EpochQuery(Generic[R]):
    """An OffsetForLeaderEpoch request to send, for the partitions that must truncate."""

    asked: tuple[Followed[R], ...]
    partitions: tuple[EpochAsk, ...]


@dataclass(frozen=True)
class Round(Generic[R]):
    """One round of the fetcher: its time, the partitions ready, and the
    OffsetForLeaderEpoch to send first (None: none)."""

    now_ms: int
    ready: tuple[Followed[R], ...]
    epoch_query: EpochQuery[R] | None


@dataclass(frozen=True)
class FetchQuery(Generic[R]):
    """A Fetch request to send: the session's plan (which partitions it names and
    forgets, and what each asks), and the limits of the request."""

    plan: FetchPlan
    batch: tuple[Followed[R], ...]
    """The partitions fetched (named or held in the session)."""
    named: tuple[Followed[R], ...]
    throttled: frozenset[TopicPartition]
    """Those under a reassignment throttle: what they copy is spent from its bucket."""
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int


class FollowerCore(Generic[R]):
    """The decisions of one fetcher: the partitions it follows from one leader."""

    def __init__(
        self,
        leader_id: int,
        config: BrokerConfig,
        throttle: ReplicationThrottle,
        throttled_rate: Callable[[R], int],
    ) -> None:
        """``throttled_rate``: the reassignment throttle on copying a partition to this
        broker, bytes per second (0: none)."""
        self.leader_id = leader_id
        self._config = config
        self._throttle = throttle
        self._throttled_rate = throttled_rate
        self._followed: dict[TopicPartition, Followed[R]] = {}
        self.session = FollowerFetchSession()
        """The fetch session with the leader (KIP-227)."""
        self.fetches_total = 0
        self.incremental_fetches_total = 0
        self.partitions_named_total = 0
        """Fetches answered, those of them incremental, and the partitions they named
        (what a session saves shows as fewer partitions named than followed)."""

    def __len__(self) -> int:
        return len(self._followed)

    def followed(self, topic_partition: TopicPartition) -> Followed[R] | None:
        return self._followed.get(topic_partition)

    @property
    def reconnect_backoff_ms(self) -> int:
        """The pause before making a lost connection again."""
        return self._config.replica_fetch_backoff_ms

    def follow(self, topic_partition: TopicPartition, replica: R) -> bool:
        """Copy ``replica`` (again from its truncation, if it is another one or its
        epoch is new). True when something changed (a waiting fetcher wakes)."""
        current = self._followed.get(topic_partition)
        if (
            current is not None
            and current.replica is replica
            and current.leader_epoch == replica.leader_epoch
        ):
            return False
        self._followed[topic_partition] = Followed(topic_partition, replica, replica.leader_epoch)
        return True

    def unfollow(self, topic_partition: TopicPartition) -> None:
        self._followed.pop(topic_partition, None)

    def on_connecting(self) -> None:
        """A new connection: its first fetch is a full one."""
        self.session.failed()

    def next_retry_ms(self) -> int:
        """When the first held-back partition may go again (some partition is
        followed)."""
        return min(f.retry_at_ms for f in self._followed.values())

    # ── a round ───────────────────────────────────────────────────────────────────

    def begin_round(self, now_ms: int) -> Round[R] | WaitUntil:
        """The partitions ready now and what to ask those that must truncate; or a
        wait while every partition waits to retry."""
        ready = tuple(f for f in self._followed.values() if f.retry_at_ms <= now_ms)
        if not ready:
            return WaitUntil(self.next_retry_ms())
        asked: list[Followed[R]] = []
        for followed in ready:
            if not followed.truncating:
                continue
            if followed.replica.log.latest_epoch == UNDEFINED_EPOCH:
                followed.truncating = False  # nothing written in any epoch: nothing to cut
            else:
                asked.append(followed)
        if not asked:
            return Round(now_ms, ready, None)
        return Round(
            now_ms,
            ready,
            EpochQuery(
                tuple(asked),
                tuple(
                    EpochAsk(f.topic_partition, f.leader_epoch, f.replica.log.latest_epoch)
                    for f in asked
                ),
            ),
        )

    def on_epoch_answers(
        self, query: EpochQuery[R], answers: Iterable[EpochAnswer], now_ms: int
    ) -> list[FollowerCommand]:
        """The leader's OffsetForLeaderEpoch answer to ``query``."""
        commands: list[FollowerCommand] = []
        for answer in answers:
            followed = self._followed.get(answer.topic_partition)
            if followed is None or followed not in query.asked or not self._current(followed):
                continue
            if answer.error_code != ErrorCode.none:
                self._retry_later(followed, answer.error_code, now_ms)
                continue
            commands.append(self._truncate(followed, answer.leader_epoch, answer.end_offset))
        return commands

    def fetch_query(self, round_: Round[R]) -> FetchQuery[R] | WaitUntil | None:
        """The Fetch of this round, once its truncations are answered: the ready
        partitions not truncating nor held back; a wait when each of them is throttled
        to nothing; None when there are none (the next round comes at once)."""
        now_ms = round_.now_ms
        fetching = [f for f in round_.ready if not f.truncating and f.retry_at_ms <= now_ms]
        limits = self._throttled_limits(fetching, now_ms)
        fetching = [f for f in fetching if limits.get(f.topic_partition) != 0]
        if not fetching:
            return WaitUntil(self.next_retry_ms()) if limits else None
        config = self._config
        wanted = {
            f.topic_partition: Wanted(
                fetch_offset=f.replica.log.log_end_offset,
                last_fetched_epoch=f.replica.log.latest_epoch,
                log_start_offset=f.replica.log.log_start_offset,
                current_leader_epoch=f.leader_epoch,
                partition_max_bytes=min(
                    config.replica_fetch_max_bytes,
                    limits.get(f.topic_partition, PARTITION_MAX_BYTES_UNLIMITED),
                ),
            )
            for f in fetching
        }
        plan = self.session.plan(wanted)
        return FetchQuery(
            plan=plan,
            batch=tuple(fetching),
            named=tuple(f for f in fetching if f.topic_partition in plan.named),
            throttled=frozenset(limits),
            replica_id=config.node_id,
            max_wait_ms=config.replica_fetch_wait_max_ms,
            min_bytes=1,
            max_bytes=config.replica_fetch_response_max_bytes,
        )

    def on_fetch_failed(self) -> None:
        """The fetch got no answer (the connection failed): the next one is full."""
        self.session.failed()

    def on_fetch_answer(
        self,
        query: FetchQuery[R],
        error_code: int,
        session_id: int,
        partitions: Iterable[FetchedPartition],
        now_ms: int,
    ) -> list[FollowerCommand]:
        """The leader's Fetch answer to ``query``: its top-level error, its session id
        and its partitions."""
        self.fetches_total += 1
        self.partitions_named_total += len(query.named)
        if query.plan.incremental:
            self.incremental_fetches_total += 1
        if error_code != ErrorCode.none:
            self.session.failed()
            if error_code in SESSION_ERRORS:
                log.info(
                    "replica fetcher for broker %d: %s; fetching in full again",
                    self.leader_id,
                    ErrorCode(error_code).name,
                )
                return []
            for held in query.batch:
                self._retry_later(held, error_code, now_ms)
            return []
        self.session.answered(query.plan, session_id)
        commands: list[FollowerCommand] = []
        for result in partitions:
            topic_partition = result.topic_partition
            followed = self._followed.get(topic_partition)
            if followed is None or followed not in query.batch or not self._current(followed):
                continue
            if topic_partition in query.throttled and result.records:
                self._throttle.spend(topic_partition.topic, len(result.records), now_ms)
            command = self._take(followed, result, now_ms)
            if command is not None:
                commands.append(command)
        return commands

    def on_append_failed(self, topic_partition: TopicPartition, now_ms: int) -> None:
        """The log refused the leader's batches (they do not follow it): truncate again,
        after ``replica.fetch.backoff.ms``."""
        followed = self._followed.get(topic_partition)
        if followed is None:
            return
        followed.truncating = True
        self._retry_later(followed, ErrorCode.corrupt_message, now_ms)

    # ── the rules applied ─────────────────────────────────────────────────────────

    def _current(self, followed: Followed[R]) -> bool:
        """Still followed as it was when the request was made."""
        return (
            self._followed.get(followed.topic_partition) is followed
            and not followed.replica.detached  # being deleted: its log is not ours
            and followed.replica.leader_epoch == followed.leader_epoch
        )

    def _retry_later(self, followed: Followed[R], code: int, now_ms: int) -> None:
        followed.retry_at_ms = now_ms + self._config.replica_fetch_backoff_ms
        log.debug(
            "%s: leader %d answered %s; retrying later",
            followed.topic_partition,
            self.leader_id,
            ErrorCode(code).name,
        )

    def _truncate(self, followed: Followed[R], leader_epoch: int, end_offset: int) -> TruncateTo:
        offset, ask_again, reason = truncation_target(
            leader_epoch, end_offset, followed.replica.log
        )
        followed.truncating = ask_again
        return TruncateTo(followed.topic_partition, offset, reason)

    def _throttled_limits(
        self, fetching: list[Followed[R]], now_ms: int
    ) -> dict[TopicPartition, int]:
        """For partitions under a reassignment throttle, the bytes each may ask for now
        (0: none; it waits, its retry time set to when its topic's bucket refills)."""
        limits: dict[TopicPartition, int] = {}
        for followed in fetching:
            rate = self._throttled_rate(followed.replica)
            if rate <= 0:
                continue
            topic = followed.topic_partition.topic
            allowed = self._throttle.available(topic, rate, now_ms)
            limits[followed.topic_partition] = max(allowed, 0)
            if allowed <= 0:
                followed.retry_at_ms = self._throttle.ready_at_ms(topic, rate, now_ms)
        return limits

    def _take(
        self, followed: Followed[R], result: FetchedPartition, now_ms: int
    ) -> FollowerCommand | None:
        """One partition's fetch answer."""
        code = result.error_code
        if code == ErrorCode.offset_out_of_range:
            start = out_of_range_start(followed.replica.log, result.log_start_offset)
            if start is None:
                followed.truncating = True  # this log reaches past the leader's end
                return None
            return StartAt(followed.topic_partition, start)
        if code != ErrorCode.none:
            self._retry_later(followed, code, now_ms)
            return None
        diverging = result.diverging_epoch
        if diverging is not None and diverging[0] >= 0:
            return self._truncate(followed, diverging[0], diverging[1])
        return AppendFetched(
            followed.topic_partition,
            result.records or b"",
            result.high_watermark,
            result.log_start_offset,
        )
