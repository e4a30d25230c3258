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
:mod:`sluice.replication.follower_session`): after a full one, each names only the
partitions whose fetch offset, last fetched epoch, log start offset, leader epoch or
byte limit changed, and forgets those not fetched this time; a session error or any
failed fetch makes the next one full.

A partition this broker is being added to by a reassignment copies at most its topic's
``reassignment.throttled.rate`` bytes per second
(:class:`sluice.replication.follower.ReplicationThrottle`), so a move does not starve the
cluster's own replication and clients.

What to ask, and what to do with each answer, is decided by
:class:`sluice.replication.follower.FollowerCore` (sans-IO, on ``now_ms`` of the broker's
clock): the truncation rule, retry times, the throttle and the session. A fetcher here
owns the connection and its waits, puts the core's queries on the wire, and carries out
its commands on the partitions' logs (truncate, start at an offset, append the fetched
batches). A follower truncates by leader epoch, never to a stale high watermark.
Errors that the next metadata will settle (NOT_LEADER_OR_FOLLOWER, a fenced or unknown
epoch) hold that partition back for ``replica.fetch.backoff.ms``; a lost connection is
made again after the same pause. A storage error on this broker's disk is fatal, as
anywhere (the fetcher hands it to the broker's fatal-error path and stops).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from sluice.broker.network.peer_connection import (
    InterBrokerListener,
    PeerConnection,
    PeerUnavailable,
)
from sluice.broker.replication.partition import Partition
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import NO_LEADER
from sluice.common import errors
from sluice.common.clock import SYSTEM_CLOCK, Clock
from sluice.common.config import BrokerConfig
from sluice.common.ids import TopicPartition
from sluice.protocol.messages import make, request_module
from sluice.protocol.versions import ApiKey
from sluice.replication.follower import (
    AppendFetched,
    EpochAnswer,
    EpochQuery,
    FetchedPartition,
    FetchQuery,
    FollowerCommand,
    FollowerCore,
    ReplicationThrottle,
    StartAt,
    TruncateTo,
    WaitUntil,
    log_start_to_follow,
)
from sluice.replication.follower_session import FollowerFetchSession

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_MS = 10_000
REQUEST_TIMEOUT_MARGIN_MS = 10_000
"""A fetch is given up (and the connection made again) this long after its max wait."""

LeaderAddress = tuple[int, str, int]
"""(node id, host, port) of a leader: a broker back at another address is another
fetcher."""


def throttled_rate(partition: Partition, node_id: int) -> int:
    """The reassignment throttle on copying ``partition`` to ``node_id`` (0: none)."""
    if node_id not in partition.state.adding_replicas:
        return 0
    return partition.log.config.reassignment_throttled_rate


def _request_topics(
    topic_class: type[Any],
    partition_class: type[Any],
    partitions: Iterable[tuple[TopicPartition, int, dict[str, Any]]],
) -> tuple[Any, ...]:
    """The topics part of a request about partitions (Fetch and OffsetForLeaderEpoch
    share its shape): per topic, per partition its index, the leader epoch it follows
    (``current_leader_epoch``), and its other fields."""
    by_topic: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}
    for topic_partition, current_leader_epoch, fields in partitions:
        by_topic.setdefault(topic_partition.topic, []).append(
            (topic_partition.partition, current_leader_epoch, fields)
        )
    return tuple(
        make(
            topic_class,
            topic=topic,
            partitions=tuple(
                make(
                    partition_class,
                    partition=index,
                    current_leader_epoch=current_leader_epoch,
                    **fields,
                )
                for index, current_leader_epoch, fields in group
            ),
        )
        for topic, group in by_topic.items()
    )


