"""Consumer groups seen from outside: finding a group's coordinator, the plain data that
DescribeGroups, ListGroups and OffsetFetch answer with, and the consumer protocol's
assignment bytes.

Every request about a group goes to the group's coordinator: the broker leading the
``__consumer_offsets`` partition the group id hashes to. The coordinator can move or be
busy loading, so a request is retried, on a fresh lookup, until a deadline::

    request about group G
        │
        ▼
    coordinator of G known? ──no──► FindCoordinator(G) to any broker ──► node
        │ yes                                                             │
        ▼                                                                 │
    send to the coordinator ◄─────────────────────────────────────────────┘
        │
        ├─ answered ───────────────────────────────────────────────► done
        │
        └─ COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR,
           or the connection dropped: forget the coordinator, wait (the wait doubles,
           from RETRY_BACKOFF_S_MIN to RETRY_BACKOFF_S_MAX), ask again; past the
           deadline the last error is raised with the group named

Any other error (unknown member, group not empty, ...) is the answer and is raised at
once.

Assignment bytes are the consumer protocol's (Kafka's ``ConsumerProtocolAssignment``):
an int16 version, then the body of that version (topics with their partitions, then
user data). A version newer than the newest known is read as the newest known: later
versions only append fields, so the known prefix is valid and the rest is ignored.
"""

from __future__ import annotations

import asyncio
import io
import struct
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kio.schema.consumer_protocol_assignment.v0 import (
    ConsumerProtocolAssignment as AssignmentV0,
)
from kio.schema.consumer_protocol_assignment.v1 import (
    ConsumerProtocolAssignment as AssignmentV1,
)
from kio.schema.consumer_protocol_assignment.v2 import (
    ConsumerProtocolAssignment as AssignmentV2,
)
from kio.schema.consumer_protocol_assignment.v3 import (
    ConsumerProtocolAssignment as AssignmentV3,
)
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from sluice.client.cluster import BrokerMetadata, Cluster
from sluice.client.connection import BrokerConnection
from sluice.client.errors import ClientError, ConnectionClosedError
from sluice.client.messages import Request, build_entity
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import NodeId
from sluice.protocol.versions import ApiKey

T = TypeVar("T")

CONSUMER_PROTOCOL_TYPE = "consumer"
"""Protocol type of groups formed by Kafka consumers; only their assignments are decoded."""

CLASSIC_GROUP_TYPE = "classic"
CONSUMER_GROUP_TYPE = "consumer"
"""ListGroups' type of the groups of the consumer group protocol (KIP-848), which
ConsumerGroupDescribe describes (DescribeGroups describes ``classic`` ones only)."""

GROUP_KEY_TYPE = 0
"""FindCoordinator key type of a consumer group (1 is a transactional id)."""

COORDINATOR_TIMEOUT_S_DEFAULT = 30.0
"""How long a group request keeps retrying while its coordinator is unavailable, loading
or moving (Kafka's admin client allows default.api.timeout.ms, 60 s; a command line
should give up sooner)."""

RETRY_BACKOFF_S_MIN = 0.1
RETRY_BACKOFF_S_MAX = 1.0
"""Wait between retries, doubling from min to max (Kafka's retry.backoff.ms and
retry.backoff.max.ms)."""

COORDINATOR_RETRY_CODES = frozenset(
    {
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_coordinator,
        ErrorCode.unstable_offset_commit,
    }
)
"""Errors meaning "ask again, maybe elsewhere": the request itself was fine
(UNSTABLE_OFFSET_COMMIT: an offset waits for its transaction's marker)."""


class GroupState:
    """Names of the classic group states as DescribeGroups and ListGroups spell them."""

    EMPTY = "Empty"
    """No members; offsets may be kept. Only now may an administrator change them."""
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"
    """Gone, or never existed: DescribeGroups describes an unknown group as Dead."""
    UNKNOWN = "Unknown"
    """Listed, but the coordinator could not say its state."""

    INACTIVE = frozenset({EMPTY, DEAD})
    """States in which no consumer holds the group's partitions."""


