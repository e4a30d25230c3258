"""Membership of one consumer in a classic consumer group, run in the background.

The member's life, driven by :meth:`GroupMembership.run` (a task the consumer owns)::

      ┌──────────────────────────────── rejoin needed ◄───────────────────────────┐
      ▼                                                                           │
    revoke owned partitions (commit first, then on_partitions_revoked)            │
      │                                                                           │
      ▼                                                                           │
    JoinGroup ──MEMBER_ID_REQUIRED──► JoinGroup again with the member id given    │
      │ leader? run the assignor over every member's subscription                 │
      ▼                                                                           │
    SyncGroup ──REBALANCE_IN_PROGRESS / UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION────┤
      │ assignment                                                                │
      ▼                                                                           │
    on_partitions_assigned ──► Heartbeat every heartbeat_interval_ms ─────────────┘
    (of the partitions added)
                                 REBALANCE_IN_PROGRESS: revoke (with commit), rejoin
                                 UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION: partitions
                                 are lost (no commit), reset, rejoin
                                 pattern subscription changed: rejoin

Requests go to the group's coordinator through :class:`GroupCoordinators`, which
rediscovers it (FindCoordinator) on COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS or a dropped connection. :meth:`GroupMembership.leave`
sends LeaveGroup (not for static members, whose absence the coordinator waits out).

That is the eager protocol. With only cooperative assignors (``cooperative-sticky``)
nothing is revoked before JoinGroup: the subscription lists the partitions owned, and
after SyncGroup only those the new assignment takes away are revoked, after which the
member rejoins at once so the assignor can hand them to their new owner.

Subscriptions travel as consumer protocol bytes (``ConsumerProtocolSubscription``, an
int16 version then the body), assignments likewise (:mod:`sluice.client.groups`).
The group APIs are sent at the version the connection agreed on from the client's one
version table (:mod:`sluice.client.versions`).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import io
import re
import struct
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from kio.schema.consumer_protocol_subscription.v0 import (
    ConsumerProtocolSubscription as SubscriptionV0,
)
from kio.schema.consumer_protocol_subscription.v1 import (
    ConsumerProtocolSubscription as SubscriptionV1,
)
from kio.schema.consumer_protocol_subscription.v2 import (
    ConsumerProtocolSubscription as SubscriptionV2,
)
from kio.schema.consumer_protocol_subscription.v3 import (
    ConsumerProtocolSubscription as SubscriptionV3,
)
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from sluice.client.assignors import Assignor, MemberSubscription, is_cooperative
from sluice.client.cluster import Cluster
from sluice.client.connection import BrokerConnection
from sluice.client.errors import ClientError
from sluice.client.groups import (
    CONSUMER_PROTOCOL_TYPE,
    GroupCoordinators,
    MalformedAssignmentError,
    OffsetAndMetadata,
    decode_consumer_assignment,
    encode_consumer_assignment,
    raise_for_group,
)
from sluice.client.messages import Request, build_entity
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.versions import ApiKey

JOIN_EXTRA_TIMEOUT_S = 5.0
"""JoinGroup is held by the coordinator up to the rebalance timeout; the request may
take that long plus this margin before it counts as lost."""

REJOIN_BACKOFF_S = 0.1
"""Pause before joining again after a failed JoinGroup or SyncGroup."""

PATTERN_REFRESH_S = 5.0
"""How often a pattern subscription looks for new matching topics."""

NO_GENERATION = -1
NO_MEMBER_ID = ""

_REJOIN_CODES = frozenset(
    {
        ErrorCode.rebalance_in_progress,
        ErrorCode.unknown_member_id,
        ErrorCode.illegal_generation,
        ErrorCode.fenced_instance_id,
    }
)

_SUBSCRIPTION_VERSION = struct.Struct(">h")
_SUBSCRIPTION_SCHEMAS: tuple[type[Any], ...] = (
    SubscriptionV0,
    SubscriptionV1,
    SubscriptionV2,
    SubscriptionV3,
)
SUBSCRIPTION_VERSION = 1
"""Version written: v1 adds owned partitions (empty for eager assignors)."""


class RebalanceError(ClientError):
    """The group rebalanced (or dropped this member) before an operation completed;
    e.g. a commit for a generation that is over."""

    retriable = True


def encode_subscription(
    topics: Iterable[str], owned: Iterable[TopicPartition] = (), *, version: int = 1
) -> bytes:
    """Consumer protocol subscription bytes (JoinGroup protocol metadata)."""
    schema = _SUBSCRIPTION_SCHEMAS[version]
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(owned):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    payload = build_entity(
        schema,
        {
            "topics": sorted(topics),
            "user_data": None,
            "owned_partitions": [{"topic": t, "partitions": p} for t, p in by_topic.items()],
            "generation_id": NO_GENERATION,
            "rack_id": None,
        },
    )
    buffer = io.BytesIO()
    buffer.write(_SUBSCRIPTION_VERSION.pack(version))
    entity_writer(schema)(buffer, payload)
    return buffer.getvalue()


def decode_subscription(
    member_id: str, group_instance_id: str | None, data: bytes
) -> MemberSubscription:
    """A member's subscription from its JoinGroup metadata; newer versions are read as
    the newest known (later versions only append fields)."""
    if len(data) < _SUBSCRIPTION_VERSION.size:
        raise MalformedAssignmentError(f"subscription of member {member_id!r} is empty")
    (version,) = _SUBSCRIPTION_VERSION.unpack_from(data, 0)
    if version < 0:
        raise MalformedAssignmentError(f"subscription has negative version {version}")
    schema = _SUBSCRIPTION_SCHEMAS[min(version, len(_SUBSCRIPTION_SCHEMAS) - 1)]
    try:
        payload, _size = entity_reader(schema)(data, _SUBSCRIPTION_VERSION.size)
    except (SerialError, ValueError, TypeError, IndexError, UnicodeDecodeError) as e:
        raise MalformedAssignmentError(f"subscription v{version} does not parse: {e}") from None
    owned = tuple(
        TopicPartition(str(t.topic), int(p))
        for t in getattr(payload, "owned_partitions", ())
        for p in t.partitions
    )
    return MemberSubscription(
        member_id, tuple(str(t) for t in payload.topics), group_instance_id, owned
    )


# ── offsets ────────────────────────────────────────────────────────────────────────────


async def commit_offsets(
    coordinators: GroupCoordinators,
    group_id: str,
    offsets: Mapping[TopicPartition, int],
    *,
    generation_id: int = NO_GENERATION,
    member_id: str = NO_MEMBER_ID,
    group_instance_id: str | None = None,
) -> None:
    """OffsetCommit ``offsets`` (the next offset to read, per partition). Raises
    :class:`RebalanceError` when the generation is over, the error of the first
    partition refused otherwise."""
    if not offsets:
        return
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for tp, offset in offsets.items():
        by_topic.setdefault(tp.topic, []).append((tp.partition, offset))
    fields = {
        "group_id": group_id,
        "generation_id_or_member_epoch": generation_id,
        "member_id": member_id,
        "group_instance_id": group_instance_id,
        "retention_time_ms": -1,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": index,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                        "commit_timestamp": -1,
                    }
                    for index, offset in partitions
                ],
            }
            for topic, partitions in by_topic.items()
        ],
    }

    async def attempt(connection: BrokerConnection) -> None:
        response = await connection.request(Request(ApiKey.OFFSET_COMMIT, fields))
        for topic in response.topics:
            for partition in topic.partitions:
                code = partition.error_code
                if code in _REJOIN_CODES:
                    raise RebalanceError(
                        f"commit to group {group_id!r} refused ({ErrorCode(code).name}): the "
                        "group rebalanced; the partitions may now belong to another member"
                    )
                raise_for_group(
                    code, group_id, f"commit of {topic.name}-{partition.partition_index}"
                )

    await coordinators.call(group_id, attempt)


async def fetch_committed(
    coordinators: GroupCoordinators, group_id: str, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, OffsetAndMetadata]:
    """The group's committed offsets of ``partitions`` (absent: none committed)."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if not by_topic:
        return {}
    fields = {
        "group_id": group_id,
        "topics": [{"name": t, "partition_indexes": p} for t, p in by_topic.items()],
        "require_stable": True,
    }

    async def attempt(connection: BrokerConnection) -> dict[TopicPartition, OffsetAndMetadata]:
        response = await connection.request(Request(ApiKey.OFFSET_FETCH, fields))
        raise_for_group(getattr(response, "error_code", ErrorCode.none), group_id)
        found: dict[TopicPartition, OffsetAndMetadata] = {}
        for topic in response.topics:
            for partition in topic.partitions:
                if partition.error_code == ErrorCode.unknown_topic_or_partition:
                    continue
                raise_for_group(partition.error_code, group_id, "committed offset")
                if partition.committed_offset >= 0:
                    found[TopicPartition(topic.name, int(partition.partition_index))] = (
                        OffsetAndMetadata(
                            int(partition.committed_offset),
                            int(getattr(partition, "committed_leader_epoch", -1)),
                            partition.metadata or "",
                        )
                    )
        return found

    return await coordinators.call(group_id, attempt)


