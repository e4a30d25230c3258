"""What a share-partition persists, and the store it persists it through.

A share-partition (one share group reading one topic partition) persists its *start
offset* (every record below it is finished: acknowledged or archived) and, for the
in-flight window above it, batches of offsets in one *delivery state* with their
*delivery count*. Acquired records are never persisted (KIP-932): a new leader treats
them as available, with the delivery count of their last persisted state, so a record is
delivered again at most once more than its count says.

The *state epoch* goes up when the state is replaced from outside the partition's leader
(AlterShareGroupOffsets, DeleteShareGroupOffsets, a deleted group): a write carrying an
older state epoch is refused with FENCED_STATE_EPOCH and the leader reads the state
again. The *leader epoch* of a write is the partition leader's: a write from a deposed
leader (an older leader epoch) is refused with FENCED_LEADER_EPOCH.
"""

from __future__ import annotations

import base64
import enum
import uuid
from dataclasses import dataclass, field
from typing import Protocol


class DeliveryState(enum.IntEnum):
    """Kafka's record states (the persisted ones are AVAILABLE, ACKNOWLEDGED, ARCHIVED)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


@dataclass(frozen=True, slots=True)
class StateBatch:
    """Offsets ``first_offset``..``last_offset`` (inclusive), all in one state."""

    first_offset: int
    last_offset: int
    state: DeliveryState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    """Names one share-partition: Kafka keys its state ``group:topic_id:partition``."""

    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """The string hashed onto a ``__share_group_state`` partition (Kafka's rule,
        ``SharePartitionKey.asCoordinatorKey``: the topic id in Kafka's text form,
        URL-safe base64 without padding), also FindCoordinator's share key."""
        topic_id = base64.urlsafe_b64encode(self.topic_id.bytes).decode().rstrip("=")
        return f"{self.group_id}:{topic_id}:{self.partition}"

    @classmethod
    def from_coordinator_key(cls, text: str) -> ShareStateKey:
        """The key :meth:`coordinator_key` wrote (FindCoordinator's share key; the topic
        id may also be written as a UUID); raises ValueError for text that is not
        ``group:topic id:partition``."""
        problem = ValueError(f"{text!r} is not group:topic id:partition")
        parts = text.rsplit(":", 2)
        if len(parts) != 3 or not parts[0] or not parts[2].isdigit():
            raise problem
        group_id, topic_text, partition = parts
        try:
            if len(topic_text) == 22:
                topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(topic_text + "=="))
            else:
                topic_id = uuid.UUID(topic_text)
        except ValueError:  # binascii.Error is one
            raise problem from None
        return cls(group_id, topic_id, int(partition))


@dataclass(frozen=True, slots=True)
class ShareState:
    """The persisted state of one share-partition."""

    state_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...] = field(default=())
    """Non-overlapping, ascending, all at or above ``start_offset``."""
    leader_epoch: int = -1
    """The leader epoch of the write that stored it (-1: written by an admin operation)."""


class SharePersister(Protocol):
    """The store of share-partition state: the share coordinator of the key's
    ``__share_group_state`` partition, here or on another broker. Every method raises a
    KafkaError (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, FENCED_STATE_EPOCH,
    FENCED_LEADER_EPOCH, …) when it did not do what it says; a write has returned only
    once the state is committed (replicated to the in-sync replicas)."""

    async def read(self, key: ShareStateKey, leader_epoch: int) -> ShareState | None:
        """The state, or None if the share-partition has none yet. Records
        ``leader_epoch`` as the newest leader's: later writes from older epochs fail."""
        ...

    async def initialize(self, key: ShareStateKey, start_offset: int) -> ShareState:
        """Store a fresh state at ``start_offset`` with the next state epoch (replacing
        any state there was): the first read of a new share-partition, and
        AlterShareGroupOffsets."""
        ...

    async def write(self, key: ShareStateKey, state: ShareState) -> None:
        """Replace the state (``state.state_epoch`` and ``state.leader_epoch`` must be
        current)."""
        ...

    async def delete(self, key: ShareStateKey) -> None:
        """Forget the share-partition (a deleted group, DeleteShareGroupOffsets): the next
        read answers None."""
        ...