class MalformedAssignmentError(ClientError):
    """A member's assignment bytes are not a consumer protocol assignment."""


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One group as ListGroups names it, with its state from DescribeGroups."""

    group_id: str
    protocol_type: str
    """``consumer`` for Kafka consumers; empty for groups that only store offsets."""
    state: str
    group_type: str = CLASSIC_GROUP_TYPE
    """``classic``, ``consumer`` (KIP-848) or ``share`` (KIP-932), as ListGroups v5+
    reports it; ``classic`` from older brokers, which have no other kind."""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One member of a group and the partitions it was assigned."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: dict[str, list[int]] = field(default_factory=dict)
    """Topic → sorted partitions; empty unless the group is a consumer group in the
    Stable state (the coordinator sends assignments only then). In a group of the
    consumer group protocol: the partitions the member is assigned now."""
    member_epoch: int | None = None
    """The member's epoch (consumer group protocol only; None in a classic group)."""
    rack_id: str | None = None
    subscribed_topics: tuple[str, ...] = ()
    """The topic names the member subscribes to (consumer group protocol only)."""
    subscribed_topic_regex: str | None = None
    """The member's regular expression subscription (consumer group protocol only)."""
    target_assignment: dict[str, list[int]] | None = None
    """Topic → sorted partitions the coordinator means the member to have at the group's
    assignment epoch (consumer group protocol only; None in a classic group)."""

    @property
    def pending_assignment(self) -> dict[str, list[int]]:
        """Partitions of the target the member does not have yet: another member still
        has to revoke them (consumer group protocol only)."""
        return _difference(self.target_assignment or {}, self.assignment)

    @property
    def pending_revocation(self) -> dict[str, list[int]]:
        """Partitions the member has beyond its target, which it must give up."""
        if self.target_assignment is None:
            return {}
        return _difference(self.assignment, self.target_assignment)


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as its coordinator describes it."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    """The chosen assignor (``range``, ``roundrobin``, ...) while the group has members."""
    members: list[MemberDescription] = field(default_factory=list)
    group_type: str = CLASSIC_GROUP_TYPE
    """``classic`` (DescribeGroups) or ``consumer`` (ConsumerGroupDescribe, KIP-848)."""
    group_epoch: int | None = None
    """The consumer group protocol's group epoch (None in a classic group)."""
    assignment_epoch: int | None = None
    """The epoch of the group's target assignment (None in a classic group)."""
    members_described: bool = True
    """False for a consumer group whose coordinator does not answer ConsumerGroupDescribe:
    its state comes from ListGroups and its members are unknown (not none)."""

    @property
    def is_active(self) -> bool:
        """True while consumers are in the group (or joining it)."""
        return self.state not in GroupState.INACTIVE

    @property
    def exists(self) -> bool:
        return self.state != GroupState.DEAD


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset: the next record the group will read in a partition."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""


def _difference(
    left: Mapping[str, list[int]], right: Mapping[str, list[int]]
) -> dict[str, list[int]]:
    """Topic → sorted partitions in ``left`` and not in ``right``."""
    found = {
        topic: sorted(set(partitions) - set(right.get(topic, ())))
        for topic, partitions in left.items()
    }
    return {topic: partitions for topic, partitions in sorted(found.items()) if partitions}


# ── consumer protocol assignment ───────────────────────────────────────────────────────

_ASSIGNMENT_VERSION = struct.Struct(">h")
_ASSIGNMENT_SCHEMAS: tuple[type[Any], ...] = (
    AssignmentV0,
    AssignmentV1,
    AssignmentV2,
    AssignmentV3,
)
ASSIGNMENT_VERSION_MAX = len(_ASSIGNMENT_SCHEMAS) - 1


def decode_consumer_assignment(data: bytes) -> dict[str, list[int]]:
    """Topic → sorted partitions of consumer protocol assignment bytes.

    Empty bytes are an empty assignment (what members get outside the Stable state).
    Raises :class:`MalformedAssignmentError` for bytes that do not parse.
    """
    if not data:
        return {}
    if len(data) < _ASSIGNMENT_VERSION.size:
        raise MalformedAssignmentError(f"assignment of {len(data)} byte(s) has no version")
    (version,) = _ASSIGNMENT_VERSION.unpack_from(data, 0)
    if version < 0:
        raise MalformedAssignmentError(f"assignment has negative version {version}")
    schema = _ASSIGNMENT_SCHEMAS[min(version, ASSIGNMENT_VERSION_MAX)]
    try:
        payload, _size = entity_reader(schema)(data, _ASSIGNMENT_VERSION.size)
    except (SerialError, ValueError, TypeError, IndexError, UnicodeDecodeError) as e:
        raise MalformedAssignmentError(f"assignment v{version} does not parse: {e}") from None
    assignment: dict[str, set[int]] = {}
    for topic in payload.assigned_partitions:
        assignment.setdefault(str(topic.topic), set()).update(int(p) for p in topic.partitions)
    return {topic: sorted(partitions) for topic, partitions in sorted(assignment.items())}


