"""The console's sampler: end offsets, committed offsets and group descriptions every few
seconds, kept in bounded in-memory history.

Each sample asks the cluster, through the client only:

- Metadata for every topic (internal ones left out), at most ``max_topics`` of them;
- ListOffsets (latest) for all their partitions: one request per partition leader;
- ListGroups (one request per broker), then for at most ``max_groups`` groups, at each
  group's coordinator: DescribeGroups and OffsetFetch for classic groups,
  ShareGroupDescribe and DescribeShareGroupOffsets for share groups (KIP-932).

From consecutive samples it derives produce rates (records/s per partition and topic),
each group's lag per partition (end offset − committed offset, never negative; for a
share group the lag DescribeShareGroupOffsets reports, else end offset − start offset),
its consume rate (committed offsets' progress per second) and the group's rebalance
timeline (:mod:`sluice.console.timeline`). A partition assigned to a member without a
committed offset has an unknown lag (``None``), never 0, and a group with no known lag
has no total; bookkeeping groups (:mod:`sluice.common.bookkeeping_groups`) are marked
and have no lag. A topic deleted between two requests of a sample is left out of it.
History is ring buffers: ``history_s`` seconds of points per series, a bounded number of
timeline events per group. It also notes which brokers the cluster lists
(DescribeCluster), so that a broker seen and then gone is shown down, with since when.

Given a :class:`~sluice.console.history_file.HistoryFile`, it loads the produce-rate and
lag series and the brokers seen on its first sample (once it knows the cluster's id) and
saves them every ``SAVE_INTERVAL_S`` and when it is closed, so the history survives a
restart; without one, the history covers the time the process has been running.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sluice.client.admin import Admin, ListedOffset, OffsetSpec
from sluice.client.admin_share_groups import (
    SHARE_GROUP_TYPE,
    ShareGroupDescription,
    SharePartitionOffset,
    describe_share_group,
    share_group_offsets,
)
from sluice.client.cluster import TopicMetadata
from sluice.client.errors import ClientError, UnsupportedApiError
from sluice.client.groups import GroupDescription, GroupListing, OffsetAndMetadata
from sluice.common.bookkeeping_groups import is_bookkeeping_group
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import NodeId, TopicPartition
from sluice.console.history_file import (
    SAVE_INTERVAL_S,
    BrokerSighting,
    HistoryFile,
    SavedHistory,
)
from sluice.console.timeline import GroupSnapshot, GroupTrack, TimelineEvent, diff_snapshots

log = logging.getLogger(__name__)

INTERVAL_S_DEFAULT = 2.0
HISTORY_S_DEFAULT = 30 * 60.0
"""Thirty minutes of points per series."""
MAX_TOPICS_DEFAULT = 200
MAX_GROUPS_DEFAULT = 50
"""Caps on what one sample asks about, so a large cluster costs a bounded amount."""
TIMELINE_EVENTS_MAX = 500
"""Events kept per group (the oldest go first)."""
MISSING_BROKERS_MAX = 100
"""Brokers remembered as missing (the longest gone are forgotten first)."""

_TOPIC_GONE_CODES = frozenset({ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id})
"""What ListOffsets answers for a topic deleted since the sample listed it."""


def rate_per_s(before: tuple[float, int], after: tuple[float, int]) -> float:
    """Records per second between two (time, end offset) points; 0 when the offset went
    back (the topic was recreated) or no time passed."""
    elapsed = after[0] - before[0]
    if elapsed <= 0 or after[1] < before[1]:
        return 0.0
    return (after[1] - before[1]) / elapsed


def lag_of(end_offset: int, committed: int) -> int:
    """Records the group has yet to read in a partition; never negative (a committed
    offset read after the end offset can be ahead of it)."""
    return max(end_offset - committed, 0)


def share_lag_of(offset: SharePartitionOffset, end_offset: int | None) -> int | None:
    """A share group's lag in a partition: what DescribeShareGroupOffsets reports (v1+),
    else end offset − start offset; None when neither is known (the group has not read
    the partition, or the end offset is unknown)."""
    if offset.error is not None or offset.start_offset < 0:
        return None
    if offset.lag >= 0:
        return offset.lag
    if end_offset is None:
        return None
    return lag_of(end_offset, offset.start_offset)


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic_partition: TopicPartition
    committed: int | None
    """The committed offset (a share group: its start offset); None for a partition
    assigned to a member that has committed nothing for it."""
    end_offset: int
    reported_lag: int | None = None
    """The lag the cluster reported (share groups), used instead of computing one."""

    @property
    def lag(self) -> int | None:
        """None when nothing is committed: unknown, not 0."""
        if self.reported_lag is not None:
            return self.reported_lag
        if self.committed is None:
            return None
        return lag_of(self.end_offset, self.committed)


def known_total_lag(lags: Iterable[PartitionLag]) -> int | None:
    """The lag summed over the partitions whose lag is known; None if none is."""
    known = [lag.lag for lag in lags if lag.lag is not None]
    return sum(known) if known else None


def share_lags(
    offsets: Mapping[TopicPartition, SharePartitionOffset],
    end_offset: Callable[[TopicPartition], int | None],
) -> dict[TopicPartition, PartitionLag]:
    """A share group's lag per partition it has read, by partition (partitions whose
    lag is unknown are left out)."""
    lags: dict[TopicPartition, PartitionLag] = {}
    for topic_partition, offset in sorted(offsets.items()):
        end = end_offset(topic_partition)
        lag = share_lag_of(offset, end)
        if lag is not None:
            lags[topic_partition] = PartitionLag(
                topic_partition,
                offset.start_offset,
                end if end is not None else offset.start_offset + lag,
                lag,
            )
    return lags


@dataclass(slots=True)
class GroupHistory:
    """What the sampler keeps of one group."""

    track: GroupTrack = field(default_factory=GroupTrack)
    events: deque[TimelineEvent] = field(default_factory=lambda: deque(maxlen=TIMELINE_EVENTS_MAX))
    lag: dict[TopicPartition, PartitionLag] = field(default_factory=dict)
    total_lag: deque[tuple[float, float]] = field(default_factory=deque)
    """(time, total lag) of the samples where some partition's lag was known."""
    consumed: deque[tuple[float, int]] = field(default_factory=deque)
    """(time, sum of the committed offsets) of the last two samples, for the rate."""
    description: GroupDescription | None = None
    share_description: ShareGroupDescription | None = None
    """Set instead of ``description`` for a share group."""
    bookkeeping: bool = False
    """Offsets that record progress, not positions (Spark's exactly-once sink)."""

    @property
    def total(self) -> int | None:
        """The lag over the partitions whose lag is known now; None if none is."""
        return known_total_lag(self.lag.values())

    @property
    def unknown_partitions(self) -> int:
        """Partitions assigned to a member without a committed offset."""
        return sum(1 for lag in self.lag.values() if lag.lag is None)

    @property
    def lag_trend(self) -> float | None:
        """How the total lag moved between the last two samples that knew it."""
        if len(self.total_lag) < 2:
            return None
        return self.total_lag[-1][1] - self.total_lag[-2][1]

    @property
    def consume_rate(self) -> float | None:
        """Records/s the group committed past between the last two samples; None until
        two samples saw committed offsets."""
        if len(self.consumed) < 2:
            return None
        return rate_per_s(self.consumed[-2], self.consumed[-1])