# ── membership ─────────────────────────────────────────────────────────────────────────

PartitionsCallback = Callable[[set[TopicPartition], bool], Awaitable[None]]
"""Called with partitions leaving the member and ``lost`` (True: no commit is possible)."""
AssignedCallback = Callable[[set[TopicPartition]], Awaitable[None]]


class GroupMembership:
    """One member of a consumer group; :meth:`run` keeps it in the group."""

    def __init__(
        self,
        cluster: Cluster,
        coordinators: GroupCoordinators,
        *,
        group_id: str,
        assignors: Sequence[Assignor],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        heartbeat_interval_ms: int,
        group_instance_id: str | None,
        on_revoke: PartitionsCallback,
        on_assign: AssignedCallback,
    ) -> None:
        assert assignors, "a group member needs at least one assignor"
        assert heartbeat_interval_ms < session_timeout_ms
        self.cluster = cluster
        self.coordinators = coordinators
        self.group_id = group_id
        self.assignors = list(assignors)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.group_instance_id = group_instance_id
        self._on_revoke = on_revoke
        self._on_assign = on_assign
        self.member_id = NO_MEMBER_ID
        self.generation_id = NO_GENERATION
        self.topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.assignment: set[TopicPartition] = set()
        self.cooperative = all(is_cooperative(a) for a in self.assignors)
        """Incremental rebalancing: keep the partitions while rejoining, give up only
        those the new assignment moves (only when every assignor supports it)."""
        self._rejoin = asyncio.Event()
        self._rejoin.set()
        self.stable = asyncio.Event()
        """Set while the member holds a current assignment (between SyncGroup and the
        next rebalance)."""

    # ── subscription ───────────────────────────────────────────────────────────────

    def subscribe(self, topics: Iterable[str], pattern: re.Pattern[str] | None) -> None:
        self.topics = frozenset(topics)
        self.pattern = pattern
        self.request_rejoin()

    def request_rejoin(self) -> None:
        self._rejoin.set()

    async def _refresh_pattern(self) -> bool:
        """Match the pattern against the cluster's topics; True if the set changed."""
        if self.pattern is None:
            return False
        metadata = await self.cluster.metadata(None)
        matching = frozenset(
            name
            for name, topic in metadata.topics.items()
            if not topic.is_internal and self.pattern.fullmatch(name)
        )
        changed = matching != self.topics
        self.topics = matching
        return changed

    # ── the loop ───────────────────────────────────────────────────────────────────

    async def run(self) -> None:
        """Stay in the group until cancelled. Raises non-retriable errors."""
        loop = asyncio.get_running_loop()
        next_pattern_check = loop.time()
        while True:
            if self._rejoin.is_set():
                self._rejoin.clear()
                if not self.cooperative:
                    await self._revoke_all(lost=False)
                self.stable.clear()
                if self.pattern is not None:
                    await self._refresh_pattern()
                    next_pattern_check = loop.time() + PATTERN_REFRESH_S
                await self._join_and_sync()
                continue
            try:
                async with asyncio.timeout(self.heartbeat_interval_ms / 1000):
                    await self._rejoin.wait()
                continue
            except TimeoutError:
                pass
            await self._heartbeat()
            if self.pattern is not None and loop.time() >= next_pattern_check:
                next_pattern_check = loop.time() + PATTERN_REFRESH_S
                if await self._refresh_pattern():
                    self.request_rejoin()

    async def _revoke_all(self, *, lost: bool) -> None:
        self.stable.clear()
        if self.assignment:
            revoked, self.assignment = self.assignment, set()
            await self._on_revoke(revoked, lost)

    def _reset(self, *, forget_member_id: bool) -> None:
        self.generation_id = NO_GENERATION
        if forget_member_id:
            self.member_id = NO_MEMBER_ID

    async def _lose(self, code: int) -> None:
        """The coordinator no longer knows this member or generation: the partitions are
        lost (a commit would be refused), so they are dropped without one."""
        self._reset(forget_member_id=code != ErrorCode.illegal_generation)
        await self._revoke_all(lost=True)
        self.request_rejoin()

    async def _heartbeat(self) -> None:
        async def attempt(connection: BrokerConnection) -> int:
            response = await connection.request(
                Request(
                    ApiKey.HEARTBEAT,
                    {
                        "group_id": self.group_id,
                        "generation_id": self.generation_id,
                        "member_id": self.member_id,
                        "group_instance_id": self.group_instance_id,
                    },
                )
            )
            code = int(response.error_code)
            if code != ErrorCode.none and code not in _REJOIN_CODES:
                raise_for_group(code, self.group_id, "heartbeat")
            return code

        code = await self.coordinators.call(self.group_id, attempt)
        if code == ErrorCode.rebalance_in_progress:
            self.request_rejoin()
        elif code != ErrorCode.none:
            await self._lose(code)

    async def _join_and_sync(self) -> None:
        while True:
            joined = await self.coordinators.call(self.group_id, self._join_once)
            if joined is None:
                await asyncio.sleep(REJOIN_BACKOFF_S)
                continue
            self.generation_id = int(joined.generation_id)
            self.member_id = joined.member_id
            assignments: dict[str, bytes] = {}
            if joined.leader == self.member_id:
                assignments = await self._assign(joined.protocol_name, joined.members)
            assignment = await self.coordinators.call(
                self.group_id, functools.partial(self._sync_once, assignments=assignments)
            )
            if assignment is None:
                await asyncio.sleep(REJOIN_BACKOFF_S)
                continue
            new = {
                TopicPartition(topic, partition)
                for topic, partitions in decode_consumer_assignment(assignment).items()
                for partition in partitions
            }
            revoked, added = self.assignment - new, new - self.assignment
            if revoked:
                # Cooperative: give up what moves, then rejoin so it can be reassigned.
                self.assignment -= revoked
                await self._on_revoke(revoked, False)
                self.request_rejoin()
            self.assignment |= added
            self.stable.set()
            await self._on_assign(added)
            return

    async def _join_once(self, connection: BrokerConnection) -> Any | None:
        """JoinGroup until a generation is formed; None when the join must start over."""
        metadata = encode_subscription(self.topics, self.assignment, version=SUBSCRIPTION_VERSION)
        while True:
            response = await connection.request(
                Request(
                    ApiKey.JOIN_GROUP,
                    {
                        "group_id": self.group_id,
                        "session_timeout": _timedelta_ms(self.session_timeout_ms),
                        "rebalance_timeout": _timedelta_ms(self.rebalance_timeout_ms),
                        "member_id": self.member_id,
                        "group_instance_id": self.group_instance_id,
                        "protocol_type": CONSUMER_PROTOCOL_TYPE,
                        "protocols": [
                            {"name": a.name, "metadata": metadata} for a in self.assignors
                        ],
                        "reason": None,
                    },
                ),
                timeout_s=self.rebalance_timeout_ms / 1000 + JOIN_EXTRA_TIMEOUT_S,
            )
            code = int(response.error_code)
            if code == ErrorCode.member_id_required:
                self.member_id = response.member_id
                continue
            if code == ErrorCode.unknown_member_id:
                self._reset(forget_member_id=True)
                continue
            if code in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation):
                return None
            raise_for_group(code, self.group_id, "join")
            return response

    async def _sync_once(
        self, connection: BrokerConnection, assignments: Mapping[str, bytes]
    ) -> bytes | None:
        response = await connection.request(
            Request(
                ApiKey.SYNC_GROUP,
                {
                    "group_id": self.group_id,
                    "generation_id": self.generation_id,
                    "member_id": self.member_id,
                    "group_instance_id": self.group_instance_id,
                    "protocol_type": CONSUMER_PROTOCOL_TYPE,
                    "protocol_name": None,
                    "assignments": [
                        {"member_id": m, "assignment": a} for m, a in assignments.items()
                    ],
                },
            ),
            timeout_s=self.rebalance_timeout_ms / 1000 + JOIN_EXTRA_TIMEOUT_S,
        )
        code = int(response.error_code)
        if code in _REJOIN_CODES:
            self._reset(forget_member_id=code == ErrorCode.unknown_member_id)
            return None
        raise_for_group(code, self.group_id, "sync")
        return bytes(response.assignment)

    async def _assign(self, protocol_name: str, members: Sequence[Any]) -> dict[str, bytes]:
        assignor = next((a for a in self.assignors if a.name == protocol_name), None)
        if assignor is None:
            raise errors.for_code(ErrorCode.inconsistent_group_protocol)(
                f"the group chose assignor {protocol_name!r}, which this member does not have"
            )
        subscriptions = [
            decode_subscription(m.member_id, getattr(m, "group_instance_id", None), m.metadata)
            for m in members
        ]
        topics = {t for s in subscriptions for t in s.topics}
        metadata = await self.cluster.metadata(topics)
        partitions_per_topic = {
            name: len(t.partitions)
            for name, t in metadata.topics.items()
            if name in topics and t.error_code == ErrorCode.none
        }
        result = assignor.assign(partitions_per_topic, subscriptions)
        encoded: dict[str, bytes] = {}
        for member_id, tps in result.items():
            by_topic: dict[str, list[int]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            encoded[member_id] = encode_consumer_assignment(by_topic)
        return encoded

    # ── leaving ────────────────────────────────────────────────────────────────────

    async def leave(self) -> None:
        """Give the partitions back (with commit) and leave the group. Static members
        only give their partitions back: the coordinator keeps their place."""
        await self._revoke_all(lost=False)
        if self.member_id == NO_MEMBER_ID or self.group_instance_id is not None:
            return
        member_id, self.member_id = self.member_id, NO_MEMBER_ID
        self.generation_id = NO_GENERATION

        async def attempt(connection: BrokerConnection) -> None:
            response = await connection.request(
                Request(
                    ApiKey.LEAVE_GROUP,
                    {
                        "group_id": self.group_id,
                        "member_id": member_id,
                        "members": [{"member_id": member_id, "group_instance_id": None}],
                    },
                )
            )
            code = int(response.error_code)
            if code not in (ErrorCode.none, ErrorCode.unknown_member_id):
                raise_for_group(code, self.group_id, "leave")

        try:
            await self.coordinators.call(self.group_id, attempt)
        except (KafkaError, ClientError):
            pass  # the session timeout removes the member anyway


def _timedelta_ms(milliseconds: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=milliseconds)
