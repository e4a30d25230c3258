"""Settings of the group coordinator, under Kafka's broker property names, and its fixed
limits (each with a unit and a reason)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from sluice.group.consumer_assignors import ASSIGNORS, RANGE_ASSIGNOR, UNIFORM_ASSIGNOR
from sluice.group.migration import MigrationPolicy

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_PARTITIONS_DEFAULT = 50
"""Kafka's offsets.topic.num.partitions. Groups are spread over the partitions by a hash
of their id, so the count must never change once groups exist."""

OFFSETS_COMMIT_TIMEOUT_MS = 5_000
"""How long a write to ``__consumer_offsets`` may wait for the in-sync replicas (Kafka's
offsets.commit.timeout.ms)."""

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
"""A member that joined during a rebalance and vanished is dropped after this, instead of
holding the rebalance for its whole rebalance timeout (Kafka's KIP-394 value)."""

GROUP_ID_BYTES_MAX = 32_767
"""Group ids are stored as int16-length strings in ``__consumer_offsets``."""

CLIENT_ID_IN_MEMBER_ID_CHARS_MAX = 1_000
"""A member id is ``client_id-uuid``; a client id longer than this is cut there so the
member id still fits a protocol string (int16 length) with room to spare."""


@dataclass(frozen=True)
class GroupConfig:
    """The coordinator's settings. Defaults are Kafka's, except ``group_size_max``."""

    initial_rebalance_delay_ms: int = 3_000
    """group.initial.rebalance.delay.ms: the first rebalance of an Empty group waits this
    long (again after every new member, up to the rebalance timeout) so a whole
    application starting at once gets one rebalance, not one per member."""
    session_timeout_ms_min: int = 6_000
    """group.min.session.timeout.ms: shorter sessions are refused (INVALID_SESSION_TIMEOUT):
    they would make members flap and rebalance on every hiccup."""
    session_timeout_ms_max: int = 1_800_000
    """group.max.session.timeout.ms: longer sessions are refused: a dead member would hold
    its partitions for that long."""
    group_size_max: int = 10_000
    """group.max.size: members (including ones given an id but not yet joined) per group;
    more get GROUP_MAX_SIZE_REACHED. Kafka's default is unbounded; every member holds
    its metadata in memory and in the group's record, so Sluice bounds it."""
    offsets_retention_ms: int = 7 * 24 * 3_600_000
    """offsets.retention.minutes (in ms): offsets of a group that has been Empty this long
    (of a simple consumer: not committed for this long) are deleted."""
    offsets_retention_check_interval_ms: int = 600_000
    """offsets.retention.check.interval.ms: how often expired offsets are looked for."""
    offset_metadata_bytes_max: int = 4_096
    """offset.metadata.max.bytes: a committed offset's metadata string longer than this
    (in UTF-8) is refused with OFFSET_METADATA_TOO_LARGE."""
    share_session_timeout_ms: int = 45_000
    """group.share.session.timeout.ms: a share group member that sends no heartbeat for
    this long is removed (a group's ``share.session.timeout.ms`` overrides it)."""
    share_session_timeout_ms_min: int = 45_000
    """group.share.min.session.timeout.ms: the lowest share session timeout a broker
    setting may choose (Kafka's bound; lowered for tests)."""
    share_session_timeout_ms_max: int = 60_000
    """group.share.max.session.timeout.ms."""
    share_heartbeat_interval_ms: int = 5_000
    """group.share.heartbeat.interval.ms: how often share group members heartbeat (a
    group's ``share.heartbeat.interval.ms`` overrides it)."""
    share_heartbeat_interval_ms_min: int = 5_000
    """group.share.min.heartbeat.interval.ms."""
    share_heartbeat_interval_ms_max: int = 15_000
    """group.share.max.heartbeat.interval.ms."""
    share_group_size_max: int = 200
    """group.share.max.size: members per share group; more get GROUP_MAX_SIZE_REACHED
    (Kafka's default)."""
    consumer_session_timeout_ms: int = 45_000
    """group.consumer.session.timeout.ms: a consumer group member (KIP-848) that sends no
    heartbeat for this long is removed."""
    consumer_session_timeout_ms_min: int = 45_000
    """group.consumer.min.session.timeout.ms (Kafka's bound; lowered for tests)."""
    consumer_session_timeout_ms_max: int = 60_000
    """group.consumer.max.session.timeout.ms."""
    consumer_heartbeat_interval_ms: int = 5_000
    """group.consumer.heartbeat.interval.ms: how often consumer group members heartbeat."""
    consumer_heartbeat_interval_ms_min: int = 5_000
    """group.consumer.min.heartbeat.interval.ms."""
    consumer_heartbeat_interval_ms_max: int = 15_000
    """group.consumer.max.heartbeat.interval.ms."""
    consumer_group_size_max: int = 10_000
    """group.consumer.max.size: members per consumer group; more get
    GROUP_MAX_SIZE_REACHED. Kafka's default is unbounded; every member holds its records
    in memory, so Sluice bounds it as ``group.max.size``."""
    consumer_assignors: tuple[str, ...] = (UNIFORM_ASSIGNOR, RANGE_ASSIGNOR)
    """group.consumer.assignors: the server assignors consumer group members may name,
    built-in ones only (Kafka also loads classes); the first is the default."""
    consumer_migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL
    """group.consumer.migration.policy: whether a classic group with members becomes a
    consumer group when a member of the new protocol joins it (upgrade), and back when
    the last one leaves (downgrade); Kafka's default, ``bidirectional``, allows both."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, int) and value < 0:
                raise ValueError(f"group config {field.name} is negative: {value}")
        if self.session_timeout_ms_min > self.session_timeout_ms_max:
            raise ValueError("group.min.session.timeout.ms exceeds group.max.session.timeout.ms")
        if self.group_size_max < 1:
            raise ValueError("group.max.size must be at least 1")
        if self.offsets_retention_check_interval_ms < 1:
            raise ValueError("offsets.retention.check.interval.ms must be at least 1")
        if self.share_group_size_max < 1:
            raise ValueError("group.share.max.size must be at least 1")
        if not (
            1
            <= self.share_session_timeout_ms_min
            <= self.share_session_timeout_ms
            <= self.share_session_timeout_ms_max
        ):
            raise ValueError(
                "group.share.session.timeout.ms must be within group.share.min.session"
                ".timeout.ms and group.share.max.session.timeout.ms (at least 1)"
            )
        if not (
            1
            <= self.share_heartbeat_interval_ms_min
            <= self.share_heartbeat_interval_ms
            <= self.share_heartbeat_interval_ms_max
        ):
            raise ValueError(
                "group.share.heartbeat.interval.ms must be within group.share.min.heartbeat"
                ".interval.ms and group.share.max.heartbeat.interval.ms (at least 1)"
            )
        if self.share_heartbeat_interval_ms >= self.share_session_timeout_ms:
            raise ValueError(
                "group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms"
            )
        self._check_consumer_settings()

    def _check_consumer_settings(self) -> None:
        """Kafka's checks of the ``group.consumer.*`` settings (KIP-848)."""
        if not self.consumer_assignors:
            raise ValueError("group.consumer.assignors must name at least one assignor")
        unknown = [name for name in self.consumer_assignors if name not in ASSIGNORS]
        if unknown:
            raise ValueError(
                f"group.consumer.assignors: unknown assignor {unknown[0]!r}; the built-in "
                f"assignors are {', '.join(ASSIGNORS)} (Sluice cannot load assignor classes)"
            )
        if len(set(self.consumer_assignors)) != len(self.consumer_assignors):
            raise ValueError("group.consumer.assignors names an assignor twice")
        if self.consumer_group_size_max < 1:
            raise ValueError("group.consumer.max.size must be at least 1")
        if not (
            1
            <= self.consumer_session_timeout_ms_min
            <= self.consumer_session_timeout_ms
            <= self.consumer_session_timeout_ms_max
        ):
            raise ValueError(
                "group.consumer.session.timeout.ms must be within group.consumer.min.session"
                ".timeout.ms and group.consumer.max.session.timeout.ms (at least 1)"
            )
        if not (
            1
            <= self.consumer_heartbeat_interval_ms_min
            <= self.consumer_heartbeat_interval_ms
            <= self.consumer_heartbeat_interval_ms_max
        ):
            raise ValueError(
                "group.consumer.heartbeat.interval.ms must be within group.consumer.min"
                ".heartbeat.interval.ms and group.consumer.max.heartbeat.interval.ms (at least 1)"
            )
        if self.consumer_heartbeat_interval_ms >= self.consumer_session_timeout_ms:
            raise ValueError(
                "group.consumer.heartbeat.interval.ms must be less than "
                "group.consumer.session.timeout.ms"
            )

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> GroupConfig:
        """The config from Kafka broker properties; names not about groups are ignored.
        Raises ValueError naming the property for a bad value."""
        values: dict[str, int] = {}
        assignors = GroupConfig.consumer_assignors
        policy = MigrationPolicy.BIDIRECTIONAL
        for name, text in properties.items():
            if name == CONSUMER_ASSIGNORS_PROPERTY:
                assignors = parse_assignor_names(text)
                continue
            if name == MIGRATION_POLICY_PROPERTY:
                try:
                    policy = MigrationPolicy.parse(text)
                except ValueError as e:
                    raise ValueError(f"{name}: {e}") from None
                continue
            target = GROUP_PROPERTIES.get(name)
            if target is None:
                continue
            attribute, scale = target
            try:
                values[attribute] = int(text) * scale
            except ValueError:
                raise ValueError(f"{name}: {text!r} is not an integer") from None
        try:
            return cls(**values, consumer_assignors=assignors, consumer_migration_policy=policy)
        except ValueError as e:
            raise ValueError(f"group coordinator settings: {e}") from None


GROUP_PROPERTIES: dict[str, tuple[str, int]] = {
    "group.initial.rebalance.delay.ms": ("initial_rebalance_delay_ms", 1),
    "group.min.session.timeout.ms": ("session_timeout_ms_min", 1),
    "group.max.session.timeout.ms": ("session_timeout_ms_max", 1),
    "group.max.size": ("group_size_max", 1),
    "offsets.retention.minutes": ("offsets_retention_ms", 60_000),
    "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", 1),
    "offset.metadata.max.bytes": ("offset_metadata_bytes_max", 1),
    "group.share.session.timeout.ms": ("share_session_timeout_ms", 1),
    "group.share.min.session.timeout.ms": ("share_session_timeout_ms_min", 1),
    "group.share.max.session.timeout.ms": ("share_session_timeout_ms_max", 1),
    "group.share.heartbeat.interval.ms": ("share_heartbeat_interval_ms", 1),
    "group.share.min.heartbeat.interval.ms": ("share_heartbeat_interval_ms_min", 1),
    "group.share.max.heartbeat.interval.ms": ("share_heartbeat_interval_ms_max", 1),
    "group.share.max.size": ("share_group_size_max", 1),
    "group.consumer.session.timeout.ms": ("consumer_session_timeout_ms", 1),
    "group.consumer.min.session.timeout.ms": ("consumer_session_timeout_ms_min", 1),
    "group.consumer.max.session.timeout.ms": ("consumer_session_timeout_ms_max", 1),
    "group.consumer.heartbeat.interval.ms": ("consumer_heartbeat_interval_ms", 1),
    "group.consumer.min.heartbeat.interval.ms": ("consumer_heartbeat_interval_ms_min", 1),
    "group.consumer.max.heartbeat.interval.ms": ("consumer_heartbeat_interval_ms_max", 1),
    "group.consumer.max.size": ("consumer_group_size_max", 1),
}
"""Kafka property name → (GroupConfig attribute, multiplier to milliseconds/units)."""

CONSUMER_ASSIGNORS_PROPERTY = "group.consumer.assignors"
"""The list-valued group property (not in :data:`GROUP_PROPERTIES`)."""

BUILT_IN_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM_ASSIGNOR,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE_ASSIGNOR,
}
"""Kafka's class names of the built-in assignors, which its configurations may list
instead of the names."""


def parse_assignor_names(text: str) -> tuple[str, ...]:
    """``group.consumer.assignors``' comma-separated list: assignor names, or the class
    names of Kafka's built-in ones (checked by :class:`GroupConfig`)."""
    names = (entry.strip() for entry in text.split(","))
    return tuple(BUILT_IN_ASSIGNOR_CLASSES.get(name, name) for name in names if name)


MIGRATION_POLICY_PROPERTY = "group.consumer.migration.policy"
"""The setting of the coordinator that is a name, not a number (not in
:data:`GROUP_PROPERTIES`)."""
