"""The ids and epochs of KIP-227 fetch sessions, counted the same way at both ends: the
leader's session cache (`sluice.broker.replication.fetch_sessions`) and each follower's
side of its session (`sluice.replication.follower_session`)."""

from __future__ import annotations

NO_SESSION_ID = 0
"""A fetch outside any session, or an answer declining one."""
INITIAL_EPOCH = 0
"""A full fetch: opens a session (closing the one named by its id, if any)."""
FINAL_EPOCH = -1
"""A full fetch that closes the named session and opens none."""
INT32_MAX = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: 1 again after the largest int32 (0 means "full")."""
    return 1 if epoch >= INT32_MAX else epoch + 1
