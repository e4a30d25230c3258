"""``sluice.Consumer``: an asyncio Kafka consumer with background fetching and groups.

::

    async with sluice.Consumer("orders", bootstrap_servers="127.0.0.1:9092",
                               group_id="billing") as consumer:
        async for record in consumer:
            handle(record)

Inside, three tasks owned by the consumer (started by :meth:`Consumer.start`, cancelled
and awaited by :meth:`Consumer.close`; an error in any of them is raised to the
application by its next ``getmany``/``getone``):

- the **fetcher** keeps one Fetch in flight per leader broker, for every assigned,
  unpaused partition it leads whose buffer has room (a long poll of
  ``fetch_max_wait_ms``), and appends the decoded records to per-partition buffers
  while the application works on what it already has; when an answer arrives, that
  leader's next Fetch goes out at once. Assignment changes, seeks and resumes cancel
  the fetches in flight so the new positions are fetched without waiting out a poll;
- the **membership** task (only with :meth:`subscribe`) joins the group, runs the
  assignor when leader, heartbeats, and rebalances (:mod:`sluice.client.membership`);
- the **auto-committer** (at-least-once with ``enable_auto_commit``) commits, every
  ``auto_commit_interval_ms``, the offsets the application has finished with.

Offsets of one partition, in order::

    committed ≤ finished ≤ handed ≤ position ≤ fetch offset
                  │          │         │          └ where the next Fetch starts
                  │          │         └ next record to take from the buffer
                  │          └ after the last record given to the application
                  └ after the last record the application is done with: it asked for
                    more (or committed, or closed cleanly) since receiving it

Delivery modes decide what is committed: ``at-least-once`` commits "finished" offsets
(a crash repeats at most the records being processed), ``at-most-once`` commits a
batch's end before handing the batch out (a crash loses at most that batch), and
``exactly-once`` commits nothing itself: it reads read_committed, and the offsets go
into a transactional producer's transaction with the records made from them
(``producer.send_offsets_to_transaction(offsets, consumer.group_metadata())``, or
:func:`sluice.client.exactly_once.run_exactly_once`); after an abort,
:meth:`Consumer.rewind_to_committed` goes back to what the last commit covered.
``seek``, ``pause`` and revocation drop the buffered records of their partitions; a
generation number per partition discards answers of fetches already in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import inspect
import re
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import TracebackType
from typing import Any, Literal, Unpack

from sluice.client.admin import NO_OFFSET, Admin, OffsetSpec
from sluice.client.arguments import optional_str, topic_names
from sluice.client.assignors import assignors_named
from sluice.client.cluster import Cluster
from sluice.client.consumer_membership import ConsumerMembership, check_broker_pattern
from sluice.client.errors import ClientError
from sluice.client.failure import StoredFailure
from sluice.client.groups import GroupCoordinators, OffsetAndMetadata
from sluice.client.membership import (
    GroupMembership,
    RebalanceError,
    commit_offsets,
    fetch_committed,
)
from sluice.client.messages import Request
from sluice.client.retries import Retrier, RetryPolicy
from sluice.client.security import SecurityOptions, option_names, security_for
from sluice.client.share_membership import TopicIds
from sluice.client.transactions import GroupMetadata
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import NodeId, TopicPartition
from sluice.common.limits import FETCH_WAIT_MS_MAX
from sluice.protocol.records.builder import decode_batches
from sluice.protocol.records.record import Header
from sluice.protocol.versions import ApiKey

__all__ = [
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "NoOffsetForPartitionError",
    "OffsetAndTimestamp",
    "RebalanceError",
    "TopicPartition",
]

Delivery = Literal["at-least-once", "at-most-once", "exactly-once"]
GroupProtocol = Literal["classic", "consumer"]
GROUP_PROTOCOLS: tuple[GroupProtocol, ...] = ("classic", "consumer")
"""Kafka's group.protocol: the classic JoinGroup/SyncGroup protocol (the default), or
KIP-848's consumer group protocol."""
OffsetReset = Literal["earliest", "latest", "none"]
IsolationLevel = Literal["read_uncommitted", "read_committed"]

RETRY_BACKOFF_S = 0.1
"""Pause after a fetch round that failed with a retriable error (leader moved,
connection lost) before metadata is refreshed and the round retried."""

CLOSE_TIMEOUT_S = 30.0

SESSION_TIMEOUT_MS_DEFAULT = 10_000
HEARTBEAT_INTERVAL_MS_DEFAULT = 3000
PARTITION_ASSIGNMENT_STRATEGY_DEFAULT = ("range", "roundrobin")
"""The classic protocol's defaults of these settings (the consumer protocol has none:
the broker decides)."""
"""How long close() may spend on the final commit and LeaveGroup."""

_METADATA_REFRESH_CODES = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.kafka_storage_error,
        ErrorCode.replica_not_available,
    }
)


class NoOffsetForPartitionError(ClientError):
    """A partition has no committed offset (or its offset left the log) and
    ``auto_offset_reset`` is ``"none"``: seek it before consuming."""


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One record as the consumer hands it out."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    """Milliseconds since the epoch: create time, or log append time per the topic."""
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp_type: int = 0
    """0: create time, 1: log append time."""

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


async def _cancel_all(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` and wait until they have ended."""
    pending = [task for task in tasks if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)


