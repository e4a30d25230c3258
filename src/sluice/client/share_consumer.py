"""``sluice.ShareConsumer``: a queue on a topic (share groups, KIP-932), asyncio.

::

    async with sluice.ShareConsumer("jobs", bootstrap_servers="127.0.0.1:9092",
                                    group_id="workers",
                                    acknowledgement_mode="explicit") as consumer:
        while True:
            for record in await consumer.poll(timeout_s=1.0):
                try:
                    handle(record)
                    consumer.accept(record)
                except Retryable:
                    consumer.release(record)   # delivered again, delivery_count + 1
                except Exception:
                    consumer.reject(record)    # never delivered again
            errors = await consumer.commit()   # {partition: error or None}

Any number of share consumers may read the same partitions: the broker hands each
record to one of them at a time, locked for the acquisition lock time, until it is
acknowledged (ACCEPT, RELEASE, REJECT; RENEW extends the lock, brokers with
ShareFetch/ShareAcknowledge v2 only).

Inside:

- the **membership** task heartbeats the group's coordinator and learns which
  partitions to fetch (:mod:`sluice.client.share_membership`);
- :meth:`ShareConsumer.poll` fetches: one *share session* per partition leader, opened
  by a ShareFetch with session epoch 0 and continued with epochs 1, 2, 3… Each request
  names only partitions new to the session (and those with acknowledgements), and
  forgets those the assignment dropped. Acknowledgements decided since the last request
  to a leader ride on its next ShareFetch, or go at once with :meth:`commit`
  (ShareAcknowledge). The answer's records are handed out only where the broker says
  they were acquired; acquired offsets without a record are acknowledged as GAP
  (:mod:`sluice.client.share_records`);
- :meth:`close` releases every record still held (or, in implicit mode, accepts those
  handed out), closes the sessions (epoch -1) and leaves the group (epoch -1), so the
  records go to the other members at once rather than when their locks expire.

In ``implicit`` acknowledgement mode each poll (and commit, and a clean close) accepts
every record the previous poll handed out; in ``explicit`` mode the application decides
each record, and polling again before deciding all of them is an error.

Requests to one leader are sent one at a time (a session's epochs must arrive in order),
so a commit waits for a poll's fetch in flight to the same leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Unpack

from sluice.client.arguments import optional_str, topic_names
from sluice.client.cluster import BOOTSTRAP_ATTEMPTS, Cluster
from sluice.client.errors import (
    ClientError,
    ConnectionClosedError,
    RequestTimedOutError,
    UnsupportedApiError,
)
from sluice.client.failure import StoredFailure
from sluice.client.groups import GroupCoordinators
from sluice.client.messages import Request
from sluice.client.security import SecurityOptions, option_names, security_for
from sluice.client.share_membership import ShareMembership, TopicIds
from sluice.client.share_records import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    AcknowledgeType,
    AcquiredRange,
    ShareConsumerRecord,
    acknowledgement_batches,
    acquired_partition,
    has_renew,
    next_epoch,
)
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import NodeId, TopicPartition
from sluice.common.limits import FETCH_WAIT_MS_MAX
from sluice.protocol.versions import ApiKey, api_name

__all__ = ["AcknowledgeType", "AcknowledgementMode", "ShareConsumer", "ShareConsumerRecord"]

AcknowledgementMode = Literal["implicit", "explicit"]

RENEW_VERSION = 2
"""ShareFetch and ShareAcknowledge version that carries RENEW acknowledgements."""

CLOSE_TIMEOUT_S = 30.0
"""How long close() may spend releasing records, closing sessions and leaving."""

RETRY_BACKOFF_S = 0.1
"""Pause after a fetch round that failed in a way a retry may cure."""

_SESSION_RESET_CODES = frozenset(
    {
        ErrorCode.share_session_not_found,
        ErrorCode.invalid_share_session_epoch,
        ErrorCode.share_session_limit_reached,
    }
)
"""Top-level answers after which the session is opened anew (epoch 0)."""

_MEMBER_CODES = frozenset({ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch})

_METADATA_REFRESH_CODES = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.kafka_storage_error,
        ErrorCode.replica_not_available,
    }
)

Decisions = dict[TopicPartition, dict[int, AcknowledgeType]]
"""Acknowledgements not yet sent: partition → offset → type."""

AcknowledgementResults = dict[TopicPartition, KafkaError | None]
"""Per partition, the error the broker answered acknowledgements with (None: applied)."""


@dataclass(slots=True)
class _Session:
    """The share session with one leader broker."""

    epoch: int = INITIAL_EPOCH
    partitions: set[TopicPartition] = field(default_factory=set)
    """Partitions the broker holds in the session."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def reset(self) -> None:
        self.epoch = INITIAL_EPOCH
        self.partitions.clear()