class ReplicaFetcher:
    """Copies the partitions this broker follows from one leader: the connection and the
    requests of a :class:`FollowerCore`, and its commands carried out on the logs."""

    def __init__(
        self,
        leader: LeaderAddress,
        config: BrokerConfig,
        on_storage_error: Callable[[BaseException], None],
        throttle: ReplicationThrottle | None = None,
        listener: InterBrokerListener | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.leader = leader
        self._listener = listener or InterBrokerListener()
        self._config = config
        self._clock = clock
        self._on_storage_error = on_storage_error
        node_id = config.node_id
        self.core: FollowerCore[Partition] = FollowerCore(
            leader[0],
            config,
            throttle or ReplicationThrottle(),
            lambda partition: throttled_rate(partition, node_id),
        )
        """What this fetcher follows and decides."""
        self._changed = asyncio.Event()

    @property
    def session(self) -> FollowerFetchSession:
        """This fetcher's fetch session with the leader (KIP-227)."""
        return self.core.session

    @property
    def fetches_total(self) -> int:
        return self.core.fetches_total

    @property
    def incremental_fetches_total(self) -> int:
        return self.core.incremental_fetches_total

    @property
    def partitions_named_total(self) -> int:
        return self.core.partitions_named_total

    def __len__(self) -> int:
        return len(self.core)

    def follow(self, partition: Partition) -> None:
        """Copy ``partition`` (again from its truncation, if its epoch is new)."""
        if self.core.follow(partition.topic_partition, partition):
            self._changed.set()

    def unfollow(self, topic_partition: TopicPartition) -> None:
        self.core.unfollow(topic_partition)

    async def run(self) -> None:
        """Fetch until cancelled, making the connection again after failures."""
        node_id, host, port = self.leader
        while True:
            if not len(self.core):
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
            self.core.on_connecting()
            try:
                await connection.open(CONNECT_TIMEOUT_MS / 1000)
                while len(self.core):
                    await self.fetch_round(connection)
            except (PeerUnavailable, errors.ProtocolError, errors.UnsupportedVersion) as e:
                log.warning("replica fetcher for broker %d: %s; retrying", node_id, e)
                await asyncio.sleep(self.core.reconnect_backoff_ms / 1000)
            except errors.KafkaStorageError as e:
                self._on_storage_error(e)  # this broker's disk failed: it stops
                return
            finally:
                await connection.close()

    async def fetch_round(self, connection: PeerConnection) -> None:
        """One OffsetForLeaderEpoch for the partitions that must truncate, then one
        fetch; or a pause while every partition waits to retry."""
        now_ms = self._clock.monotonic_ms()
        round_ = self.core.begin_round(now_ms)
        if isinstance(round_, WaitUntil):
            await self._wait_until(round_, now_ms)
            return
        if round_.epoch_query is not None:
            await self._truncate(connection, round_.epoch_query)
        step = self.core.fetch_query(round_)
        if isinstance(step, WaitUntil):
            await self._wait_until(step, now_ms)
        elif step is not None:
            await self._fetch(connection, step)

    async def _wait_until(self, wait: WaitUntil, now_ms: int) -> None:
        """Pause until ``wait.at_ms``, or a change."""
        self._changed.clear()
        # asyncio.timeout, not wait_for, which on Python 3.11 can lose a cancellation
        # that comes as the event is set: then this loop never ends (cpython#86296).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(wait.at_ms - now_ms, 0) / 1000):
                await self._changed.wait()

    # ── truncation ─────────────────────────────────────────────────────────────────

    async def _truncate(self, connection: PeerConnection, query: EpochQuery[Partition]) -> None:
        version = connection.version_for(ApiKey.OFFSET_FOR_LEADER_EPOCH)
        module = request_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
        request = make(
            module.OffsetForLeaderEpochRequest,
            replica_id=self._config.node_id,
            topics=_request_topics(
                module.OffsetForLeaderTopic,
                module.OffsetForLeaderPartition,
                (
                    (
                        ask.topic_partition,
                        ask.current_leader_epoch,
                        {"leader_epoch": ask.leader_epoch},
                    )
                    for ask in query.partitions
                ),
            ),
        )
        response = await connection.request(request, CONNECT_TIMEOUT_MS / 1000)
        answers = [
            EpochAnswer(
                TopicPartition(topic_result.topic, result.partition),
                int(result.error_code),
                int(result.leader_epoch),
                int(result.end_offset),
            )
            for topic_result in response.topics
            for result in topic_result.partitions
        ]
        self._carry_out(self.core.on_epoch_answers(query, answers, self._clock.monotonic_ms()))

    # ── fetching ───────────────────────────────────────────────────────────────────

    async def _fetch(self, connection: PeerConnection, query: FetchQuery[Partition]) -> None:
        version = connection.version_for(ApiKey.FETCH)
        module = request_module(ApiKey.FETCH, version)
        plan = query.plan
        forgotten: dict[str, list[int]] = {}
        for topic_partition in plan.forgotten:
            forgotten.setdefault(topic_partition.topic, []).append(topic_partition.partition)
        request = make(
            module.FetchRequest,
            replica_id=query.replica_id,
            max_wait=query.max_wait_ms,
            min_bytes=query.min_bytes,
            max_bytes=query.max_bytes,
            isolation_level=0,
            session_id=plan.session_id,
            session_epoch=plan.epoch,
            topics=_request_topics(
                module.FetchTopic,
                module.FetchPartition,
                (
                    (f.topic_partition, f.leader_epoch, plan.wanted[f.topic_partition].fields())
                    for f in query.named
                ),
            ),
            forgotten_topics_data=tuple(
                make(module.ForgottenTopic, topic=topic, partitions=tuple(partitions))
                for topic, partitions in forgotten.items()
            ),
        )
        timeout_s = (query.max_wait_ms + REQUEST_TIMEOUT_MARGIN_MS) / 1000
        try:
            response = await connection.request(request, timeout_s)
        except BaseException:
            self.core.on_fetch_failed()
            raise
        partitions = [
            FetchedPartition(
                TopicPartition(topic_result.topic, result.partition_index),
                int(result.error_code),
                int(result.high_watermark),
                int(result.log_start_offset),
                result.records,
                _diverging_epoch(result),
            )
            for topic_result in response.responses
            for result in topic_result.partitions
        ]
        commands = self.core.on_fetch_answer(
            query,
            int(response.error_code),
            int(response.session_id),
            partitions,
            self._clock.monotonic_ms(),
        )
        self._carry_out(commands)

    # ── the core's commands ────────────────────────────────────────────────────────

    def _carry_out(self, commands: list[FollowerCommand]) -> None:
        for command in commands:
            followed = self.core.followed(command.topic_partition)
            assert followed is not None, f"{command.topic_partition}: a command for no partition"
            partition = followed.replica
            match command:
                case TruncateTo():
                    self._cut(partition, command)
                case StartAt():
                    log.info(
                        "%s: the leader's log starts at %d, past this log's end %d; starting there",
                        partition.topic_partition,
                        command.offset,
                        partition.log.log_end_offset,
                    )
                    partition.log.truncate_fully_and_start_at(command.offset)
                case AppendFetched():
                    self._append(partition, command)

    def _cut(self, partition: Partition, command: TruncateTo) -> None:
        partition_log = partition.log
        if command.offset < partition_log.log_end_offset:
            log.info(
                "%s: truncating from %d to %d (%s, leader %d)",
                partition.topic_partition,
                partition_log.log_end_offset,
                command.offset,
                command.reason,
                self.leader[0],
            )
        partition_log.truncate_to(command.offset)  # at the end: drops an empty epoch there

    def _append(self, partition: Partition, command: AppendFetched) -> None:
        try:
            partition.append_as_follower(command.records, command.leader_high_watermark)
            log_start = log_start_to_follow(partition.log, command.leader_log_start_offset)
            if log_start is not None:
                partition.log.delete_records_before(log_start)
        except (errors.CorruptMessage, errors.InvalidRecord) as e:
            log.error(
                "%s: the leader's batches do not follow this log (%s); truncating again",
                partition.topic_partition,
                e,
            )
            self.core.on_append_failed(partition.topic_partition, self._clock.monotonic_ms())


def _diverging_epoch(result: Any) -> tuple[int, int] | None:
    """A fetch answer's diverging epoch (epoch, end offset), when its version has one."""
    diverging = getattr(result, "diverging_epoch", None)
    if diverging is None:
        return None
    return int(diverging.epoch), int(diverging.end_offset)


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
            if partition.is_leader or leader_id in (NO_LEADER, self._config.node_id):
                continue  # (named leader by a state of its previous run: it waits)
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
                    address,
                    self._config,
                    self._on_storage_error,
                    self._throttle,
                    self._listener,
                    self._replicas.clock,
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
