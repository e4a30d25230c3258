"""A share group (KIP-932): its members, epochs and assignment.

A share group has no rebalance protocol: the coordinator computes the assignment itself
(:mod:`~sluice.group.share_assignor`) and a member takes its new assignment with its
next heartbeat. Its states::

                first member joins
    ┌───────┐ ──────────────────────▶ ┌────────┐
    │ Empty │                         │ Stable │
    └───────┘ ◀────────────────────── └────────┘
        │      last member leaves or expires
        │ DeleteGroups (while its tombstone is written)
        ▼
    ┌──────┐  removed once the tombstone is committed (Empty again if it failed)
    │ Dead │
    └──────┘

Epochs:

- the **group epoch** goes up when members join or leave, a subscription changes, or
  a subscribed topic appears, disappears or changes its partition count; the
  assignment is then computed again, so the **assignment epoch** always equals it;
- a member's **member epoch** becomes the group epoch when the member is given the
  assignment of that epoch (its heartbeat answer). A member must heartbeat with the
  epoch it was last given (FENCED_MEMBER_EPOCH otherwise).

What is persisted (``__consumer_offsets``, :class:`~sluice.group.records.ShareGroupMetadataValue`):
the group epoch and every topic the group ever subscribed to. Members are not: after a
failover the group comes back Empty and members rejoin (UNKNOWN_MEMBER_ID makes them).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


SHARE_GROUP_TYPE = "share"
"""The group type (ListGroups v5+) and protocol type Kafka lists share groups with."""


@dataclass(frozen=True, slots=True)
class ShareTopic:
    """What the assignment needs to know of a topic."""

    topic_id: uuid.UUID
    partition_count: int


@dataclass(slots=True)
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed_topic_names: frozenset[str]
    session_timeout_ms: int
    last_heartbeat_ms: int
    member_epoch: int = 0
    assignment: dict[str, frozenset[int]] = field(default_factory=dict)
    """Topic name → partitions: what the member was last given (at ``member_epoch``)."""

    def session_deadline_ms(self) -> int:
        return self.last_heartbeat_ms + self.session_timeout_ms


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target_assignment: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)
    """Member id → topic name → partitions, at ``assignment_epoch``."""
    topics: dict[str, ShareTopic] = field(default_factory=dict)
    """The subscribed topics that existed when the assignment was computed."""
    subscribed_topic_names_ever: set[str] = field(default_factory=set)
    """Every topic any member ever subscribed to (persisted: deleting the group deletes
    their share-partition state)."""
    deleting: bool = False

    @property
    def state(self) -> ShareGroupState:
        if self.deleting:
            return ShareGroupState.DEAD
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topic_names(self) -> frozenset[str]:
        """The topics the current members subscribe to."""
        return frozenset(name for m in self.members.values() for name in m.subscribed_topic_names)
