"""Followers copy their leaders: one fetcher per leader broker, many partitions each.

:class:`ReplicaFetchers` keeps, after every applied metadata image, one
:class:`ReplicaFetcher` per broker that leads a partition this broker follows, and gives
each fetcher its partitions. A fetcher holds one connection to its leader
(:mod:`sluice.broker.network.peer_connection`) and loops over its partitions::

    added, or a new leader epoch ──▶ TRUNCATING ──OffsetForLeaderEpoch(latest epoch here)──┐
                                        ▲       leader: "your epoch ends at E here"        │
                                        │       truncate to min(E, where it ends here);    │
                                        │       the leader lacks this epoch → ask again    │
                                        │       with the next older one                    ▼
                    diverging epoch in ─┤                                             FETCHING
                    a fetch answer, or  │   Fetch(replica id, offset = log end,            │
                    out of range above  │   last fetched epoch): append the batches as     │
                    the leader's end ───┘   they are, take the high watermark; the next ◀──┘
                                            fetch tells the leader this log's new end

Fetches go in a fetch session with the leader (KIP-227,
:mod:`sluice.broker.replication.follower_session`): after a full one, each names only
the partitions whose fetch offset, last fetched epoch, log start offset, leader epoch or
byte limit changed, and forgets those not fetched this time; a session error or any
failed fetch makes the next one full.

A partition this broker is being added to by a reassignment copies at most its topic's
``reassignment.throttled.rate`` bytes per second (:class:`ReplicationThrottle`), so a
move does not starve the cluster's own replication and clients.

A follower truncates by leader epoch, never to a stale high watermark: records above
its high watermark may be committed (the leader counted this follower when it moved
its own), and records above where its epoch ends at the leader never will be. Errors
that the next metadata will settle (NOT_LEADER_OR_FOLLOWER, a fenced or unknown epoch)
hold that partition back for ``replica.fetch.backoff.ms``; a lost connection is made
again after the same pause. A storage error on this broker's disk is fatal, as anywhere
(the fetcher hands it to the broker's fatal-error path and stops).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sluice.broker.network.peer_connection import (
    InterBrokerListener,
    PeerConnection,
    PeerUnavailable,
)
from sluice.broker.replication.follower_session import FollowerFetchSession, Wanted
from sluice.broker.replication.partition import Partition
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import NO_LEADER
from sluice.common import errors
from sluice.common.config import BrokerConfig
from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.protocol.messages import make, request_module
from sluice.protocol.versions import ApiKey
from sluice.storage.leader_epoch import UNDEFINED_EPOCH

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_MS = 10_000
REQUEST_TIMEOUT_MARGIN_MS = 10_000
"""A fetch is given up (and the connection made again) this long after its max wait."""

_RETRY_LATER = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.kafka_storage_error,
        ErrorCode.request_timed_out,
    }
)
"""Answers that a later metadata image (or the leader's) will settle: wait, then retry."""

_UNLIMITED = 2**31 - 1

_SESSION_ERRORS = frozenset(
    {
        ErrorCode.fetch_session_id_not_found,
        ErrorCode.invalid_fetch_session_epoch,
        ErrorCode.fetch_session_topic_id_error,
    }
)
"""Answers about the fetch session itself: the next fetch is a full one."""

LeaderAddress = tuple[int, str, int]
"""(node id, host, port) of a leader: a broker back at another address is another
fetcher."""


class ReplicationThrottle:
    """``reassignment.throttled.rate``: a token bucket per topic for the partitions this
    broker is being added to by a reassignment, shared by all of its fetchers. A fetch
    asks such a partition for at most what its topic's bucket holds; a partition whose
    bucket is empty waits until it refills (a first batch may overdraw it: KIP-74)."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}
        """Topic → (bytes available, when last refilled)."""

    def available(self, topic: str, rate_bytes_per_s: int, now: float) -> float:
        """Bytes the topic may copy now (refilled up to one second's worth)."""
        level, since = self._buckets.get(topic, (float(rate_bytes_per_s), now))
        level = min(float(rate_bytes_per_s), level + (now - since) * rate_bytes_per_s)
        self._buckets[topic] = (level, now)
        return level

    def spend(self, topic: str, size_bytes: int, now: float) -> None:
        level, _ = self._buckets.get(topic, (0.0, now))
        self._buckets[topic] = (level - size_bytes, now)

    def ready_at(self, topic: str, rate_bytes_per_s: int, now: float) -> float:
        """When the topic's bucket holds something again."""
        level, _ = self._buckets.get(topic, (0.0, now))
        return now if level > 0 else now + (1 - level) / rate_bytes_per_s


def throttled_rate(partition: Partition, node_id: int) -> int:
    """The reassignment throttle on copying ``partition`` to ``node_id`` (0: none)."""
    if node_id not in partition.state.adding_replicas:
        return 0
    return partition.log.config.reassignment_throttled_rate


@dataclass
class _Followed:
    partition: Partition
    leader_epoch: int
    truncating: bool = True
    retry_at: float = 0.0


def _request_topics(
    topic_class: type[Any],
    partition_class: type[Any],
    followed: list[_Followed],
    fields: Callable[[_Followed], dict[str, Any]],
) -> tuple[Any, ...]:
    """The topics part of a request about ``followed`` partitions (Fetch and
    OffsetForLeaderEpoch share its shape): per topic, per partition its index, the leader
    epoch it follows, and ``fields``."""
    by_topic: dict[str, list[_Followed]] = {}
    for f in followed:
        by_topic.setdefault(f.partition.topic_partition.topic, []).append(f)
    return tuple(
        make(
            topic_class,
            topic=topic,
            partitions=tuple(
                make(
                    partition_class,
                    partition=f.partition.topic_partition.partition,
                    current_leader_epoch=f.leader_epoch,
                    **fields(f),
                )
                for f in group
            ),
        )
        for topic, group in by_topic.items()
    )


class ReplicaFetcher:
    """Copies the partitions this broker follows from one leader."""

    def __init__(
        self,
        leader: LeaderAddress,
        config: BrokerConfig,
        on_storage_error: Callable[[BaseException], None],
        throttle: ReplicationThrottle | None = None,
        listener: InterBrokerListener | None = None,
    ) -> None:
        self.leader = leader
        self._listener = listener or InterBrokerListener()
        self._config = config
        self._throttle = throttle or ReplicationThrottle()
        self._on_storage_error = on_storage_error
        self._followed: dict[TopicPartition, _Followed] = {}
        self._changed = asyncio.Event()
        self.session = FollowerFetchSession()
        """This fetcher's fetch session with the leader (KIP-227)."""
        self.fetches_total = 0
        self.incremental_fetches_total = 0
        self.partitions_named_total = 0
        """Fetches answered, those of them incremental, and the partitions they named
        (what a session saves shows as fewer partitions named than followed)."""

    def __len__(self) -> int:
        return len(self._followed)

    def follow(self, partition: Partition) -> None:
        """Copy ``partition`` (again from its truncation, if its epoch is new)."""
        current = self._followed.get(partition.topic_partition)
        if (
            current is None
            or current.partition is not partition
            or current.leader_epoch != partition.leader_epoch
        ):
            self._followed[partition.topic_partition] = _Followed(partition, partition.leader_epoch)
            self._changed.set()

    def unfollow(self, topic_partition: TopicPartition) -> None:
        self._followed.pop(topic_partition, None)

    async def run(self) -> None:
        """Fetch until cancelled, making the connection again after failures."""
        node_id, host, port = self.leader
        backoff_s = self._config.replica_fetch_backoff_ms / 1000
        while True:
            if not self._followed:
                self._changed.clear()
                await self._changed.wait()
                continue
            connection = PeerConnection(
                host,
                port,
                client_id=f"broker-{self._config.node_id}",
                ssl_context=self._listener.ssl_context,
                sasl=self._listener.sasl,
            )
            self.session.failed()  # a new connection: the next fetch is a full one
            try:
                await connection.open(CONNECT_TIMEOUT_MS / 1000)
                while self._followed:
                    await self._round(connection)
            except (PeerUnavailable, errors.ProtocolError, errors.UnsupportedVersion) as e:
                log.warning("replica fetcher for broker %d: %s; retrying", node_id, e)
                await asyncio.sleep(backoff_s)
            except errors.KafkaStorageError as e:
                self._on_storage_error(e)  # this broker's disk failed: it stops
                return
            finally:
                await connection.close()

    async def _round(self, connection: PeerConnection) -> None:
        """One OffsetForLeaderEpoch for the partitions that must truncate, then one
        fetch; or a pause while every partition waits to retry."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        ready = [f for f in self._followed.values() if f.retry_at <= now]
        if not ready:
            await self._wait_for_retry(now)
            return
        truncating = [f for f in ready if f.truncating]
        if truncating:
            await self._truncate(connection, truncating)
        fetching = [f for f in ready if not f.truncating and f.retry_at <= now]
        limits = self._throttled_limits(fetching, now)
        fetching = [f for f in fetching if limits.get(f.partition.topic_partition) != 0]
        if fetching:
            await self._fetch(connection, fetching, limits)
        elif limits:
            await self._wait_for_retry(now)

    async def _wait_for_retry(self, now: float) -> None:
        """Pause until the first held-back partition may go again, or a change."""
        self._changed.clear()
        wake_at = min(f.retry_at for f in self._followed.values())
        try:
            await asyncio.wait_for(self._changed.wait(), max(wake_at - now, 0))
        except TimeoutError:
            pass

    def _throttled_limits(self, fetching: list[_Followed], now: float) -> dict[TopicPartition, int]:
        """For partitions under a reassignment throttle, the bytes each may ask for now
        (0: none; it waits, its retry time set to when its topic's bucket refills)."""
        limits: dict[TopicPartition, int] = {}
        for followed in fetching:
            rate = throttled_rate(followed.partition, self._config.node_id)
            if rate <= 0:
                continue
            topic = followed.partition.topic_partition.topic
            allowed = int(self._throttle.available(topic, rate, now))
            limits[followed.partition.topic_partition] = max(allowed, 0)
            if allowed <= 0:
                followed.retry_at = self._throttle.ready_at(topic, rate, now)
        return limits

    def _current(self, followed: _Followed) -> bool:
        """Still followed as it was when the request was made."""
        now = self._followed.get(followed.partition.topic_partition)
        return (
            now is followed
            and not followed.partition.detached  # being deleted: its log is not ours
            and followed.partition.leader_epoch == followed.leader_epoch
        )

    def _retry_later(self, followed: _Followed, code: int) -> None:
        loop = asyncio.get_running_loop()
        followed.retry_at = loop.time() + self._config.replica_fetch_backoff_ms / 1000
        log.debug(
            "%s: leader %d answered %s; retrying later",
            followed.partition.topic_partition,
            self.leader[0],
            ErrorCode(code).name,
        )

    # ── truncation ─────────────────────────────────────────────────────────────────

    async def _truncate(self, connection: PeerConnection, batch: list[_Followed]) -> None:
        asking: list[_Followed] = []
        for followed in batch:
            if followed.partition.log.latest_epoch == UNDEFINED_EPOCH:
                followed.truncating = False  # nothing written in any epoch: nothing to cut
            else:
                asking.append(followed)
        if not asking:
            return
        version = connection.version_for(ApiKey.OFFSET_FOR_LEADER_EPOCH)
        module = request_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
        request = make(
            module.OffsetForLeaderEpochRequest,
            replica_id=self._config.node_id,
            topics=_request_topics(
                module.OffsetForLeaderTopic,
                module.OffsetForLeaderPartition,
                asking,
                lambda f: {"leader_epoch": f.partition.log.latest_epoch},
            ),
        )
        response = await connection.request(request, CONNECT_TIMEOUT_MS / 1000)
        for topic_result in response.topics:
            for result in topic_result.partitions:
                answered = self._followed.get(TopicPartition(topic_result.topic, result.partition))
                if answered is None or answered not in asking or not self._current(answered):
                    continue
                if result.error_code != ErrorCode.none:
                    self._retry_later(answered, result.error_code)
                    continue
                self._truncate_to_leader_epoch(
                    answered, int(result.leader_epoch), int(result.end_offset)
                )

    def _truncate_to_leader_epoch(
        self, followed: _Followed, leader_epoch: int, leader_end_offset: int
    ) -> None:
        """Kafka's truncation rule for the leader's answer "epoch ``leader_epoch`` (the
        largest it has not above the one asked) ends at ``leader_end_offset``"."""
        partition_log = followed.partition.log
        if leader_epoch == UNDEFINED_EPOCH or leader_end_offset < 0:
            # The leader has no epoch this old: nothing above the high watermark here can
            # be trusted, what is below it is committed.
            self._cut(followed, partition_log.high_watermark, "the leader has no such epoch")
            followed.truncating = False
            return
        epoch_here, end_here = partition_log.end_offset_for_epoch(leader_epoch)
        if epoch_here == UNDEFINED_EPOCH:
            target = leader_end_offset
        else:
            target = min(leader_end_offset, end_here)
        self._cut(followed, target, f"epoch {leader_epoch} ends at {leader_end_offset}")
        # When this log lacked the leader's epoch, its own next older one must be
        # checked too: ask again.
        followed.truncating = epoch_here not in (leader_epoch, UNDEFINED_EPOCH)

    def _cut(self, followed: _Followed, offset: int, reason: str) -> None:
        partition_log = followed.partition.log
        if offset >= partition_log.log_end_offset:
            partition_log.truncate_to(offset)  # drops an empty epoch at the log end
            return
        log.info(
            "%s: truncating from %d to %d (%s, leader %d)",
            followed.partition.topic_partition,
            partition_log.log_end_offset,
            offset,
            reason,
            self.leader[0],
        )
        partition_log.truncate_to(offset)

    # ── fetching ───────────────────────────────────────────────────────────────────

    async def _fetch(
        self,
        connection: PeerConnection,
        batch: list[_Followed],
        limits: dict[TopicPartition, int],
    ) -> None:
        config = self._config
        version = connection.version_for(ApiKey.FETCH)
        module = request_module(ApiKey.FETCH, version)
        wanted = {
            f.partition.topic_partition: Wanted(
                fetch_offset=f.partition.log.log_end_offset,
                last_fetched_epoch=f.partition.log.latest_epoch,
                log_start_offset=f.partition.log.log_start_offset,
                current_leader_epoch=f.leader_epoch,
                partition_max_bytes=min(
                    config.replica_fetch_max_bytes,
                    limits.get(f.partition.topic_partition, _UNLIMITED),
                ),
            )
            for f in batch
        }
        session = self.session
        plan = session.plan(wanted)
        named = [f for f in batch if f.partition.topic_partition in plan.named]
        forgotten: dict[str, list[int]] = {}
        for topic_partition in plan.forgotten:
            forgotten.setdefault(topic_partition.topic, []).append(topic_partition.partition)
        request = make(
            module.FetchRequest,
            replica_id=config.node_id,
            max_wait=config.replica_fetch_wait_max_ms,
            min_bytes=1,
            max_bytes=config.replica_fetch_response_max_bytes,
            isolation_level=0,
            session_id=plan.session_id,
            session_epoch=plan.epoch,
            topics=_request_topics(
                module.FetchTopic,
                module.FetchPartition,
                named,
                lambda f: wanted[f.partition.topic_partition].fields(),
            ),
            forgotten_topics_data=tuple(
                make(module.ForgottenTopic, topic=topic, partitions=tuple(partitions))
                for topic, partitions in forgotten.items()
            ),
        )
        timeout_s = (config.replica_fetch_wait_max_ms + REQUEST_TIMEOUT_MARGIN_MS) / 1000
        try:
            response = await connection.request(request, timeout_s)
        except BaseException:
            session.failed()
            raise
        self.fetches_total += 1
        self.partitions_named_total += len(named)
        if plan.incremental:
            self.incremental_fetches_total += 1
        if response.error_code != ErrorCode.none:
            session.failed()
            if response.error_code in _SESSION_ERRORS:
                log.info(
                    "replica fetcher for broker %d: %s; fetching in full again",
                    self.leader[0],
                    ErrorCode(response.error_code).name,
                )
                return
            for followed in batch:
                self._retry_later(followed, response.error_code)
            return
        session.answered(plan, int(response.session_id))
        for topic_result in response.responses:
            for result in topic_result.partitions:
                topic_partition = TopicPartition(topic_result.topic, result.partition_index)
                answered = self._followed.get(topic_partition)
                if answered is None or answered not in batch or not self._current(answered):
                    continue
                if topic_partition in limits and result.records:
                    now = asyncio.get_running_loop().time()
                    self._throttle.spend(topic_partition.topic, len(result.records), now)
                self._take(answered, result)

    def _take(self, followed: _Followed, result: Any) -> None:
        """Apply one partition's fetch answer."""
        partition = followed.partition
        code = result.error_code
        if code == ErrorCode.offset_out_of_range:
            self._out_of_range(followed, int(result.log_start_offset))
            return
        if code != ErrorCode.none:
            self._retry_later(followed, code)
            return
        diverging = getattr(result, "diverging_epoch", None)
        if diverging is not None and int(diverging.epoch) >= 0:
            self._truncate_to_leader_epoch(
                followed, int(diverging.epoch), int(diverging.end_offset)
            )
            return
        try:
            partition.append_as_follower(result.records or b"", int(result.high_watermark))
            leader_log_start = int(result.log_start_offset)
            if partition.log.log_start_offset < leader_log_start <= partition.high_watermark:
                partition.log.delete_records_before(leader_log_start)
        except (errors.CorruptMessage, errors.InvalidRecord) as e:
            log.error(
                "%s: the leader's batches do not follow this log (%s); truncating again",
                partition.topic_partition,
                e,
            )
            followed.truncating = True
            self._retry_later(followed, ErrorCode.corrupt_message)

    def _out_of_range(self, followed: _Followed, leader_log_start: int) -> None:
        partition_log = followed.partition.log
        if partition_log.log_end_offset < leader_log_start:
            log.info(
                "%s: the leader's log starts at %d, past this log's end %d; starting there",
                followed.partition.topic_partition,
                leader_log_start,
                partition_log.log_end_offset,
            )
            partition_log.truncate_fully_and_start_at(leader_log_start)
        else:
            followed.truncating = True  # this log reaches past the leader's end


class ReplicaFetchers:
    """The fetchers of this broker, one per leader it follows, owned by :meth:`run`."""

    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        image: Callable[[], MetadataImage],
        on_storage_error: Callable[[BaseException], None],
        listener: InterBrokerListener | None = None,
    ) -> None:
        self._config = config
        self._listener = listener or InterBrokerListener()
        self._replicas = replicas
        self._image = image
        self._on_storage_error = on_storage_error
        self._fetchers: dict[LeaderAddress, tuple[ReplicaFetcher, asyncio.Task[None]]] = {}
        self._assigned: dict[TopicPartition, LeaderAddress] = {}
        self._task_group: asyncio.TaskGroup | None = None
        self._throttle = ReplicationThrottle()

    async def run(self) -> None:
        """Own the fetcher tasks until cancelled."""
        async with asyncio.TaskGroup() as task_group:
            self._task_group = task_group
            self.sync()
            try:
                await asyncio.Event().wait()
            finally:
                self._task_group = None
                for _, task in self._fetchers.values():
                    task.cancel()
                self._fetchers.clear()
                self._assigned.clear()

    def sync(self) -> None:
        """Follow, from the right leader, every hosted partition this broker does not
        lead; stop following the rest (on the event loop, after an image is applied)."""
        if self._task_group is None:
            return
        image = self._image()
        wanted: dict[TopicPartition, tuple[Partition, LeaderAddress]] = {}
        for partition in self._replicas:
            leader_id = partition.state.leader
            if partition.is_leader or leader_id == NO_LEADER:
                continue
            broker = image.brokers.get(leader_id)
            if broker is not None:
                wanted[partition.topic_partition] = (
                    partition,
                    (leader_id, *self._listener.address(broker)),
                )
        for topic_partition, address in list(self._assigned.items()):
            if wanted.get(topic_partition, (None, None))[1] != address:
                del self._assigned[topic_partition]
                self._fetchers[address][0].unfollow(topic_partition)
        for topic_partition, (partition, address) in wanted.items():
            entry = self._fetchers.get(address)
            if entry is None:
                fetcher = ReplicaFetcher(
                    address, self._config, self._on_storage_error, self._throttle, self._listener
                )
                task = self._task_group.create_task(
                    fetcher.run(), name=f"replica fetcher for broker {address[0]}"
                )
                entry = self._fetchers[address] = (fetcher, task)
            entry[0].follow(partition)
            self._assigned[topic_partition] = address
        for address, (fetcher, task) in list(self._fetchers.items()):
            if len(fetcher) == 0:
                task.cancel()
                del self._fetchers[address]