def _record_constructor() -> Callable[..., ConsumerRecord]:
    """A fast ``ConsumerRecord(...)`` for the fetcher's inner loop: a frozen dataclass's
    ``__init__`` goes through ``object.__setattr__`` per field; setting the slots
    directly builds the same object in about half the time."""
    setters = [getattr(ConsumerRecord, f.name).__set__ for f in fields(ConsumerRecord)]
    assert len(setters) == 8
    set_0, set_1, set_2, set_3, set_4, set_5, set_6, set_7 = setters
    new = object.__new__

    def make(
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[Header, ...],
        timestamp_type: int,
    ) -> ConsumerRecord:
        record = new(ConsumerRecord)
        set_0(record, topic)
        set_1(record, partition)
        set_2(record, offset)
        set_3(record, timestamp)
        set_4(record, key)
        set_5(record, value)
        set_6(record, headers)
        set_7(record, timestamp_type)
        return record

    return make


_new_record = _record_constructor()


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    """Answer of :meth:`Consumer.offsets_for_times` for one partition."""

    offset: int
    timestamp: int


class ConsumerRebalanceListener:
    """Override either method (plain or ``async``) to act when partitions move."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        """Called before the partitions go (their offsets are committed first unless
        they were lost)."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        """Called once the new assignment is known, before records of it are fetched."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        """Called instead of :meth:`on_partitions_revoked` when the partitions were
        lost: the group dropped this member (its session ended, or it was fenced), so
        they may already belong to another member and nothing was committed. By default
        it calls :meth:`on_partitions_revoked`, as Kafka's listener does."""
        return self.on_partitions_revoked(lost)


@dataclass(slots=True)
class _PartitionState:
    position: int | None = None
    """Next offset to take from the buffer; None until known (committed or reset)."""
    fetch_offset: int | None = None
    reset_to: OffsetSpec | None = None
    paused: bool = False
    buffer: deque[ConsumerRecord] = field(default_factory=deque)
    buffered_bytes: int = 0
    """Fetched bytes not yet handed out (estimated per record from the last fetch);
    the partition is fetched again only while this is below max_partition_fetch_bytes."""
    record_bytes: int = 0
    """Estimated bytes per buffered record: the last fetch's bytes / records."""
    generation: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    error: Exception | None = None

    def drop_buffer(self) -> None:
        self.buffer.clear()
        self.buffered_bytes = 0
        self.fetch_offset = self.position
        self.generation += 1


