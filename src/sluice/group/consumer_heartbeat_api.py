"""ConsumerGroupHeartbeat (KIP-848) as the coordinator's state machine sees it: the
request and answer as plain data (the wire handler converts kio's messages), the
timers it asks for, the broker settings of consumer groups, and Kafka's checks of a
request's fields. See :mod:`~sluice.group.consumer_heartbeat`."""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sluice.common.errors import ErrorCode
from sluice.group.config import GROUP_ID_BYTES_MAX
from sluice.group.consumer_assignors import ASSIGNORS
from sluice.group.consumer_group import (
    JOIN_MEMBER_EPOCH,
    LEAVE_STATIC_MEMBER_EPOCH,
    Assignment,
)
from sluice.group.consumer_records import ConsumerGroupRecord, TopicPartitions
from sluice.group.migration import ClassicGroupImage, MigrationPolicy
from sluice.group.records import STRING_BYTES_MAX

log = logging.getLogger(__name__)

NO_REBALANCE_TIMEOUT = -1
"""RebalanceTimeoutMs -1: unchanged since the last heartbeat."""


@dataclass(frozen=True)
class ConsumerGroupsConfig:
    """Kafka's ``group.consumer.*`` broker settings, with Kafka's defaults except the
    group size."""

    session_timeout_ms: int = 45_000
    """group.consumer.session.timeout.ms: a member not heard from this long is removed."""
    heartbeat_interval_ms: int = 5_000
    """group.consumer.heartbeat.interval.ms: told to members in every answer."""
    group_size_max: int = 10_000
    """group.consumer.max.size: members per group. Kafka's default is unbounded; every
    member holds its records in memory, so Sluice bounds it as for classic groups."""
    assignors: tuple[str, ...] = ("uniform", "range")
    """group.consumer.assignors: the server assignors members may name; the first is
    the default."""
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL
    """group.consumer.migration.policy (:mod:`~sluice.group.migration`)."""
    classic_group_size_max: int = 10_000
    """group.max.size: a consumer group with more members is not downgraded."""

    def __post_init__(self) -> None:
        if not self.assignors or any(name not in ASSIGNORS for name in self.assignors):
            raise ValueError(f"group.consumer.assignors must name some of {sorted(ASSIGNORS)}")
        if self.session_timeout_ms <= 0 or self.heartbeat_interval_ms <= 0:
            raise ValueError("consumer group session and heartbeat times must be positive")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                "group.consumer.heartbeat.interval.ms must be below "
                "group.consumer.session.timeout.ms"
            )

    def session_timeout_for(self, request: ConsumerGroupHeartbeatRequest) -> int:
        """The member's session timeout: its group's ``consumer.session.timeout.ms``,
        else the broker's."""
        return _group_setting(request, SESSION_TIMEOUT_CONFIG, self.session_timeout_ms)

    def heartbeat_interval_for(self, request: ConsumerGroupHeartbeatRequest) -> int:
        """The interval told to the member: its group's
        ``consumer.heartbeat.interval.ms``, else the broker's."""
        return _group_setting(request, HEARTBEAT_INTERVAL_CONFIG, self.heartbeat_interval_ms)


SESSION_TIMEOUT_CONFIG = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL_CONFIG = "consumer.heartbeat.interval.ms"


def _group_setting(request: ConsumerGroupHeartbeatRequest, name: str, default: int) -> int:
    text = request.group_configs.get(name)
    try:
        return default if text is None else int(text)
    except ValueError:
        # Overrides are checked when set; a bad stored one must not refuse heartbeats.
        log.warning("consumer group %s: %s=%r is not an integer", request.group_id, name, text)
        return default


# ================================================================ the request


