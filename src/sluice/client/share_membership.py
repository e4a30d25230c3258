"""Membership of one share consumer in a share group (KIP-932), run in the background.

A share group has no join/sync dance: the member sends ShareGroupHeartbeat to the
group's coordinator (FindCoordinator key type 0, as for any group) every
``heartbeat_interval`` the coordinator asks for, and the coordinator answers with the
member's epoch and, when it changed, its whole assignment (partitions by topic id)::

    epoch 0, subscribed topics ──► member epoch N, heartbeat interval, assignment
        │
        ▼
    epoch N every heartbeat interval ──► assignment (only when it changed)
        │ UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH: the assignment is gone;
        │ join again with epoch 0 and the same member id
        ▼
    leave: epoch -1

The member id is made by the client (a random UUID, ShareGroupHeartbeat v1). Topic ids
are turned into names with Metadata v10+ (:class:`TopicIds`), which names each topic's
id; the client's own metadata cache stays on the older versions it is written for.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from sluice.client.cluster import Cluster, ClusterMetadata, parse_metadata
from sluice.client.connection import BrokerConnection
from sluice.client.errors import ClientError, UnsupportedApiError
from sluice.client.groups import COORDINATOR_RETRY_CODES, GroupCoordinators, raise_for_group
from sluice.client.messages import Request, build_payload
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.versions import ApiKey

TOPIC_IDS_METADATA_VERSION_MIN = 10
"""The first Metadata version that names topic ids."""

TOPIC_IDS_METADATA_VERSION_MAX = 12
"""The last Metadata version whose fields this module reads (v13 only adds an error)."""

LEAVE_EPOCH = -1
"""The member epoch that leaves the group."""

JOIN_EPOCH = 0
"""The member epoch that joins (or rejoins) the group."""

HEARTBEAT_INTERVAL_MS_DEFAULT = 5000
"""Used until the coordinator says otherwise (Kafka's group.share.heartbeat.interval.ms)."""

HEARTBEAT_RETRY_S = 0.5
"""Pause before heartbeating again after a heartbeat that failed retriably."""

_REJOIN_CODES = frozenset({ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch})


def new_member_id() -> str:
    """A member id as Kafka's clients make it: a random UUID, URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class TopicIds:
    """Topic names ↔ ids, learned from Metadata v10+ answers and kept."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._ids: dict[str, uuid.UUID] = {}
        self._names: dict[uuid.UUID, str] = {}

    def id_of(self, topic: str) -> uuid.UUID | None:
        return self._ids.get(topic)

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        return self._names.get(topic_id)

    def remember(self, name: str, topic_id: uuid.UUID) -> None:
        """Know ``name``'s id (as a Metadata answer would have told it)."""
        self._ids[name] = topic_id
        self._names[topic_id] = name

    async def metadata(self, topics: Iterable[str] | None) -> ClusterMetadata:
        """Metadata of ``topics`` (None: every topic) with their ids, remembered."""
        connection = await self.cluster.any_connection()
        low, high = connection.broker_ranges.get(ApiKey.METADATA, (0, -1))
        version = min(high, TOPIC_IDS_METADATA_VERSION_MAX)
        if version < max(low, TOPIC_IDS_METADATA_VERSION_MIN):
            raise UnsupportedApiError(
                f"broker at {connection.address} serves Metadata up to v{high}; share groups "
                f"need v{TOPIC_IDS_METADATA_VERSION_MIN}+ (topic ids): upgrade the broker"
            )
        names = None if topics is None else [{"name": t, "topic_id": None} for t in topics]
        payload = build_payload(
            ApiKey.METADATA,
            version,
            {
                "topics": names,
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )
        metadata = parse_metadata(await connection.request(payload))
        for name, topic in metadata.topics.items():
            if topic.topic_id is not None and topic.error_code == ErrorCode.none:
                self.remember(name, topic.topic_id)
        return metadata

    async def names(
        self, topic_ids: Iterable[uuid.UUID], hint: Iterable[str]
    ) -> dict[uuid.UUID, str]:
        """Names of ``topic_ids``; asks about the topics in ``hint`` first, then about
        every topic. Ids no topic has (deleted meanwhile) are left out."""
        wanted = set(topic_ids)
        if wanted - self._names.keys():
            await self.metadata(list(hint))
        if wanted - self._names.keys():
            await self.metadata(None)
        return {i: self._names[i] for i in wanted if i in self._names}


class ShareMembership:
    """One member of a share group; :meth:`run` keeps it in the group."""

    def __init__(
        self,
        coordinators: GroupCoordinators,
        topic_ids: TopicIds,
        *,
        group_id: str,
        topics: Iterable[str],
        rack_id: str | None = None,
    ) -> None:
        self.coordinators = coordinators
        self.topic_ids = topic_ids
        self.group_id = group_id
        self.topics = sorted(set(topics))
        self.rack_id = rack_id
        self.member_id = new_member_id()
        self.member_epoch = JOIN_EPOCH
        self.heartbeat_interval_ms = HEARTBEAT_INTERVAL_MS_DEFAULT
        self.assignment: frozenset[TopicPartition] = frozenset()
        self.assigned = asyncio.Event()
        """Set once the coordinator has given this member an assignment (maybe empty)."""
        self.changed = asyncio.Event()
        """Set whenever the assignment changes (the fetcher clears it)."""
        self._wake = asyncio.Event()
        self._heartbeat_lock = asyncio.Lock()

    async def run(self) -> None:
        """Heartbeat until cancelled. Raises errors that no rejoin can cure."""
        while True:
            # The first heartbeat (the join) was sent by whoever started the member.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.heartbeat_interval_ms / 1000):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.heartbeat()
            except (KafkaError, ClientError) as e:
                if not e.retriable:
                    raise
                # The coordinator is away (moving, restarting): keep trying; if the
                # session expires meanwhile, the next answer says so and we join again.
                await asyncio.sleep(HEARTBEAT_RETRY_S)
                self._wake.set()

    def rejoin_soon(self) -> None:
        """Heartbeat now (the fetcher was told the member is unknown)."""
        self._wake.set()

    async def heartbeat(self) -> None:
        """One ShareGroupHeartbeat; applies the answer. Heartbeats go one at a time, so
        each is sent with the epoch the previous one left."""
        async with self._heartbeat_lock:
            await self._heartbeat()

    async def _heartbeat(self) -> None:
        joining = self.member_epoch == JOIN_EPOCH
        fields = {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "member_epoch": self.member_epoch,
            "rack_id": self.rack_id if joining else None,
            "subscribed_topic_names": self.topics if joining else None,
        }

        async def attempt(connection: BrokerConnection) -> Any:
            return await connection.request(Request(ApiKey.SHARE_GROUP_HEARTBEAT, fields))

        response = await self.coordinators.call(self.group_id, _checked(attempt, self.group_id))
        code = int(response.error_code)
        if code in _REJOIN_CODES:
            self.member_epoch = JOIN_EPOCH
            self._set_assignment(frozenset())
            self.rejoin_soon()
            return
        _raise(code, response, self.group_id, "share group heartbeat")
        self.member_epoch = int(response.member_epoch)
        interval_ms = int(response.heartbeat_interval.total_seconds() * 1000)
        if interval_ms > 0:
            self.heartbeat_interval_ms = interval_ms
        if response.assignment is not None:
            await self._apply(response.assignment)

    async def _apply(self, assignment: Any) -> None:
        ids = [tp.topic_id for tp in assignment.topic_partitions if tp.topic_id is not None]
        names = await self.topic_ids.names(ids, self.topics)
        self._set_assignment(
            frozenset(
                TopicPartition(names[tp.topic_id], int(partition))
                for tp in assignment.topic_partitions
                if tp.topic_id in names
                for partition in tp.partitions
            )
        )

    def _set_assignment(self, assignment: frozenset[TopicPartition]) -> None:
        if assignment != self.assignment:
            self.assignment = assignment
            self.changed.set()
        if self.member_epoch != JOIN_EPOCH:
            self.assigned.set()

    async def leave(self) -> None:
        """ShareGroupHeartbeat with epoch -1: the coordinator hands this member's
        partitions to the others at once. Errors are ignored: the session timeout
        removes the member anyway."""
        if self.member_epoch == JOIN_EPOCH and not self.assigned.is_set():
            return
        async with self._heartbeat_lock:
            self.member_epoch = LEAVE_EPOCH
        fields = {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "member_epoch": LEAVE_EPOCH,
        }

        async def attempt(connection: BrokerConnection) -> Any:
            return await connection.request(Request(ApiKey.SHARE_GROUP_HEARTBEAT, fields))

        try:
            await self.coordinators.call(self.group_id, _checked(attempt, self.group_id))
        except (KafkaError, ClientError):
            pass


Attempt = Callable[[BrokerConnection], Awaitable[Any]]


def _checked(attempt: Attempt, group_id: str) -> Attempt:
    """``attempt`` raising coordinator errors (so the coordinator is looked up again)
    and leaving every other code to the caller."""

    async def checked(connection: BrokerConnection) -> Any:
        response = await attempt(connection)
        code = int(response.error_code)
        if code in COORDINATOR_RETRY_CODES:
            _raise(code, response, group_id, "share group heartbeat")
        return response

    return checked


def _raise(code: int, response: Any, group_id: str, what: str) -> None:
    message = getattr(response, "error_message", None)
    raise_for_group(code, group_id, f"{what}: {message}" if message else what)