def encode_consumer_assignment(
    assignment: Mapping[str, list[int]],
    *,
    version: int = 0,
    user_data: bytes | None = None,
) -> bytes:
    """Consumer protocol assignment bytes, as a group leader writes them."""
    assert 0 <= version <= ASSIGNMENT_VERSION_MAX, f"unknown assignment version {version}"
    schema = _ASSIGNMENT_SCHEMAS[version]
    payload = build_entity(
        schema,
        {
            "assigned_partitions": [
                {"topic": topic, "partitions": partitions}
                for topic, partitions in assignment.items()
            ],
            "user_data": user_data,
        },
    )
    buffer = io.BytesIO()
    buffer.write(_ASSIGNMENT_VERSION.pack(version))
    entity_writer(schema)(buffer, payload)
    return buffer.getvalue()


# ── coordinators ───────────────────────────────────────────────────────────────────────


def raise_for_group(code: int, group_id: str, message: str | None = None) -> None:
    """Raise the error of ``code`` about ``group_id``, with a readable detail."""
    if code == ErrorCode.none:
        return
    if code == ErrorCode.group_id_not_found:
        detail = f"group {group_id!r} does not exist"
    elif code == ErrorCode.non_empty_group:
        detail = f"group {group_id!r} is not empty: it has active members"
    elif code == ErrorCode.invalid_group_id:
        detail = f"{group_id!r} is not a valid group id"
    else:
        detail = f"group {group_id!r}"
    raise errors.for_code(code)(f"{detail}: {message}" if message else detail)


class GroupCoordinators:
    """Finds and remembers the coordinator of each group, and runs requests against it
    with retries (see the module docstring)."""

    def __init__(
        self, cluster: Cluster, *, timeout_s: float = COORDINATOR_TIMEOUT_S_DEFAULT
    ) -> None:
        self.cluster = cluster
        self.timeout_s = timeout_s
        self._known: dict[str, NodeId] = {}

    def forget(self, group_id: str) -> None:
        self._known.pop(group_id, None)

    async def find(self, group_id: str) -> BrokerMetadata:
        """The coordinator of ``group_id``, looked up afresh (retried while none is
        available, e.g. while ``__consumer_offsets`` has no leader yet)."""
        self.forget(group_id)
        return await retry_coordinator_errors(lambda: self._look_up(group_id), self.timeout_s)

    async def _look_up(self, group_id: str) -> BrokerMetadata:
        connection = await self.cluster.any_connection()
        response = await connection.request(
            Request(ApiKey.FIND_COORDINATOR, {"key": group_id, "key_type": GROUP_KEY_TYPE})
        )
        message = getattr(response, "error_message", None)
        if response.error_code != ErrorCode.none:
            raise errors.for_code(response.error_code)(
                f"no coordinator for group {group_id!r}" + (f": {message}" if message else "")
            )
        node = BrokerMetadata(int(response.node_id), response.host, int(response.port))
        self._known[group_id] = node.node_id
        return node

    async def node_of(self, group_id: str) -> NodeId:
        """The node id of ``group_id``'s coordinator: the one remembered, else looked up
        (retried while none is available)."""
        node_id = self._known.get(group_id)
        if node_id is not None:
            return node_id
        found = await retry_coordinator_errors(lambda: self._look_up(group_id), self.timeout_s)
        return found.node_id

    async def _connection(self, group_id: str) -> BrokerConnection:
        node_id = self._known.get(group_id)
        if node_id is None:
            node_id = (await self._look_up(group_id)).node_id
        return await self.cluster.connection(node_id)

    async def call(self, group_id: str, attempt: Callable[[BrokerConnection], Awaitable[T]]) -> T:
        """``attempt(connection to the coordinator)``, retried on a new lookup while the
        coordinator is unavailable, loading, moved, or its connection drops.
        ``attempt`` raises the answer's error codes as :class:`KafkaError`."""

        async def once() -> T:
            try:
                return await attempt(await self._connection(group_id))
            except (KafkaError, ConnectionClosedError):
                self.forget(group_id)
                raise

        return await retry_coordinator_errors(once, self.timeout_s)


def _is_retriable(error: Exception) -> bool:
    if isinstance(error, KafkaError):
        return error.code in COORDINATOR_RETRY_CODES
    return isinstance(error, ConnectionClosedError)


async def retry_coordinator_errors(attempt: Callable[[], Awaitable[T]], timeout_s: float) -> T:
    """Run ``attempt`` until it succeeds, fails with an error that is not about the
    coordinator, or ``timeout_s`` has passed (then its last error is raised)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    backoff_s = RETRY_BACKOFF_S_MIN
    while True:
        try:
            return await attempt()
        except (KafkaError, ConnectionClosedError) as e:
            if not _is_retriable(e):
                raise
            if loop.time() + backoff_s > deadline:
                if isinstance(e, KafkaError):
                    raise type(e)(f"{e.message} (still failing after {timeout_s:g} s)") from None
                raise
        await asyncio.sleep(backoff_s)
        backoff_s = min(backoff_s * 2, RETRY_BACKOFF_S_MAX)