class ShareConsumer:
    """A member of a share group; see the module docstring. Settings follow Kafka's
    names (``share.acknowledgement.mode`` → ``acknowledgement_mode``)."""

    def __init__(
        self,
        *topics: str | Iterable[str],
        group_id: str,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        client_id: str = "sluice-share-consumer",
        acknowledgement_mode: AcknowledgementMode = "implicit",
        max_poll_records: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        request_timeout_ms: int = 30_000,
        rack_id: str | None = None,
        **security: Unpack[SecurityOptions],
    ) -> None:
        """Check the settings (``ValueError`` naming the bad one); connect in start().
        ``security`` holds ``security_protocol`` and its ``ssl_*``/``sasl_*`` options
        (:mod:`sluice.client.security`)."""
        self._tls, self._sasl = security_for("ShareConsumer", security, _OPTIONS)
        names = topic_names(topics, "ShareConsumer")
        optional_str("group_id", "ShareConsumer", group_id)
        if not names:
            raise ValueError("a ShareConsumer needs at least one topic to read")
        if not group_id:
            raise ValueError("a ShareConsumer needs a group_id: the share group to join")
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise ValueError(
                f"acknowledgement_mode {acknowledgement_mode!r} is not 'implicit' or 'explicit'"
            )
        if max_poll_records < 1 or fetch_max_bytes < 1 or fetch_min_bytes < 0:
            raise ValueError("max_poll_records and fetch_max_bytes must be positive")
        if not 0 <= fetch_max_wait_ms <= FETCH_WAIT_MS_MAX:
            raise ValueError(f"fetch_max_wait_ms must be in [0, {FETCH_WAIT_MS_MAX}]")
        if fetch_max_wait_ms >= request_timeout_ms:
            raise ValueError("fetch_max_wait_ms must be below request_timeout_ms")
        self.topics = sorted(set(names))
        self.group_id = group_id
        self.bootstrap_servers = bootstrap_servers
        self.client_id = client_id
        self.acknowledgement_mode = acknowledgement_mode
        self.max_poll_records = max_poll_records
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.request_timeout_ms = request_timeout_ms
        self.rack_id = rack_id

        self._cluster: Cluster | None = None
        self._topic_ids: TopicIds | None = None
        self._membership: ShareMembership | None = None
        self._membership_task: asyncio.Task[None] | None = None
        self._failure: StoredFailure[BaseException] | None = None
        self._failed = asyncio.Event()
        self._closed = False
        self._sessions: dict[NodeId, _Session] = {}
        self._buffer: deque[ShareConsumerRecord] = deque()
        """Acquired records not yet handed out."""
        self._handed: dict[tuple[TopicPartition, int], ShareConsumerRecord] = {}
        """Records handed out and not yet accepted, released or rejected."""
        self._pending: Decisions = {}
        self._results: AcknowledgementResults = {}
        """Answers to acknowledgements sent since the last commit()."""
        self._refresh_metadata = True
        self._renew_supported = False

    # ── lifecycle ──────────────────────────────────────────────────────────────────

    async def start(self) -> None:
        """Connect, check the broker serves share groups, and join the group."""
        assert self._cluster is None, "a ShareConsumer is started once"
        self._cluster = Cluster(
            self.bootstrap_servers,
            client_id=self.client_id,
            request_timeout_s=self.request_timeout_ms / 1000,
            sasl=self._sasl,
            tls=self._tls,
        )
        try:
            connection = await self._cluster.any_connection(attempts=BOOTSTRAP_ATTEMPTS)
            for api in (ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE):
                if not connection.supports(api):
                    raise UnsupportedApiError(
                        f"broker at {connection.address} does not serve share groups "
                        f"({api_name(api)} is missing from its ApiVersions): use a broker with "
                        "KIP-932 share groups"
                    )
            self._renew_supported = (
                connection.version_for(ApiKey.SHARE_FETCH) >= RENEW_VERSION
                and connection.version_for(ApiKey.SHARE_ACKNOWLEDGE) >= RENEW_VERSION
            )
            self._topic_ids = TopicIds(self._cluster)
            await self._topic_ids.metadata(self.topics)
            self._membership = ShareMembership(
                GroupCoordinators(self._cluster, timeout_s=self.request_timeout_ms / 1000),
                self._topic_ids,
                group_id=self.group_id,
                topics=self.topics,
                rack_id=self.rack_id,
            )
            await self._membership.heartbeat()
        except BaseException:
            await self._cluster.close()
            raise
        self._membership_task = asyncio.create_task(
            self._guarded(self._membership.run), name="share-membership"
        )

    async def close(self, *, finished: bool = True) -> None:
        """Give back every record still held: in implicit mode the records handed out
        are accepted when ``finished`` (else released); records not yet handed out, and
        in explicit mode those not acknowledged, are released. Then close the share
        sessions and leave the group."""
        if self._closed:
            return
        self._closed = True
        if self._membership_task is not None:
            # No heartbeat may follow the leave (it would join the group again).
            self._membership_task.cancel()
            await asyncio.wait({self._membership_task})
        try:
            if self._failure is None and self._membership is not None:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    give_back = (
                        AcknowledgeType.ACCEPT
                        if finished and self.acknowledgement_mode == "implicit"
                        else AcknowledgeType.RELEASE
                    )
                    self._acknowledge_handed(give_back)
                    while self._buffer:
                        self._decide(self._buffer.popleft(), AcknowledgeType.RELEASE)
                    await self._close_sessions()
                    await self._membership.leave()
        finally:
            if self._cluster is not None:
                await self._cluster.close()

    async def __aenter__(self) -> ShareConsumer:
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
        """Run a background task; its failure is raised to the application. The
        coroutine is made inside the task, so a task cancelled before it ran leaves
        none behind unawaited."""
        try:
            await body()
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            self._failure = StoredFailure(e)
            self._failed.set()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            self._failure.raise_again()
        if self._cluster is None:
            raise ClientError("the share consumer is not started: use `async with` or start()")
        if self._closed:
            raise ClientError("the share consumer is closed")

    # ── state, for callers and tests ───────────────────────────────────────────────

    @property
    def member_id(self) -> str | None:
        return self._membership.member_id if self._membership is not None else None

    def assignment(self) -> set[TopicPartition]:
        """The partitions the group asked this member to fetch."""
        return set(self._membership.assignment) if self._membership is not None else set()

    async def wait_for_assignment(self, timeout_s: float = 30.0) -> set[TopicPartition]:
        """Wait until the coordinator gave this member an assignment (maybe empty)."""
        self._raise_failure()
        assert self._membership is not None
        async with asyncio.timeout(timeout_s):
            await self._wait_any(self._membership.assigned.wait())
        self._raise_failure()
        return self.assignment()

    async def _wait_any(self, awaitable: Any) -> None:
        """Wait for ``awaitable`` or a failure of the membership task."""
        waiter = asyncio.ensure_future(awaitable)
        failed = asyncio.ensure_future(self._failed.wait())
        try:
            await asyncio.wait({waiter, failed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            failed.cancel()

    # ── records ────────────────────────────────────────────────────────────────────

    async def poll(self, timeout_s: float = 0.0) -> list[ShareConsumerRecord]:
        """Records acquired for this member: what is buffered now, else what arrives
        within ``timeout_s`` (an empty list when nothing does), at most
        ``max_poll_records``. Acknowledgements decided since the last request ride
        on the fetch. In implicit mode the previous poll's records are accepted first;
        in explicit mode each must have been accepted, released or rejected."""
        self._raise_failure()
        if self.acknowledgement_mode == "implicit":
            self._acknowledge_handed(AcknowledgeType.ACCEPT)
        elif self._handed:
            raise ClientError(
                f"{len(self._handed)} record(s) of the last poll are not acknowledged: in "
                "explicit mode call accept(), release() or reject() on each before polling again"
            )
        assert self._membership is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        fetched_once = False
        while True:
            self._raise_failure()
            if self._buffer:
                return self._hand_out()
            remaining_s = deadline - loop.time()
            if fetched_once and remaining_s <= 0:
                return []
            if not self._membership.assigned.is_set() and not self._pending:
                if remaining_s <= 0:
                    return []
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining_s):
                        await self._wait_any(self._membership.assigned.wait())
                continue
            if not self._membership.assignment and not self._pending and fetched_once:
                self._membership.changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(remaining_s, 0.0)):
                        await self._wait_any(self._membership.changed.wait())
                continue
            wait_ms = max(0, min(int(remaining_s * 1000), self.fetch_max_wait_ms))
            fetched_once = True
            if not await self._fetch_round(wait_ms):
                await asyncio.sleep(min(RETRY_BACKOFF_S, max(deadline - loop.time(), 0.0)))

    def _hand_out(self) -> list[ShareConsumerRecord]:
        handed: list[ShareConsumerRecord] = []
        while self._buffer and len(handed) < self.max_poll_records:
            record = self._buffer.popleft()
            self._handed[(record.topic_partition, record.offset)] = record
            handed.append(record)
        return handed

    # ── acknowledging ──────────────────────────────────────────────────────────────

    def accept(self, record: ShareConsumerRecord) -> None:
        """Processed: the record is never delivered again."""
        self._acknowledge(record, AcknowledgeType.ACCEPT)

    def release(self, record: ShareConsumerRecord) -> None:
        """Not processed: the record is delivered again (to any member) with its
        delivery count raised, up to the group's delivery attempt limit."""
        self._acknowledge(record, AcknowledgeType.RELEASE)

    def reject(self, record: ShareConsumerRecord) -> None:
        """Unprocessable: the record is never delivered again."""
        self._acknowledge(record, AcknowledgeType.REJECT)

    def renew(self, record: ShareConsumerRecord) -> None:
        """Still working on it: extend the record's acquisition lock (sent with the next
        request; the record stays to be accepted, released or rejected). Needs a broker
        with ShareFetch and ShareAcknowledge v2."""
        if not self._renew_supported:
            raise UnsupportedApiError(
                "renew() needs ShareFetch and ShareAcknowledge v2 (KIP-1222), which this "
                "broker does not serve: finish the record within the acquisition lock "
                "time, or release() it"
            )
        key = self._handed_key(record)
        self._pending.setdefault(key[0], {})[key[1]] = AcknowledgeType.RENEW

    def acknowledge(self, record: ShareConsumerRecord, kind: AcknowledgeType) -> None:
        """:meth:`accept`, :meth:`release`, :meth:`reject` or :meth:`renew` by type."""
        if kind == AcknowledgeType.RENEW:
            self.renew(record)
        elif kind == AcknowledgeType.GAP:
            raise ValueError("GAP is for offsets without a record; the client sends it itself")
        else:
            self._acknowledge(record, kind)

    def _acknowledge(self, record: ShareConsumerRecord, kind: AcknowledgeType) -> None:
        key = self._handed_key(record)
        self._decide(self._handed.pop(key), kind)

    def _handed_key(self, record: ShareConsumerRecord) -> tuple[TopicPartition, int]:
        key = (record.topic_partition, record.offset)
        if key not in self._handed:
            raise ValueError(
                f"record {record.topic}-{record.partition}@{record.offset} is not held by this "
                "share consumer: it was already acknowledged, or not delivered by its poll()"
            )
        return key

    def _decide(self, record: ShareConsumerRecord, kind: AcknowledgeType) -> None:
        self._pending.setdefault(record.topic_partition, {})[record.offset] = kind

    def _acknowledge_handed(self, kind: AcknowledgeType) -> None:
        handed, self._handed = self._handed, {}
        for record in handed.values():
            self._decide(record, kind)

    async def commit(self) -> AcknowledgementResults:
        """Send the acknowledgements decided so far (ShareAcknowledge to each leader;
        in implicit mode the records handed out are accepted first) and return, per
        partition whose acknowledgements were sent since the last commit (also those
        that rode on fetches), the broker's error or None. INVALID_RECORD_STATE means
        a record's lock had expired: it may have gone to another member."""
        self._raise_failure()
        if self.acknowledgement_mode == "implicit":
            self._acknowledge_handed(AcknowledgeType.ACCEPT)
        if self._pending:
            by_leader = await self._by_leader(set(self._pending))
            await asyncio.gather(
                *(self._acknowledge_on(node, partitions) for node, partitions in by_leader.items())
            )
        results, self._results = self._results, {}
        return results

    # ── leaders and topic ids ──────────────────────────────────────────────────────

    async def _by_leader(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[NodeId, set[TopicPartition]]:
        assert self._cluster is not None
        wanted = set(partitions)
        metadata = self._cluster.cached_metadata
        if (
            self._refresh_metadata
            or metadata is None
            or any(tp.topic not in metadata.topics for tp in wanted)
        ):
            metadata = await self._cluster.metadata(sorted({tp.topic for tp in wanted}))
            self._refresh_metadata = False
        by_leader: dict[NodeId, set[TopicPartition]] = {}
        for tp in wanted:
            try:
                leader = metadata.leader(tp)
            except KafkaError:
                self._refresh_metadata = True
                continue
            by_leader.setdefault(leader, set()).add(tp)
        return by_leader

    async def _topic_id(self, topic: str) -> uuid.UUID:
        assert self._topic_ids is not None
        topic_id = self._topic_ids.id_of(topic)
        if topic_id is None:
            await self._topic_ids.metadata([topic])
            topic_id = self._topic_ids.id_of(topic)
        if topic_id is None:
            raise errors.UnknownTopicOrPartition(f"topic {topic!r} does not exist")
        return topic_id

    async def _by_topic_id(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[uuid.UUID, list[TopicPartition]]:
        grouped: dict[uuid.UUID, list[TopicPartition]] = {}
        for tp in sorted(partitions):
            grouped.setdefault(await self._topic_id(tp.topic), []).append(tp)
        return grouped

    def _name_of(self, topic_id: uuid.UUID | None) -> str | None:
        assert self._topic_ids is not None
        return None if topic_id is None else self._topic_ids.name_of(topic_id)

    # ── fetching ───────────────────────────────────────────────────────────────────

    async def _fetch_round(self, max_wait_ms: int) -> bool:
        """One ShareFetch to every leader of an assigned partition, of a partition with
        acknowledgements, or holding a session with partitions to forget. False when
        a leader's answer asks for a pause before the next round."""
        assert self._membership is not None
        assigned = set(self._membership.assignment)
        by_leader = await self._by_leader(assigned | set(self._pending))
        wanted = {node: partitions & assigned for node, partitions in by_leader.items()}
        for node, session in self._sessions.items():
            if session.partitions:
                wanted.setdefault(node, set())
        if not wanted:
            return not self._refresh_metadata
        outcomes = await asyncio.gather(
            *(
                self._fetch_from(node, partitions, by_leader.get(node, set()), max_wait_ms)
                for node, partitions in wanted.items()
            ),
            return_exceptions=True,
        )
        healthy = True
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                if isinstance(outcome, ClientError | KafkaError) and outcome.retriable:
                    # Leadership moving, a broker away: ask where the partitions are
                    # and try again (a reset session is opened anew).
                    healthy = False
                    self._refresh_metadata = True
                    continue
                raise outcome
            healthy = healthy and outcome
        return healthy and not self._refresh_metadata

    def _take_acks(self, partitions: Iterable[TopicPartition]) -> Decisions:
        taken: Decisions = {}
        for tp in partitions:
            decisions = self._pending.pop(tp, None)
            if decisions:
                taken[tp] = decisions
        return taken

    def _restore_acks(self, taken: Decisions) -> None:
        for tp, decisions in taken.items():
            newer = self._pending.get(tp, {})
            self._pending[tp] = {**decisions, **newer}

    async def _fetch_from(
        self,
        node: NodeId,
        wanted: set[TopicPartition],
        led: set[TopicPartition],
        max_wait_ms: int,
    ) -> bool:
        assert self._cluster is not None and self._membership is not None
        session = self._sessions.setdefault(node, _Session())
        async with session.lock:
            epoch = session.epoch
            # Acknowledgements cannot open a session: they wait for the next request.
            acks = self._take_acks(led) if epoch != INITIAL_EPOCH else {}
            if epoch == INITIAL_EPOCH:
                send, forget = set(wanted), set[TopicPartition]()
            else:
                send = (wanted - session.partitions) | set(acks)
                forget = session.partitions - wanted - set(acks)
            batches = {tp: acknowledgement_batches(d) for tp, d in acks.items()}
            renewing = any(has_renew(b) for b in batches.values())
            try:
                connection = await self._cluster.connection(node)
                fields = {
                    "group_id": self.group_id,
                    "member_id": self._membership.member_id,
                    "share_session_epoch": epoch,
                    "max_wait": datetime.timedelta(milliseconds=max_wait_ms),
                    "min_bytes": self.fetch_min_bytes,
                    "max_bytes": self.fetch_max_bytes,
                    "max_records": self.max_poll_records,
                    "batch_size": self.max_poll_records,
                    "share_acquire_mode": 0,
                    "is_renew_ack": renewing,
                    "topics": [
                        {
                            "topic_id": topic_id,
                            "partitions": [
                                {
                                    "partition_index": tp.partition,
                                    "acknowledgement_batches": [
                                        b.as_fields() for b in batches.get(tp, ())
                                    ],
                                }
                                for tp in tps
                            ],
                        }
                        for topic_id, tps in (await self._by_topic_id(send)).items()
                    ],
                    "forgotten_topics_data": [
                        {"topic_id": topic_id, "partitions": [tp.partition for tp in tps]}
                        for topic_id, tps in (await self._by_topic_id(forget)).items()
                    ],
                }
                response = await connection.request(
                    Request(ApiKey.SHARE_FETCH, fields),
                    timeout_s=connection.request_timeout_s + max_wait_ms / 1000,
                )
            except ClientError as e:
                self._restore_acks(acks)
                if not e.retriable:
                    raise
                # Unreachable, or whether the broker saw this epoch is unknown: start a
                # new session once metadata says where the partitions are.
                session.reset()
                self._refresh_metadata = True
                raise
            except BaseException:
                self._restore_acks(acks)
                raise
            code = int(response.error_code)
            if code != ErrorCode.none:
                self._restore_acks(acks)
                return self._session_failed(session, code, response, "share fetch")
            session.partitions = (session.partitions | send) - forget
            session.epoch = next_epoch(epoch)
            self._read_fetched(response, acks)
            return True

    def _session_failed(self, session: _Session, code: int, response: Any, what: str) -> bool:
        """React to a top-level error of a session's request; False: retry later."""
        assert self._membership is not None
        if code in _SESSION_RESET_CODES:
            session.reset()
            return False
        if code in _MEMBER_CODES:
            session.reset()
            self._membership.rejoin_soon()
            return False
        message = getattr(response, "error_message", None)
        raise errors.for_code(code)(
            f"{what} for share group {self.group_id!r}" + (f": {message}" if message else "")
        )

    def _read_fetched(self, response: Any, acks: Mapping[TopicPartition, object]) -> None:
        for topic in response.responses:
            name = self._name_of(topic.topic_id)
            if name is None:
                self._refresh_metadata = True
                continue
            for partition in topic.partitions:
                tp = TopicPartition(name, int(partition.partition_index))
                if tp in acks:
                    self._results[tp] = _error_or_none(
                        int(partition.acknowledge_error_code),
                        partition.acknowledge_error_message,
                        f"acknowledging records of {tp}",
                    )
                code = int(partition.error_code)
                if code in _METADATA_REFRESH_CODES:
                    self._refresh_metadata = True
                    continue
                if code != ErrorCode.none:
                    raise errors.for_code(code)(
                        f"share fetch of {tp}"
                        + (f": {partition.error_message}" if partition.error_message else "")
                    )
                ranges = [
                    AcquiredRange(int(r.first_offset), int(r.last_offset), int(r.delivery_count))
                    for r in partition.acquired_records
                ]
                acquired = acquired_partition(
                    tp.topic, tp.partition, bytes(partition.records or b""), ranges
                )
                self._buffer.extend(acquired.records)
                if acquired.gaps:
                    gaps = self._pending.setdefault(tp, {})
                    for offset in acquired.gaps:
                        gaps[offset] = AcknowledgeType.GAP

    # ── acknowledging and closing sessions ─────────────────────────────────────────

    async def _acknowledge_on(
        self, node: NodeId, partitions: set[TopicPartition], *, final: bool = False
    ) -> None:
        """ShareAcknowledge the pending decisions of ``partitions`` to ``node``; with
        ``final`` the session is closed too (epoch -1)."""
        assert self._cluster is not None and self._membership is not None
        session = self._sessions.setdefault(node, _Session())
        async with session.lock:
            if session.epoch == INITIAL_EPOCH and not final:
                # No session to carry them (it was reset): open one, without fetching.
                await self._open_empty_session(node, session)
            if session.epoch == INITIAL_EPOCH:
                return  # nothing was ever fetched from this broker by this session
            acks = self._take_acks(partitions)
            if not acks and not final:
                return
            batches = {tp: acknowledgement_batches(d) for tp, d in acks.items()}
            epoch = FINAL_EPOCH if final else session.epoch
            try:
                connection = await self._cluster.connection(node)
                response = await connection.request(
                    Request(
                        ApiKey.SHARE_ACKNOWLEDGE,
                        {
                            "group_id": self.group_id,
                            "member_id": self._membership.member_id,
                            "share_session_epoch": epoch,
                            "is_renew_ack": any(has_renew(b) for b in batches.values()),
                            "topics": [
                                {
                                    "topic_id": topic_id,
                                    "partitions": [
                                        {
                                            "partition_index": tp.partition,
                                            "acknowledgement_batches": [
                                                b.as_fields() for b in batches[tp]
                                            ],
                                        }
                                        for tp in tps
                                    ],
                                }
                                for topic_id, tps in (await self._by_topic_id(acks)).items()
                            ],
                        },
                    )
                )
            except (ConnectionClosedError, RequestTimedOutError):
                session.reset()
                self._restore_acks(acks)
                self._refresh_metadata = True
                raise
            except BaseException:
                self._restore_acks(acks)
                raise
            code = int(response.error_code)
            if code != ErrorCode.none:
                self._restore_acks(acks)
                self._session_failed(session, code, response, "share acknowledge")
                return
            if final:
                session.reset()
            else:
                session.epoch = next_epoch(epoch)
            for topic in response.responses:
                name = self._name_of(topic.topic_id)
                for partition in topic.partitions:
                    if name is None:
                        continue
                    tp = TopicPartition(name, int(partition.partition_index))
                    code = int(partition.error_code)
                    if code in _METADATA_REFRESH_CODES:
                        self._refresh_metadata = True
                    self._results[tp] = _error_or_none(
                        code, partition.error_message, f"acknowledging records of {tp}"
                    )

    async def _open_empty_session(self, node: NodeId, session: _Session) -> None:
        """ShareFetch epoch 0 naming no partition: a session that acquires nothing."""
        assert self._cluster is not None and self._membership is not None
        connection = await self._cluster.connection(node)
        response = await connection.request(
            Request(
                ApiKey.SHARE_FETCH,
                {
                    "group_id": self.group_id,
                    "member_id": self._membership.member_id,
                    "share_session_epoch": INITIAL_EPOCH,
                    "max_wait": datetime.timedelta(0),
                    "min_bytes": 0,
                    "max_bytes": self.fetch_max_bytes,
                    "max_records": self.max_poll_records,
                    "batch_size": self.max_poll_records,
                    "share_acquire_mode": 0,
                    "is_renew_ack": False,
                    "topics": [],
                    "forgotten_topics_data": [],
                },
            )
        )
        code = int(response.error_code)
        if code == ErrorCode.none:
            session.epoch = next_epoch(INITIAL_EPOCH)

    async def _close_sessions(self) -> None:
        """Send what is pending and close every open session (ShareAcknowledge with
        epoch -1)."""
        by_leader = await self._by_leader(set(self._pending)) if self._pending else {}
        nodes = set(by_leader) | {n for n, s in self._sessions.items() if s.epoch != INITIAL_EPOCH}
        outcomes = await asyncio.gather(
            *(self._acknowledge_on(node, by_leader.get(node, set()), final=True) for node in nodes),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(
                outcome, KafkaError | ClientError
            ):
                raise outcome


def _error_or_none(code: int, message: str | None, what: str) -> KafkaError | None:
    if code == ErrorCode.none:
        return None
    return errors.for_code(code)(f"{what}: {message}" if message else what)


_OPTIONS = option_names(ShareConsumer.__init__)
