"""KIP-227 session epochs: a full fetch is epoch 0, incremental ones count from 1 and
wrap back to 1 after the largest int32 (never to 0, which would mean "full")."""

from __future__ import annotations

from sluice.replication.session_epochs import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INT32_MAX,
    NO_SESSION_ID,
    next_epoch,
)


def test_epochs_count_from_the_full_fetch() -> None:
    assert (NO_SESSION_ID, INITIAL_EPOCH, FINAL_EPOCH) == (0, 0, -1)
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(41) == 42


def test_epochs_wrap_to_one_after_the_largest_int32() -> None:
    assert next_epoch(INT32_MAX - 1) == INT32_MAX
    assert next_epoch(INT32_MAX) == 1