@dataclass(frozen=True)
class ConsumerGroupHeartbeatRequest:
    """ConsumerGroupHeartbeat v0–v1's fields; the wire handler converts. None means
    "unchanged since the last heartbeat", as on the wire."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = NO_REBALANCE_TIMEOUT
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned_partitions: tuple[TopicPartitions, ...] | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1
    """v0 lets a joining member leave its id empty (the coordinator chooses one); from
    v1 the member always chooses it."""
    describable_topics: Callable[[frozenset[str]], frozenset[str]] | None = None
    """Of the given topic names, those the member (the request's principal) may
    DESCRIBE; None: all. Its regular expression matches only those, as in Kafka."""
    group_configs: Mapping[str, str] = field(default_factory=dict)
    """The group's overrides (config resource GROUP, checked when set):
    ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms`` replace the
    broker's settings for its members."""


@dataclass(frozen=True)
class ConsumerGroupHeartbeatResponse:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: tuple[TopicPartitions, ...] | None = None
    """The member's assigned partitions; None when unchanged."""


class TimerKind(enum.Enum):
    SESSION = "session"
    """The member is removed if it does not heartbeat before this."""
    REBALANCE = "rebalance"
    """The member is removed if it has not revoked its partitions before this."""
    CLASSIC_JOIN = "classic-join"
    """A classic member told to join again is removed if it has not before this."""
    CLASSIC_SYNC = "classic-sync"
    """A classic member answered JoinGroup is removed if it sends no SyncGroup before this."""


@dataclass(frozen=True)
class TimerKey:
    kind: TimerKind
    group_id: str
    member_id: str


@dataclass(frozen=True)
class ArmTimer:
    key: TimerKey
    deadline_ms: int


@dataclass(frozen=True)
class CancelTimer:
    key: TimerKey


TimerChange = ArmTimer | CancelTimer


@dataclass(eq=False)
class Change:
    """How to undo what one operation did to the state, should its records not be
    written (Kafka's coordinator reverts its in-memory state to the last committed
    offset): the records that restore each key it wrote, in the order it wrote them
    (replayed in reverse), the timer deadlines it replaced, and the group it created."""

    group_id: str
    inverse: list[ConsumerGroupRecord] = field(default_factory=list)
    deadlines: list[tuple[TimerKey, int | None]] = field(default_factory=list)
    """(timer, its deadline before; None: none), in the order they were replaced."""
    resolutions: list[tuple[str, tuple[str, frozenset[str]] | None]] = field(default_factory=list)
    """(member id, its regular expression's resolution before), in the order replaced."""
    created_group: bool = False
    """The operation created the group (reverting deletes it again)."""


@dataclass
class HeartbeatResult:
    response: ConsumerGroupHeartbeatResponse
    records: list[ConsumerGroupRecord] = field(default_factory=list)
    timers: list[TimerChange] = field(default_factory=list)
    change: Change | None = None
    """Undoes the records (``ConsumerGroups.revert``) if they are not written."""
    downgrade: ClassicGroupImage | None = None
    """Set when the last member of the new protocol left: the records delete the
    consumer group, and the classic group of this image takes its place."""


@dataclass
class TimerResult:
    records: list[ConsumerGroupRecord] = field(default_factory=list)
    timers: list[TimerChange] = field(default_factory=list)
    change: Change | None = None
    downgrade: ClassicGroupImage | None = None
    """As in :class:`HeartbeatResult`: the expired member was the last of the new protocol."""


class HeartbeatError(Exception):
    """A heartbeat refused: the error code and message its answer carries."""

    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


# ================================================================ helpers


def to_topic_partitions(assignment: Assignment) -> tuple[TopicPartitions, ...]:
    return tuple(
        TopicPartitions(topic_id, tuple(sorted(partitions)))
        for topic_id, partitions in sorted(assignment.items())
        if partitions
    )


def from_topic_partitions(entries: tuple[TopicPartitions, ...]) -> dict[uuid.UUID, frozenset[int]]:
    result: dict[uuid.UUID, frozenset[int]] = {}
    for entry in entries:
        result[entry.topic_id] = result.get(entry.topic_id, frozenset()) | frozenset(
            entry.partitions
        )
    return {topic_id: partitions for topic_id, partitions in result.items() if partitions}


def invalid_request_problem(request: ConsumerGroupHeartbeatRequest) -> str | None:
    """Kafka's checks of a ConsumerGroupHeartbeat's fields; the problem, or None."""
    epoch = request.member_epoch
    if not request.group_id:
        return "GroupId can't be empty."
    if len(request.group_id.encode()) > GROUP_ID_BYTES_MAX:
        return "GroupId is too long."
    if request.instance_id is not None and not request.instance_id:
        return "InstanceId can't be empty."
    if request.rack_id is not None and not request.rack_id:
        return "RackId can't be empty."
    if len(request.member_id.encode()) > STRING_BYTES_MAX:
        return "MemberId is too long."
    if not request.member_id and (request.version >= 1 or epoch != JOIN_MEMBER_EPOCH):
        return "MemberId can't be empty."
    if epoch < LEAVE_STATIC_MEMBER_EPOCH:
        return f"MemberEpoch {epoch} is invalid."
    if epoch == LEAVE_STATIC_MEMBER_EPOCH and request.instance_id is None:
        return "InstanceId can't be null."
    if epoch == JOIN_MEMBER_EPOCH:
        if request.rebalance_timeout_ms == NO_REBALANCE_TIMEOUT:
            return "RebalanceTimeoutMs must be provided in first request."
        if request.owned_partitions is None or request.owned_partitions:
            return "TopicPartitions must be empty when (re-)joining."
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    if request.rebalance_timeout_ms < NO_REBALANCE_TIMEOUT:
        return "RebalanceTimeoutMs can't be negative."
    if any(not name for name in request.subscribed_topic_names or ()):
        return "SubscribedTopicNames can't contain an empty name."
    return None
