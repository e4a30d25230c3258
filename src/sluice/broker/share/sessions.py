"""Share sessions (KIP-932): which partitions a share-group member fetches from this
broker, and the epoch its next ShareFetch or ShareAcknowledge must carry.

A member opens its session with epoch 0 (a full fetch naming every partition it wants),
then sends 1, 2, 3, … (after the largest int32 comes 1 again), each naming only the
partitions it adds (and, in ``forgotten_topics_data``, those it drops); epoch -1 closes
the session after its acknowledgements, and what the member still holds is released at
once. A request with another epoch is refused with INVALID_SHARE_SESSION_EPOCH, one for a
session that is not here with SHARE_SESSION_NOT_FOUND; the member then opens a new one.
Sessions idle for longer than :data:`SESSION_IDLE_MS` are forgotten (their locks expire
by themselves); at most ``group.share.max.share.sessions`` exist at once.

A session holds its partitions by topic *id*, as KIP-932 does: a topic deleted and
created again under the same name is another topic, which a session naming the old id
never reads (its partitions are answered UNKNOWN_TOPIC_ID and leave the session).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from sluice.common import errors

OPEN_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1
SESSION_IDLE_MS = 120_000
"""A session not used for this long is forgotten (Kafka evicts a session when its member
leaves the group; here the group may be coordinated by another broker)."""


class SessionPartition(NamedTuple):
    """A partition of a share session: its topic's id and the partition's index."""

    topic_id: uuid.UUID
    partition: int


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


@dataclass(eq=False)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1
    """The epoch the next request must carry."""
    partitions: dict[SessionPartition, None] = field(default_factory=dict)
    """In the order they were added (fetches take them in turn from there)."""
    last_used_ms: int = 0
    turn: int = 0
    """Where the next fetch starts among ``partitions``, so none is starved."""

    def ordered(self) -> list[SessionPartition]:
        """The partitions, rotated so each fetch starts one further."""
        names = list(self.partitions)
        if not names:
            return names
        start = self.turn % len(names)
        self.turn += 1
        return names[start:] + names[:start]


class ShareSessions:
    def __init__(self, max_sessions: int) -> None:
        self._max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, group_id: str, member_id: str, now_ms: int) -> ShareSession:
        """A new session (replacing the member's old one, whose epoch it resets)."""
        self.expire_idle(now_ms)
        key = (group_id, member_id)
        if key not in self._sessions and len(self._sessions) >= self._max_sessions:
            raise errors.for_code(errors.ErrorCode.share_session_limit_reached)(
                f"this broker holds {self._max_sessions} share sessions "
                "(group.share.max.share.sessions)"
            )
        session = self._sessions[key] = ShareSession(group_id, member_id, last_used_ms=now_ms)
        return session

    def find(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def use(self, group_id: str, member_id: str, epoch: int, now_ms: int) -> ShareSession:
        """The session for a request carrying ``epoch`` (1 or more); its next epoch."""
        session = self._sessions.get((group_id, member_id))
        if session is None:
            raise errors.for_code(errors.ErrorCode.share_session_not_found)(
                f"no share session of member {member_id} of group {group_id} here"
            )
        if epoch != session.epoch:
            raise errors.for_code(errors.ErrorCode.invalid_share_session_epoch)(
                f"share session epoch {epoch}, expected {session.epoch}"
            )
        session.epoch = next_epoch(epoch)
        session.last_used_ms = now_ms
        return session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop((group_id, member_id), None)

    def expire_idle(self, now_ms: int) -> list[ShareSession]:
        idle = [s for s in self._sessions.values() if now_ms - s.last_used_ms > SESSION_IDLE_MS]
        for session in idle:
            del self._sessions[(session.group_id, session.member_id)]
        return idle