@dataclass(frozen=True, slots=True)
class TopicRate:
    topic: str
    partitions: int
    records_per_s: float | None
    """None until two samples exist."""


class Sampler:
    """Samples the cluster through an :class:`Admin` it does not own.

    ``run()`` samples every ``interval_s`` until cancelled; ``sample_once()`` takes one
    sample (``sluice top`` and tests drive it directly). A failed sample is logged and
    kept in :attr:`last_error`; the next one tries again.
    """

    def __init__(
        self,
        admin: Admin,
        *,
        interval_s: float = INTERVAL_S_DEFAULT,
        history_s: float = HISTORY_S_DEFAULT,
        max_topics: int = MAX_TOPICS_DEFAULT,
        max_groups: int = MAX_GROUPS_DEFAULT,
        clock: Callable[[], float] = time.time,
        history_file: HistoryFile | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"sampler interval must be positive, not {interval_s}")
        self.admin = admin
        self.interval_s = interval_s
        self.history_s = history_s
        self.max_topics = max_topics
        self.max_groups = max_groups
        self.clock = clock
        self.points_max = max(int(history_s / interval_s), 2)
        self.samples = 0
        self.started_s = clock()
        self.last_sample_s: float | None = None
        self.last_error: str | None = None
        self.topics: dict[str, TopicMetadata] = {}
        self.topics_capped = False
        self.groups_capped = False
        self.groups: dict[str, GroupHistory] = {}
        self.listings: list[GroupListing] = []
        self._end_offsets: dict[TopicPartition, deque[tuple[float, int]]] = {}
        self._topic_rates: dict[str, deque[tuple[float, float]]] = {}
        self._sampled = False
        """Whether a sample has succeeded yet (failures before it are only waiting)."""
        self.cluster_id: str | None = None
        self.brokers: dict[NodeId, BrokerSighting] = {}
        """Every broker listed since the console started (or in its saved history)."""
        self.history_file = history_file
        self._history_loaded = history_file is None
        self._saved_s: float | None = None

    # ── sampling ───────────────────────────────────────────────────────────────────

    async def run(self) -> None:
        """Sample every ``interval_s`` until cancelled."""
        while True:
            try:
                await self.sample_once()
            except (ClientError, KafkaError, OSError):
                pass  # recorded in last_error; the next sample tries again
            except Exception as e:
                # A bug must not stop the sampling for the life of the console.
                self.last_error = f"{type(e).__name__}: {e}"
                log.exception("console sample failed")
            await self.save_if_due()
            await asyncio.sleep(self.interval_s)

    async def sample_once(self) -> None:
        """One sample of topics, end offsets, groups and their committed offsets."""
        try:
            await self._sample()
        except (ClientError, KafkaError, OSError) as e:
            error = f"{type(e).__name__}: {e}"
            if error != self.last_error:  # once per distinct failure, not every interval
                if self._sampled:
                    log.warning("console sample failed: %s", error)
                else:
                    # A console started with its broker asks before the broker serves.
                    log.info("console waiting for the cluster: %s", error)
            self.last_error = error
            raise
        self.last_error = None
        self._sampled = True

    async def _sample(self) -> None:
        described = await self.admin.describe_cluster()
        now = self.clock()  # the sample's one time, for everything it records
        self.cluster_id = described.cluster_id
        # Brokers first: a sample that fails further on still notes a broker gone.
        self._record_brokers(now, {b.node_id: b.address for b in described.brokers})
        if not self._history_loaded:
            await self._load_history()
        topics = await self.admin.list_topics()
        self.topics_capped = len(topics) > self.max_topics
        self.topics = {topic.name: topic for topic in topics[: self.max_topics]}
        # Groups that only store offsets (empty protocol type: consumers that assign
        # partitions themselves) are kept too: their lag is worth showing.
        listings = await self.admin.list_groups()
        self.groups_capped = len(listings) > self.max_groups
        self.listings = listings[: self.max_groups]
        group_ids = [g.group_id for g in self.listings if g.group_type != SHARE_GROUP_TYPE]
        share_ids = [g.group_id for g in self.listings if g.group_type == SHARE_GROUP_TYPE]
        descriptions = await self.admin.describe_groups(group_ids) if group_ids else []
        committed = dict(
            zip(
                group_ids,
                await asyncio.gather(*(self.admin.list_group_offsets(g) for g in group_ids)),
                strict=True,
            )
        )
        shares, unanswered = await self._share_groups(share_ids)
        wanted = {p.topic_partition for topic in self.topics.values() for p in topic.partitions}
        for offsets in committed.values():
            wanted.update(tp for tp in offsets if tp.topic in self.topics)
        for _, share_offsets in shares.values():
            wanted.update(tp for tp in share_offsets if tp.topic in self.topics)
        for description in descriptions:
            wanted.update(
                TopicPartition(topic, partition)
                for member in description.members
                for topic, partitions in member.assignment.items()
                if topic in self.topics
                for partition in partitions
            )
        # A partition without a leader (offline) has no end offset to ask for: asking
        # would fail the whole sample while the console is most needed.
        offline = {
            p.topic_partition
            for topic in self.topics.values()
            for p in topic.partitions
            if p.leader_id < 0
        }
        end_offsets = await self.latest_offsets(wanted - offline)
        self._record_end_offsets(now, {tp: listed.offset for tp, listed in end_offsets.items()})
        seen = self._record_groups(now, descriptions, committed)
        seen |= self._record_share_groups(now, shares) | unanswered
        for gone in set(self.groups) - seen:
            # Groups deleted (or past the cap) are forgotten with their timeline.
            del self.groups[gone]
        self.samples += 1
        self.last_sample_s = now

    async def latest_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, ListedOffset]:
        """The end offsets of ``partitions``. A topic deleted since this sample listed it
        fails the one request; then each topic is asked alone, and those refused as
        unknown are dropped from this sample (``self.topics`` too)."""
        wanted = sorted(partitions)
        if not wanted:
            return {}
        try:
            return await self.admin.list_offsets(wanted, OffsetSpec.LATEST)
        except KafkaError as e:
            if e.code not in _TOPIC_GONE_CODES:
                raise
        by_topic: dict[str, list[TopicPartition]] = {}
        for topic_partition in wanted:
            by_topic.setdefault(topic_partition.topic, []).append(topic_partition)

        async def of_topic(
            topic_partitions: list[TopicPartition],
        ) -> dict[TopicPartition, ListedOffset]:
            try:
                return await self.admin.list_offsets(topic_partitions, OffsetSpec.LATEST)
            except KafkaError as e:
                if e.code not in _TOPIC_GONE_CODES:
                    raise
                self.topics.pop(topic_partitions[0].topic, None)
                return {}

        found: dict[TopicPartition, ListedOffset] = {}
        for answer in await asyncio.gather(*(of_topic(tps) for tps in by_topic.values())):
            found.update(answer)
        return found

    async def _share_groups(
        self, group_ids: list[str]
    ) -> tuple[
        dict[str, tuple[ShareGroupDescription, dict[TopicPartition, SharePartitionOffset]]],
        set[str],
    ]:
        """Each share group's description and start offsets, and the groups that were
        not described this time (refused, say: their history is kept, and one group
        does not fail the sample). A group that went away since ListGroups is in
        neither."""
        unanswered: set[str] = set()

        async def one(
            group_id: str,
        ) -> tuple[ShareGroupDescription, dict[TopicPartition, SharePartitionOffset]] | None:
            try:
                return await asyncio.gather(
                    describe_share_group(self.admin, group_id),
                    share_group_offsets(self.admin, group_id),
                )
            except KafkaError as e:
                if e.code != ErrorCode.group_id_not_found:
                    unanswered.add(group_id)
            except UnsupportedApiError:
                unanswered.add(group_id)
            return None

        found = await asyncio.gather(*(one(group_id) for group_id in group_ids))
        answers = {
            group_id: answer
            for group_id, answer in zip(group_ids, found, strict=True)
            if answer is not None
        }
        return answers, unanswered

    def _record_brokers(self, now: float, listed: Mapping[NodeId, str]) -> None:
        for node_id, address in listed.items():
            seen = self.brokers.get(node_id)
            first_seen_s = now if seen is None else seen.first_seen_s
            self.brokers[node_id] = BrokerSighting(node_id, address, first_seen_s, now)
        missing = [b for b in self.brokers.values() if b.node_id not in listed]
        for broker in missing:
            if broker.missing_since_s is None:
                self.brokers[broker.node_id] = BrokerSighting(
                    broker.node_id, broker.address, broker.first_seen_s, broker.last_seen_s, now
                )
        for forgotten in sorted(missing, key=lambda b: b.last_seen_s)[:-MISSING_BROKERS_MAX]:
            del self.brokers[forgotten.node_id]

    # ── history on disk ────────────────────────────────────────────────────────────

    async def _load_history(self) -> None:
        """Take in the saved history of this cluster (once, before the first sample is
        recorded); points older than ``history_s`` are left out."""
        assert self.history_file is not None
        self._history_loaded = True
        saved = await asyncio.to_thread(self.history_file.load, self.cluster_id)
        if saved is None:
            return
        oldest_s = self.clock() - self.history_s
        for name, points in saved.topic_rates.items():
            kept = [p for p in points if p[0] >= oldest_s][-self.points_max :]
            if kept:
                self._topic_rates[name] = deque(kept, maxlen=self.points_max)
        for group_id, points in saved.group_lag.items():
            kept = [p for p in points if p[0] >= oldest_s][-self.points_max :]
            if kept:
                self.groups.setdefault(group_id, GroupHistory()).total_lag.extend(kept)
        self.brokers.update(saved.brokers)

    def saved_history(self) -> SavedHistory:
        return SavedHistory(
            cluster_id=self.cluster_id,
            topic_rates={name: list(points) for name, points in self._topic_rates.items()},
            group_lag={
                group_id: list(history.total_lag)
                for group_id, history in self.groups.items()
                if history.total_lag
            },
            brokers=dict(self.brokers),
        )

    async def save(self) -> None:
        """Write the history to the history file (if any, and once something was
        sampled); a failure is logged, and the next save tries again."""
        if self.history_file is None or not self._sampled:
            return
        now = self.clock()
        try:
            await asyncio.to_thread(self.history_file.save, self.saved_history(), now)
        except (OSError, ValueError) as e:
            log.warning("console history not saved to %s: %s", self.history_file.path, e)
        self._saved_s = now

    async def save_if_due(self) -> None:
        now = self.clock()
        if self._saved_s is None or now - self._saved_s >= SAVE_INTERVAL_S:
            await self.save()

    def _record_end_offsets(self, now: float, offsets: Mapping[TopicPartition, int]) -> None:
        for topic_partition, offset in offsets.items():
            points = self._end_offsets.setdefault(topic_partition, deque(maxlen=self.points_max))
            points.append((now, offset))
        for name in self.topics:
            rate = self._topic_rate_now(name)
            if rate is not None:
                self._topic_rates.setdefault(name, deque(maxlen=self.points_max)).append(
                    (now, rate)
                )
        for gone in set(self._end_offsets) - set(offsets):
            del self._end_offsets[gone]
        for gone_topic in set(self._topic_rates) - set(self.topics):
            del self._topic_rates[gone_topic]

    def _record_groups(
        self,
        now: float,
        descriptions: Iterable[GroupDescription],
        committed: Mapping[str, Mapping[TopicPartition, OffsetAndMetadata]],
    ) -> set[str]:
        """Record the classic groups; their ids."""
        seen = set()
        for description in descriptions:
            group_id = description.group_id
            seen.add(group_id)
            history = self.groups.setdefault(group_id, GroupHistory())
            history.description = description
            history.events.extend(diff_snapshots(history.track, GroupSnapshot.of(description, now)))
            offsets = committed.get(group_id, {})
            history.bookkeeping = is_bookkeeping_group(
                group_id,
                protocol_type=description.protocol_type,
                member_count=len(description.members),
                offset_metadata=[value.metadata for value in offsets.values()],
            )
            if history.bookkeeping:
                history.lag = {}
                continue
            history.lag = self.group_lags(description, offsets)
            self._record_totals(now, history, offsets)
        return seen

    def group_lags(
        self, description: GroupDescription, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> dict[TopicPartition, PartitionLag]:
        """A classic group's lag per partition it committed or has assigned, by
        partition, from the latest end offsets (partitions whose end offset is unknown
        are left out; assigned ones without a committed offset have an unknown lag)."""
        lags: dict[TopicPartition, PartitionLag] = {}
        for topic_partition, offset in offsets.items():
            end = self.end_offset(topic_partition)
            if end is not None:
                lags[topic_partition] = PartitionLag(topic_partition, offset.offset, end)
        for member in description.members:
            for topic, partitions in member.assignment.items():
                for partition in partitions:
                    topic_partition = TopicPartition(topic, partition)
                    end = self.end_offset(topic_partition)
                    if topic_partition not in lags and end is not None:
                        lags[topic_partition] = PartitionLag(topic_partition, None, end)
        return dict(sorted(lags.items()))

    def _record_totals(
        self,
        now: float,
        history: GroupHistory,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> None:
        total = history.total
        if total is not None:
            history.total_lag.append((now, float(total)))
            while len(history.total_lag) > self.points_max:
                history.total_lag.popleft()
        if offsets:
            history.consumed.append((now, sum(value.offset for value in offsets.values())))
            while len(history.consumed) > 2:
                history.consumed.popleft()

    def _record_share_groups(
        self,
        now: float,
        shares: Mapping[
            str, tuple[ShareGroupDescription, Mapping[TopicPartition, SharePartitionOffset]]
        ],
    ) -> set[str]:
        """Record the share groups; their ids."""
        for group_id, (description, offsets) in shares.items():
            history = self.groups.setdefault(group_id, GroupHistory())
            history.share_description = description
            history.events.extend(
                diff_snapshots(history.track, GroupSnapshot.of_share_group(description, now))
            )
            history.lag = share_lags(offsets, self.end_offset)
            total = history.total
            if total is not None:
                history.total_lag.append((now, float(total)))
                while len(history.total_lag) > self.points_max:
                    history.total_lag.popleft()
        return set(shares)

    # ── reading the history ────────────────────────────────────────────────────────

    def end_offset(self, topic_partition: TopicPartition) -> int | None:
        points = self._end_offsets.get(topic_partition)
        return points[-1][1] if points else None

    def partition_rate(self, topic_partition: TopicPartition) -> float | None:
        """Records/s into one partition between the last two samples."""
        points = self._end_offsets.get(topic_partition)
        if points is None or len(points) < 2:
            return None
        return rate_per_s(points[-2], points[-1])

    def _topic_rate_now(self, topic: str) -> float | None:
        metadata = self.topics.get(topic)
        if metadata is None:
            return None
        rates = [self.partition_rate(p.topic_partition) for p in metadata.partitions]
        known = [rate for rate in rates if rate is not None]
        return sum(known) if known else None

    def topic_rates(self) -> list[TopicRate]:
        """Every sampled topic's produce rate, by name."""
        return [
            TopicRate(name, len(metadata.partitions), self._topic_rate_now(name))
            for name, metadata in sorted(self.topics.items())
        ]

    def topic_rate_series(self, topic: str) -> list[tuple[float, float]]:
        return list(self._topic_rates.get(topic, ()))

    def group(self, group_id: str) -> GroupHistory | None:
        return self.groups.get(group_id)

    def timeline(self, group_id: str) -> list[TimelineEvent]:
        """The group's events, newest first."""
        history = self.groups.get(group_id)
        return list(reversed(history.events)) if history else []

    def consumers_of(self, topic: str) -> list[TopicConsumer]:
        """The sampled groups that consume ``topic`` (a member is assigned one of its
        partitions, or the group has an offset in one), by group id."""
        found = []
        for group_id, history in sorted(self.groups.items()):
            if history.bookkeeping:
                continue
            lags = [lag for tp, lag in history.lag.items() if tp.topic == topic]
            members: Sequence[GroupMember]
            if history.share_description is not None:
                kind, state = "share", history.share_description.state
                members = history.share_description.members
            elif history.description is not None:
                kind, state = "classic", history.description.state
                members = history.description.members
            else:
                continue
            assigned = sum(1 for m in members if m.assignment.get(topic))
            if not lags and not assigned:
                continue
            found.append(
                TopicConsumer(
                    group_id,
                    kind,
                    state,
                    len(members),
                    assigned,
                    known_total_lag(lags),
                )
            )
        return found


class GroupMember(Protocol):
    """A member of either kind of group, as far as ``consumers_of`` reads it."""

    @property
    def assignment(self) -> dict[str, list[int]]: ...


@dataclass(frozen=True, slots=True)
class TopicConsumer:
    """A group consuming a topic."""

    group_id: str
    kind: str
    """``classic`` or ``share``."""
    state: str
    members: int
    members_assigned: int
    """Members with a partition of the topic assigned."""
    lag: int | None
    """Records of the topic the group has yet to read (None: no offsets in it)."""