class Consumer:
    """An asyncio consumer; see the module docstring. Settings follow Kafka's names."""

    def __init__(
        self,
        *topics: str | Iterable[str],
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        client_id: str = "sluice-consumer",
        group_id: str | None = None,
        auto_offset_reset: OffsetReset = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        session_timeout_ms: int | None = None,
        heartbeat_interval_ms: int | None = None,
        max_poll_interval_ms: int = 300_000,
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        max_partition_fetch_bytes: int = 1024 * 1024,
        max_poll_records: int = 500,
        isolation_level: IsolationLevel | None = None,
        partition_assignment_strategy: Sequence[str] | None = None,
        group_instance_id: str | None = None,
        group_protocol: GroupProtocol = "classic",
        group_remote_assignor: str | None = None,
        client_rack: str | None = None,
        delivery: Delivery = "at-least-once",
        rebalance_listener: ConsumerRebalanceListener | None = None,
        request_timeout_ms: int = 30_000,
        retry_policy: RetryPolicy | None = None,
        **security: Unpack[SecurityOptions],
    ) -> None:
        """Check the settings (``ValueError`` naming the bad one); connect in start().
        ``isolation_level`` None means read_committed for ``delivery="exactly-once"``,
        else read_uncommitted (Kafka's default). ``retry_policy`` gives the group retry
        and dead-letter topics (:meth:`retry`, :meth:`dead_letter`): the consumer
        creates them if needed and also reads its retry topic. ``security`` holds
        ``security_protocol`` and its ``ssl_*``/``sasl_*`` options
        (:mod:`sluice.client.security`).

        ``group_protocol="consumer"`` joins groups with the consumer group protocol of
        KIP-848 (:mod:`sluice.client.consumer_membership`): the broker assigns, with
        ``group_remote_assignor`` (Kafka's group.remote.assignor; None: the broker's
        default) and ``client_rack``, and sets the heartbeat interval and session
        timeout itself, so, as in Kafka, ``session_timeout_ms``,
        ``heartbeat_interval_ms`` and ``partition_assignment_strategy`` are refused with
        it, and ``group_remote_assignor`` without it."""
        self._tls, self._sasl = security_for("Consumer", security, _OPTIONS)
        names = topic_names(topics, "Consumer")
        group_id = optional_str("group_id", "Consumer", group_id)
        if delivery not in ("at-least-once", "at-most-once", "exactly-once"):
            raise ValueError(f"unknown delivery mode {delivery!r}")
        if isolation_level is None:
            isolation_level = "read_committed" if delivery == "exactly-once" else "read_uncommitted"
        if delivery == "exactly-once":
            if isolation_level != "read_committed":
                raise ValueError(
                    'delivery="exactly-once" reads only committed records: leave '
                    'isolation_level unset or "read_committed"'
                )
            if group_id is None:
                raise ValueError('delivery="exactly-once" needs a group_id to commit offsets')
            enable_auto_commit = False
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto_offset_reset {auto_offset_reset!r} is not earliest/latest/none")
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"unknown isolation_level {isolation_level!r}")
        if not 0 <= fetch_max_wait_ms <= FETCH_WAIT_MS_MAX:
            raise ValueError(f"fetch_max_wait_ms must be in [0, {FETCH_WAIT_MS_MAX}]")
        if fetch_max_wait_ms >= request_timeout_ms:
            raise ValueError("fetch_max_wait_ms must be below request_timeout_ms")
        if group_protocol not in GROUP_PROTOCOLS:
            raise ValueError(
                f"group_protocol {group_protocol!r} is not one of "
                f"{', '.join(repr(p) for p in GROUP_PROTOCOLS)}"
            )
        classic_only = {
            "session_timeout_ms": session_timeout_ms,
            "heartbeat_interval_ms": heartbeat_interval_ms,
            "partition_assignment_strategy": partition_assignment_strategy,
        }
        if group_protocol == "consumer":
            for name, value in classic_only.items():
                if value is not None:
                    raise ValueError(
                        f'{name} cannot be set with group_protocol="consumer": the broker '
                        "sets the session timeout and heartbeat interval and assigns the "
                        "partitions (group_remote_assignor chooses its assignor)"
                    )
        elif group_remote_assignor is not None:
            raise ValueError(
                'group_remote_assignor needs group_protocol="consumer" (with "classic" the '
                "assignor is partition_assignment_strategy)"
            )
        group_remote_assignor = optional_str(
            "group_remote_assignor", "Consumer", group_remote_assignor
        )
        client_rack = optional_str("client_rack", "Consumer", client_rack)
        if session_timeout_ms is None:
            session_timeout_ms = SESSION_TIMEOUT_MS_DEFAULT
        if heartbeat_interval_ms is None:
            heartbeat_interval_ms = HEARTBEAT_INTERVAL_MS_DEFAULT
        if partition_assignment_strategy is None:
            partition_assignment_strategy = PARTITION_ASSIGNMENT_STRATEGY_DEFAULT
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be below session_timeout_ms")
        if max_poll_records < 1 or max_partition_fetch_bytes < 1 or fetch_max_bytes < 1:
            raise ValueError("max_poll_records and the fetch byte limits must be positive")
        if auto_commit_interval_ms < 1:
            raise ValueError("auto_commit_interval_ms must be positive")
        if names and group_id is None:
            raise ValueError("subscribing to topics needs a group_id (or use assign())")
        if retry_policy is not None and group_id is None:
            raise ValueError("retry_policy needs a group_id: retries belong to a group")
        self._assignors = assignors_named(list(partition_assignment_strategy))
        self.bootstrap_servers = bootstrap_servers
        self.client_id = client_id
        self.group_id = group_id
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.isolation_level = isolation_level
        self.group_instance_id = group_instance_id
        self.group_protocol = group_protocol
        self.group_remote_assignor = group_remote_assignor
        self.client_rack = client_rack
        self.delivery = delivery
        self.request_timeout_ms = request_timeout_ms
        self._listener = rebalance_listener
        self._initial_topics = names
        self._retrier = (
            None
            if retry_policy is None or group_id is None
            else Retrier(retry_policy, group_id, bootstrap_servers, client_id)
        )

        self._cluster: Cluster | None = None
        self._admin: Admin | None = None
        self._coordinators: GroupCoordinators | None = None
        self._membership: GroupMembership | ConsumerMembership | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._membership_task: asyncio.Task[None] | None = None
        self._failure: StoredFailure[BaseException] | None = None
        self._closed = False

        self._partitions: dict[TopicPartition, _PartitionState] = {}
        self._manual = False
        self._subscribed = False
        self._handed: dict[TopicPartition, int] = {}
        self._finished: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._iteration: deque[ConsumerRecord] = deque()
        self._rotation = 0
        self._data_ready = asyncio.Event()
        self._fetch_changed = asyncio.Event()
        """Set when partitions became fetchable in a way that warrants cancelling a
        fetch in flight (assignment, seek, resume, reset)."""
        self._wake_fetcher = asyncio.Event()
        """Set by every change that may make a partition fetchable (also a drained
        buffer); wakes an idle fetcher only."""
        self._failed = asyncio.Event()
        self._positions_lock = asyncio.Lock()
        self._refresh_metadata = False

    # ── lifecycle ──────────────────────────────────────────────────────────────────

    async def start(self) -> None:
        """Connect, start the fetcher, and subscribe to the topics given, if any.

        Raises :class:`~sluice.client.errors.BrokerUnreachableError` naming every
        bootstrap address when none can be reached (at once when they refuse
        connections: :meth:`Cluster.bootstrap`)."""
        assert self._cluster is None, "a Consumer is started once"
        self._cluster = Cluster(
            self.bootstrap_servers,
            client_id=self.client_id,
            request_timeout_s=self.request_timeout_ms / 1000,
            sasl=self._sasl,
            tls=self._tls,
        )
        try:
            await self._cluster.bootstrap()
        except BaseException:
            await self._cluster.close()
            raise
        self._admin = Admin(self._cluster)
        self._coordinators = self._admin.coordinators
        self._tasks.append(asyncio.create_task(self._guarded(self._fetch_loop), name="fetcher"))
        if self._should_commit_finished():
            self._tasks.append(
                asyncio.create_task(self._guarded(self._auto_commit_loop), name="committer")
            )
        if self._retrier is not None and self._initial_topics:
            partitions = [
                len(metadata.partitions)
                for metadata in (await self._cluster.metadata(self._initial_topics)).topics.values()
                if metadata.partitions
            ]
            await self._retrier.ensure_topics(self._admin, max(partitions, default=1))
        if self._initial_topics:
            self.subscribe(self._initial_topics)

    async def close(self, *, finished: bool = True) -> None:
        """Commit (at-least-once: every handed record when ``finished``, else only the
        finished ones), leave the group, stop the tasks and close connections."""
        if self._closed:
            return
        self._closed = True
        if finished:
            self._finished.update(self._handed)
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                if self._failure is None:
                    if self._membership is not None and self._membership_task is not None:
                        self._membership_task.cancel()
                        await asyncio.wait({self._membership_task})
                        await self._membership.leave()
                    elif self._should_commit_finished():
                        await self._commit_finished(list(self._partitions))
        finally:
            for task in self._tasks:
                task.cancel()
            if self._tasks:
                await asyncio.wait(self._tasks)
            if self._retrier is not None:
                await self._retrier.close()
            if self._cluster is not None:
                await self._cluster.close()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close(finished=exc is None)

    async def _guarded(self, body: Callable[[], Awaitable[None]]) -> None:
        """Run a background task; its failure is raised to the application. (``body``
        is called here, so a task cancelled before it ever ran leaves no coroutine
        unawaited.)"""
        try:
            await body()
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            self._failure = StoredFailure(e)
            self._failed.set()
            self._data_ready.set()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            self._failure.raise_again()
        if self._cluster is None:
            raise ClientError("the consumer is not started: use `async with` or await start()")
        if self._closed:
            raise ClientError("the consumer is closed")

    # ── subscription and assignment ────────────────────────────────────────────────

    def subscribe(
        self,
        topics: str | Iterable[str] = (),
        *,
        pattern: str | re.Pattern[str] | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Join ``group_id`` for ``topics`` (or every topic matching ``pattern``);
        partitions come and go by rebalance. ``topics`` is a list of names, or one name."""
        if self.group_id is None:
            raise ValueError("subscribe() needs a group_id; without one use assign()")
        if self._manual:
            raise ValueError("this consumer uses assign(); call unsubscribe() first")
        names = topic_names(topics, "subscribe()")
        if not names and pattern is None:
            raise ValueError("subscribe() needs topics or a pattern")
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        if compiled is not None and self.group_protocol == "consumer":
            check_broker_pattern(compiled)
        if self._retrier is not None and names and self._retrier.retry_topic not in names:
            names.append(self._retrier.retry_topic)
        if listener is not None:
            self._listener = listener
        self._subscribed = True
        if self._membership is None and self.group_protocol == "consumer":
            assert self._cluster is not None and self._coordinators is not None
            self._membership = ConsumerMembership(
                self._coordinators,
                TopicIds(self._cluster),
                group_id=self.group_id,
                rebalance_timeout_ms=self.max_poll_interval_ms,
                group_instance_id=self.group_instance_id,
                rack_id=self.client_rack,
                server_assignor=self.group_remote_assignor,
                on_revoke=self._on_revoke,
                on_assign=self._on_assign,
            )
        elif self._membership is None:
            assert self._cluster is not None and self._coordinators is not None
            self._membership = GroupMembership(
                self._cluster,
                self._coordinators,
                group_id=self.group_id,
                assignors=self._assignors,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.max_poll_interval_ms,
                heartbeat_interval_ms=self.heartbeat_interval_ms,
                group_instance_id=self.group_instance_id,
                on_revoke=self._on_revoke,
                on_assign=self._on_assign,
            )
        self._membership.subscribe(names, compiled)
        if self._membership_task is None or self._membership_task.done():
            self._membership_task = asyncio.create_task(
                self._guarded(self._membership.run), name="membership"
            )
            self._tasks.append(self._membership_task)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly ``partitions`` (no group membership)."""
        if self._subscribed:
            raise ValueError("this consumer uses subscribe(); call unsubscribe() first")
        self._manual = True
        self._set_assignment({TopicPartition(*tp) for tp in partitions})

    async def unsubscribe(self) -> None:
        """Leave the group (committing first) or drop the manual assignment."""
        if self._membership is not None:
            if self._membership_task is not None:
                self._membership_task.cancel()
                await asyncio.wait({self._membership_task})
                self._tasks.remove(self._membership_task)
                self._membership_task = None
            await self._membership.leave()
            self._membership = None
        self._set_assignment(set())
        self._subscribed = False
        self._manual = False

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer holds right now."""
        return set(self._partitions)

    def subscription(self) -> set[str]:
        return set(self._membership.topics) if self._membership is not None else set()

    def _set_assignment(self, partitions: set[TopicPartition]) -> None:
        for tp in list(self._partitions):
            if tp not in partitions:
                del self._partitions[tp]
                self._forget(tp)
        for tp in partitions:
            self._partitions.setdefault(tp, _PartitionState())
        self._changed()

    def _changed(self) -> None:
        self._fetch_changed.set()
        self._wake_fetcher.set()

    def _forget(self, tp: TopicPartition) -> None:
        self._handed.pop(tp, None)
        self._finished.pop(tp, None)
        self._committed.pop(tp, None)
        if any(r.topic_partition == tp for r in self._iteration):
            self._iteration = deque(r for r in self._iteration if r.topic_partition != tp)

    async def _on_revoke(self, revoked: set[TopicPartition], lost: bool) -> None:
        if not lost and self._should_commit_finished():
            try:
                await self._commit_finished(revoked)
            except (RebalanceError, KafkaError, ClientError):
                pass  # another member resumes from the last commit: records repeat
        if lost and hasattr(self._listener, "on_partitions_lost"):
            await self._call_listener("on_partitions_lost", revoked)
        else:
            await self._call_listener("on_partitions_revoked", revoked)
        self._set_assignment(set(self._partitions) - revoked)

    async def _on_assign(self, assigned: set[TopicPartition]) -> None:
        self._set_assignment(set(self._partitions) | assigned)
        await self._call_listener("on_partitions_assigned", assigned)

    async def _call_listener(self, name: str, partitions: set[TopicPartition]) -> None:
        if self._listener is None:
            return
        result = getattr(self._listener, name)(set(partitions))
        if inspect.isawaitable(result):
            await result

    # ── positions ──────────────────────────────────────────────────────────────────

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._partitions.get(TopicPartition(*tp))
        if state is None:
            raise ValueError(f"partition {tp} is not assigned to this consumer")
        return state

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read ``tp`` from ``offset`` next (buffered records of it are dropped)."""
        if offset < 0:
            raise ValueError(f"offset {offset} is negative")
        state = self._state(tp)
        state.position = offset
        state.reset_to = None
        state.error = None
        state.drop_buffer()
        self._forget_buffered(tp)
        self._changed()

    def _reset(self, partitions: Iterable[TopicPartition], spec: OffsetSpec) -> None:
        for tp in partitions or list(self._partitions):
            state = self._state(tp)
            state.position = None
            state.reset_to = spec
            state.error = None
            state.drop_buffer()
            self._forget_buffered(TopicPartition(*tp))
        self._changed()

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Read from the log start (of ``partitions``, or of every assigned one)."""
        self._reset(partitions, OffsetSpec.EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Read only records written from now on (of ``partitions`` or all)."""
        self._reset(partitions, OffsetSpec.LATEST)

    def _forget_buffered(self, tp: TopicPartition) -> None:
        if any(r.topic_partition == tp for r in self._iteration):
            self._iteration = deque(r for r in self._iteration if r.topic_partition != tp)

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching ``partitions``; their buffered records are dropped."""
        for tp in partitions:
            state = self._state(tp)
            state.paused = True
            state.drop_buffer()
            self._forget_buffered(TopicPartition(*tp))

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = False
        self._changed()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, state in self._partitions.items() if state.paused}

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record this consumer will hand out from ``tp``."""
        self._raise_failure()
        state = self._state(tp)
        if state.position is None:
            await self._resolve_positions()
            self._raise_partition_errors()
        assert state.position is not None
        return state.position

    def highwater(self, tp: TopicPartition) -> int | None:
        """High watermark of ``tp`` as of the last fetch, None before any."""
        high = self._state(tp).high_watermark
        return None if high < 0 else high

    def lag(self, tp: TopicPartition) -> int | None:
        """Records between the position and the high watermark (last fetch), or None."""
        state = self._state(tp)
        if state.high_watermark < 0 or state.position is None:
            return None
        return max(0, state.high_watermark - state.position)

    async def _resolve_positions(self) -> None:
        """Give every assigned partition without a position one: the committed offset
        (with a group), else the reset policy."""
        async with self._positions_lock:
            unknown = [
                tp
                for tp, s in self._partitions.items()
                if s.position is None and s.reset_to is None and s.error is None
            ]
            if unknown:
                committed: dict[TopicPartition, int] = {}
                if self.group_id is not None:
                    found = await self._fetch_committed(unknown)
                    committed = {tp: o.offset for tp, o in found.items()}
                for tp in unknown:
                    state = self._partitions.get(tp)
                    if state is None or state.position is not None or state.reset_to is not None:
                        continue
                    if tp in committed:
                        state.position = state.fetch_offset = committed[tp]
                        self._committed[tp] = committed[tp]
                    else:
                        self._apply_reset_policy(tp, state, "has no committed offset")
            await self._apply_resets()

    def _apply_reset_policy(self, tp: TopicPartition, state: _PartitionState, why: str) -> None:
        if self.auto_offset_reset == "none":
            state.error = NoOffsetForPartitionError(
                f"partition {tp} {why} and auto_offset_reset is 'none': seek it first"
            )
            self._data_ready.set()
        else:
            state.reset_to = (
                OffsetSpec.EARLIEST if self.auto_offset_reset == "earliest" else OffsetSpec.LATEST
            )

    async def _apply_resets(self) -> None:
        assert self._admin is not None
        for spec in (OffsetSpec.EARLIEST, OffsetSpec.LATEST):
            wanted = {tp: s.generation for tp, s in self._partitions.items() if s.reset_to is spec}
            if not wanted:
                continue
            listed = await self._admin.list_offsets(
                wanted, spec, read_committed=self.isolation_level == "read_committed"
            )
            for tp, generation in wanted.items():
                state = self._partitions.get(tp)
                if state is None or state.generation != generation or state.reset_to is not spec:
                    continue  # seeked or revoked meanwhile
                state.position = state.fetch_offset = listed[tp].offset
                state.reset_to = None

    def _raise_partition_errors(self) -> None:
        for state in self._partitions.values():
            if state.error is not None:
                error, state.error = state.error, None
                raise error

    # ── the fetcher ────────────────────────────────────────────────────────────────

    def _fetchable(self) -> dict[TopicPartition, _PartitionState]:
        return {
            tp: state
            for tp, state in self._partitions.items()
            if not state.paused
            and state.fetch_offset is not None
            and state.error is None
            and state.buffered_bytes < self.max_partition_fetch_bytes
        }

    async def _fetch_loop(self) -> None:
        """Keep one Fetch in flight per leader (see the module docstring)."""
        in_flight: dict[NodeId, asyncio.Task[None]] = {}
        fetching: dict[NodeId, set[TopicPartition]] = {}
        try:
            while True:
                self._wake_fetcher.clear()
                try:
                    await self._resolve_positions()
                    busy = {tp for partitions in fetching.values() for tp in partitions}
                    fetchable = {
                        tp: state for tp, state in self._fetchable().items() if tp not in busy
                    }
                    for leader, positions in (await self._by_leader(fetchable)).items():
                        if leader not in in_flight:
                            in_flight[leader] = asyncio.create_task(
                                self._fetch_from(leader, positions)
                            )
                            fetching[leader] = set(positions)
                    wake = asyncio.create_task(self._wake_fetcher.wait())
                    try:
                        await asyncio.wait(
                            {wake, *in_flight.values()},
                            # Partitions without a leader: look again after a pause.
                            timeout=RETRY_BACKOFF_S if self._refresh_metadata else None,
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                    finally:
                        wake.cancel()
                    if self._fetch_changed.is_set():
                        # Assignment, seek or resume: fetch anew from the new positions.
                        self._fetch_changed.clear()
                        await _cancel_all(in_flight.values())
                    for leader, task in list(in_flight.items()):
                        if task.done():
                            del in_flight[leader], fetching[leader]
                            if not task.cancelled():
                                task.result()
                except (ClientError, KafkaError) as e:
                    if not e.retriable:
                        raise
                    self._refresh_metadata = True
                    await asyncio.sleep(RETRY_BACKOFF_S)
        finally:
            await _cancel_all(in_flight.values())

    async def _by_leader(
        self, fetchable: Mapping[TopicPartition, _PartitionState]
    ) -> dict[NodeId, dict[TopicPartition, tuple[int, int]]]:
        """Fetch offset and generation of each partition, grouped by leader."""
        if not fetchable:
            return {}
        assert self._cluster is not None
        metadata = self._cluster.cached_metadata
        topics = {tp.topic for tp in fetchable}
        if self._refresh_metadata or metadata is None or not topics <= metadata.topics.keys():
            metadata = await self._cluster.metadata(topics)
            self._refresh_metadata = False
        by_leader: dict[NodeId, dict[TopicPartition, tuple[int, int]]] = {}
        for tp, state in fetchable.items():
            assert state.fetch_offset is not None
            try:
                leader = metadata.leader(tp)
            except KafkaError:
                self._refresh_metadata = True  # no leader now: retried with fresh metadata
                continue
            by_leader.setdefault(leader, {})[tp] = (state.fetch_offset, state.generation)
        return by_leader

    async def _fetch_from(
        self, leader: NodeId, positions: Mapping[TopicPartition, tuple[int, int]]
    ) -> None:
        assert self._cluster is not None
        connection = await self._cluster.connection(leader)
        by_topic: dict[str, list[TopicPartition]] = {}
        for tp in positions:
            by_topic.setdefault(tp.topic, []).append(tp)
        response = await connection.request(
            Request(
                ApiKey.FETCH,
                {
                    "replica_id": -1,
                    "max_wait": datetime.timedelta(milliseconds=self.fetch_max_wait_ms),
                    "min_bytes": self.fetch_min_bytes,
                    "max_bytes": self.fetch_max_bytes,
                    "isolation_level": 1 if self.isolation_level == "read_committed" else 0,
                    "session_id": 0,
                    "session_epoch": -1,
                    "topics": [
                        {
                            "topic": topic,
                            "partitions": [
                                {
                                    "partition": tp.partition,
                                    "fetch_offset": positions[tp][0],
                                    "partition_max_bytes": self.max_partition_fetch_bytes,
                                    "current_leader_epoch": -1,
                                    "log_start_offset": -1,
                                }
                                for tp in tps
                            ],
                        }
                        for topic, tps in by_topic.items()
                    ],
                    "forgotten_topics_data": [],
                    "rack_id": "",
                },
            ),
            timeout_s=connection.request_timeout_s + self.fetch_max_wait_ms / 1000,
        )
        if response.error_code != ErrorCode.none:
            raise errors.for_code(response.error_code)(f"fetch from {connection.address}")
        for topic in response.responses:
            for partition in topic.partitions:
                tp = TopicPartition(topic.topic, int(partition.partition_index))
                asked = positions.get(tp)
                state = self._partitions.get(tp)
                if asked is None or state is None:
                    continue
                fetch_offset, generation = asked
                if state.generation != generation or state.fetch_offset != fetch_offset:
                    continue  # seeked, paused or revoked while the fetch was in flight
                self._accept(tp, state, fetch_offset, partition)

    def _accept(
        self, tp: TopicPartition, state: _PartitionState, fetch_offset: int, partition: Any
    ) -> None:
        code = int(partition.error_code)
        if code == ErrorCode.offset_out_of_range:
            state.position = state.fetch_offset = None
            self._forget_buffered(tp)
            state.buffer.clear()
            state.buffered_bytes = 0
            self._apply_reset_policy(tp, state, f"has no offset {fetch_offset} any more")
            self._wake_fetcher.set()
            return
        if code in _METADATA_REFRESH_CODES:
            self._refresh_metadata = True
            return
        if code != ErrorCode.none:
            raise errors.for_code(code)(f"fetching {tp} from offset {fetch_offset}")
        state.high_watermark = int(partition.high_watermark)
        state.last_stable_offset = int(getattr(partition, "last_stable_offset", -1))
        data = partition.records or b""
        if not data:
            return
        aborted = self._aborted_transactions(partition)
        next_offset = fetch_offset
        aborting: set[int] = set()
        added = 0
        for batch in decode_batches(data):
            header = batch.header
            next_offset = max(next_offset, header.next_offset)
            # Kafka's rule: an aborted transaction starts counting at its first offset,
            # and its producer's ABORT marker ends it.
            while aborted and aborted[-1][0] <= header.last_offset:
                aborting.add(aborted.pop()[1])
            if header.is_control:
                aborting.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborting:
                continue
            timestamp_type = int(header.timestamp_type)
            topic, index = tp
            for r in batch.records:
                if r.offset < fetch_offset:
                    continue
                state.buffer.append(
                    _new_record(
                        topic,
                        index,
                        r.offset,
                        r.timestamp_ms,
                        r.key,
                        r.value,
                        r.headers,
                        timestamp_type,
                    )
                )
                added += 1
        state.fetch_offset = next_offset
        if added:
            state.record_bytes = len(data) // added
            state.buffered_bytes += len(data)
        if not state.buffer:
            state.position = next_offset  # only control batches or compacted gaps
        if added:
            self._data_ready.set()

    def _aborted_transactions(self, partition: Any) -> list[tuple[int, int]]:
        """(first offset, producer id) of the aborted transactions a read_committed
        fetch listed, the smallest first offset last (popped as batches pass it)."""
        if self.isolation_level != "read_committed":
            return []
        entries = getattr(partition, "aborted_transactions", None) or ()
        return sorted(
            ((int(entry.first_offset), int(entry.producer_id)) for entry in entries),
            reverse=True,
        )

    # ── handing records out ────────────────────────────────────────────────────────

    def _take(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to ``max_records`` buffered records, taking partitions in turn."""
        taken: dict[TopicPartition, list[ConsumerRecord]] = {}
        ready = [tp for tp, s in self._partitions.items() if s.buffer and not s.paused]
        if not ready:
            return taken
        self._rotation = (self._rotation + 1) % len(ready)
        ready = ready[self._rotation :] + ready[: self._rotation]
        remaining = max_records
        for tp in ready:
            if remaining <= 0:
                break
            state = self._partitions[tp]
            if remaining >= len(state.buffer):
                records = list(state.buffer)
                state.buffer.clear()
            else:
                records = [state.buffer.popleft() for _ in range(remaining)]
            remaining -= len(records)
            state.buffered_bytes = max(0, state.buffered_bytes - len(records) * state.record_bytes)
            state.position = records[-1].offset + 1
            if not state.buffer:
                state.buffered_bytes = 0
                if state.fetch_offset is not None:
                    state.position = max(state.position, state.fetch_offset)
            if state.buffered_bytes < self.max_partition_fetch_bytes:
                self._wake_fetcher.set()  # room again: an idle fetcher fetches it
            taken[tp] = records
        return taken

    def _finish_handed(self) -> None:
        """The application asked for more: what it was given before is finished."""
        self._finished.update(self._handed)

    async def getmany(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition: what is buffered now, else what arrives within
        ``timeout_ms`` (empty when nothing does). At most ``max_records`` (default
        ``max_poll_records``). Raises errors of the background tasks and partitions."""
        self._raise_failure()
        self._finish_handed()
        limit = self.max_poll_records if max_records is None else max_records
        assert limit > 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            self._raise_failure()
            self._raise_partition_errors()
            taken = self._take(limit)
            if taken:
                break
            self._data_ready.clear()
            remaining_s = deadline - loop.time()
            if remaining_s <= 0:
                return {}
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining_s):
                    await self._data_ready.wait()
        ends = {tp: records[-1].offset + 1 for tp, records in taken.items()}
        if self.delivery == "at-most-once" and self.group_id is not None:
            await self._commit(ends)
        self._handed.update(ends)
        return taken

    async def getone(self) -> ConsumerRecord:
        """The next record, waiting as long as it takes."""
        while not self._iteration:
            batch = await self.getmany(timeout_ms=self.fetch_max_wait_ms)
            for records in batch.values():
                self._iteration.extend(records)
            for tp in batch:
                # Handed one at a time below, not as a batch.
                self._handed.pop(tp, None)
        self._finish_handed()
        record = self._iteration.popleft()
        self._handed[record.topic_partition] = record.offset + 1
        return record

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while True:
            yield await self.getone()

    # ── commits ────────────────────────────────────────────────────────────────────

    def _should_commit_finished(self) -> bool:
        return (
            self.group_id is not None
            and self.delivery == "at-least-once"
            and self.enable_auto_commit
            and self._failure is None
        )

    async def _commit_finished(self, partitions: Iterable[TopicPartition]) -> None:
        offsets = {
            tp: offset
            for tp in partitions
            if (offset := self._finished.get(tp)) is not None and self._committed.get(tp) != offset
        }
        await self._commit(offsets)

    async def _auto_commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.auto_commit_interval_ms / 1000)
            try:
                await self._commit_finished(list(self._partitions))
            except RebalanceError:
                pass  # the rebalance commits on revocation itself

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (next offset to read, per partition), or by default the
        end of every record handed out so far. Raises :class:`RebalanceError` when the
        group rebalanced meanwhile."""
        self._raise_failure()
        if self.delivery == "exactly-once":
            raise ValueError(
                'with delivery="exactly-once" offsets are committed inside the producer\'s '
                "transaction: producer.send_offsets_to_transaction(offsets, "
                "consumer.group_metadata())"
            )
        if offsets is None:
            self._finish_handed()
            offsets = {tp: o for tp, o in self._finished.items() if tp in self._partitions}
        await self._commit(offsets)

    async def _commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if not offsets:
            return
        if self.group_id is None:
            raise ValueError("committing needs a group_id")
        assert self._coordinators is not None
        membership = self._membership
        if isinstance(membership, ConsumerMembership):
            await membership.commit(offsets)
        elif membership is not None:
            await commit_offsets(
                self._coordinators,
                self.group_id,
                offsets,
                generation_id=membership.generation_id,
                member_id=membership.member_id,
                group_instance_id=self.group_instance_id,
            )
        else:
            await commit_offsets(self._coordinators, self.group_id, offsets)
        self._committed.update(offsets)

    async def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of ``tp`` (None: nothing committed)."""
        self._raise_failure()
        if self.group_id is None:
            raise ValueError("committed offsets need a group_id")
        found = await self._fetch_committed([TopicPartition(*tp)])
        entry = found.get(TopicPartition(*tp))
        return None if entry is None else entry.offset

    async def _fetch_committed(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets; a member of a consumer group (KIP-848) asks
        with its member id and epoch, as the coordinator requires."""
        assert self.group_id is not None and self._coordinators is not None
        if isinstance(self._membership, ConsumerMembership):
            return await self._membership.fetch_committed(partitions)
        return await fetch_committed(self._coordinators, self.group_id, partitions)

    # ── offsets by spec ────────────────────────────────────────────────────────────

    async def _list(
        self, partitions: Iterable[TopicPartition], spec: int
    ) -> dict[TopicPartition, int]:
        self._raise_failure()
        assert self._admin is not None
        wanted = [TopicPartition(*tp) for tp in partitions]
        if not wanted:
            return {}
        listed = await self._admin.list_offsets(
            wanted, spec, read_committed=self.isolation_level == "read_committed"
        )
        return {tp: entry.offset for tp, entry in listed.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Offset after the last readable record of each partition."""
        return await self._list(partitions, OffsetSpec.LATEST)

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""
        return await self._list(partitions, OffsetSpec.EARLIEST)

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first record whose timestamp is at least the given ms
        (None when every record is older)."""
        self._raise_failure()
        assert self._admin is not None
        by_time: dict[int, list[TopicPartition]] = {}
        for tp, timestamp in timestamps.items():
            if timestamp < 0:
                raise ValueError(f"timestamp {timestamp} of {tp} is negative")
            by_time.setdefault(timestamp, []).append(TopicPartition(*tp))
        found: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for timestamp, partitions in by_time.items():
            listed = await self._admin.list_offsets(partitions, timestamp)
            for tp, entry in listed.items():
                found[tp] = (
                    None
                    if entry.offset == NO_OFFSET
                    else OffsetAndTimestamp(entry.offset, entry.timestamp_ms)
                )
        return found

    async def partitions_for_topic(self, topic: str) -> set[int]:
        """Partition indexes of ``topic``."""
        assert self._cluster is not None
        metadata = await self._cluster.metadata([topic])
        return {p.partition for p in metadata.topic(topic).partitions}

    # ── exactly-once ───────────────────────────────────────────────────────────────

    def group_metadata(self) -> GroupMetadata:
        """The group, generation and member this consumer is, for
        ``producer.send_offsets_to_transaction``: the commit is refused if the group
        rebalanced since (the partitions may belong to another member now)."""
        if self.group_id is None:
            raise ValueError("group_metadata() needs a group_id")
        membership = self._membership
        if membership is None:
            return GroupMetadata(self.group_id, group_instance_id=self.group_instance_id)
        return GroupMetadata(
            self.group_id,
            membership.generation_id,
            membership.member_id,
            self.group_instance_id,
        )

    async def retry(self, record: ConsumerRecord, error: BaseException | str) -> str:
        """Handling ``record`` failed: send it to the group's retry topic, to come back
        after the policy's backoff for its attempt (or, out of attempts, to the
        dead-letter topic), with the group's offset past it, in one transaction.
        Returns the topic it went to. See :mod:`sluice.client.retries`."""
        return await self._move(record, error, dead=False)

    async def dead_letter(self, record: ConsumerRecord, error: BaseException | str) -> str:
        """Send ``record`` to the group's dead-letter topic at once (the error is not
        worth retrying), with the group's offset past it, in one transaction."""
        return await self._move(record, error, dead=True)

    async def _move(self, record: ConsumerRecord, error: BaseException | str, *, dead: bool) -> str:
        if self._retrier is None:
            raise ValueError("retry() and dead_letter() need a retry_policy")
        self._raise_failure()
        topic = await self._retrier.move(record, error, self.group_metadata(), dead=dead)
        tp = record.topic_partition
        # Committed by the transaction: never commit below it again.
        self._committed[tp] = max(self._committed.get(tp, 0), record.offset + 1)
        self._finished[tp] = max(self._finished.get(tp, 0), record.offset + 1)
        return topic

    def positions(self) -> dict[TopicPartition, int]:
        """The next offset to hand out of each assigned partition whose position is
        known: what a transaction commits after processing what was handed out."""
        return {
            tp: state.position
            for tp, state in self._partitions.items()
            if state.position is not None
        }

    async def rewind_to_committed(self) -> None:
        """Seek every assigned partition back to the group's committed offset (after an
        aborted transaction: its records are handed out again). Partitions without one
        follow ``auto_offset_reset``."""
        self._raise_failure()
        if self.group_id is None:
            raise ValueError("rewind_to_committed() needs a group_id")
        for tp, state in self._partitions.items():
            state.position = None
            state.reset_to = None
            state.error = None
            state.drop_buffer()
            self._forget_buffered(tp)
        self._handed.clear()
        self._iteration.clear()
        self._changed()
        await self._resolve_positions()

    # ── group state, for callers and tests ─────────────────────────────────────────

    @property
    def member_id(self) -> str | None:
        return self._membership.member_id if self._membership is not None else None

    async def wait_for_assignment(self, timeout_s: float = 30.0) -> set[TopicPartition]:
        """Wait until the group gave this member an assignment (possibly empty)."""
        assert self._membership is not None, "wait_for_assignment() needs subscribe()"
        async with asyncio.timeout(timeout_s):
            while not self._membership.stable.is_set():
                self._raise_failure()
                waiter = asyncio.create_task(self._membership.stable.wait())
                failed = asyncio.create_task(self._failed.wait())
                await asyncio.wait({waiter, failed}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                failed.cancel()
                self._raise_failure()
        return self.assignment()


_OPTIONS = option_names(Consumer.__init__)
