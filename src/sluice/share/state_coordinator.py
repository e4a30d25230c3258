"""The share coordinator: the state of every share-partition of one
``__share_group_state`` partition, as a deterministic, synchronous shard.

One :class:`ShareStateCoordinator` is the shard the generic coordinator runtime runs for
its partition (see :mod:`sluice.coordinator`). It does no I/O: operations take
``now_ms`` and a token and return effects. Each change is one whole snapshot record
(:mod:`~sluice.share.state_records`); it takes effect, and its caller is answered, once
the record is committed.

Fencing (KIP-932):

- *Leader epochs.* The coordinator remembers, per share-partition, the newest leader
  epoch it has seen (stored in the snapshot, so it survives a failover). A read with a
  newer epoch records it (writing the snapshot again when there is one) before it is
  answered; a read or write with an older one is refused with FENCED_LEADER_EPOCH (a
  deposed leader). A read with -1 (no leader) neither records nor is fenced.
- *State epochs.* :meth:`ShareStateCoordinator.initialize` stores a fresh state with the
  next state epoch; a write must carry the current one, or it is refused with
  FENCED_STATE_EPOCH (the state was replaced from outside the leader, or deleted: the
  leader reads it again). A write to a share-partition with no state is refused the same
  way: initialize comes first.

Operations on one share-partition run one at a time: while its record is being written,
later operations on it wait (in order) and run once it is committed or failed, so each
sees the state the log holds. Operations on different share-partitions are not held up.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from sluice.common.errors import ErrorCode
from sluice.coordinator.api import Append, Effect, Reply, RequestToken, look_up_again
from sluice.share.state import ShareState, ShareStateKey
from sluice.share.state_records import (
    batches_problem,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

NO_LEADER_EPOCH = -1
INITIAL_STATE_EPOCH = 0
"""The state epoch of a share-partition's first state (Kafka's default)."""


@dataclass(frozen=True, slots=True)
class ShareStateSummary:
    """What admin listings need of a share-partition's state (ReadShareGroupStateSummary)."""

    state_epoch: int
    leader_epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """The reply of every operation: an error, or the state it leaves (None: none)."""

    error: ErrorCode = ErrorCode.none
    message: str = ""
    state: ShareState | None = field(default=None)


def _refused(token: RequestToken, error: ErrorCode, message: str) -> list[Effect]:
    return [Reply(token, Outcome(error, message))]


_Operation = Callable[[], list[Effect]]


class ShareStateCoordinator:
    """Every share-partition whose key hashes onto one ``__share_group_state`` partition."""

    def __init__(self) -> None:
        self._states: dict[ShareStateKey, ShareState] = {}
        self._leader_epochs: dict[ShareStateKey, int] = {}
        """The newest leader epoch seen per share-partition (also those with no state)."""
        self._append_ids = itertools.count(1)
        self._in_flight: dict[int, tuple[ShareStateKey, ShareState | None, RequestToken]] = {}
        """Append id → (its share-partition, the state it stores or None to delete, the
        token answered once it is committed)."""
        self._busy: dict[ShareStateKey, collections.deque[_Operation]] = {}
        """Share-partitions with a record being written → the operations waiting for it."""

    # ================================================================ inspection

    def state(self, key: ShareStateKey) -> ShareState | None:
        """The committed state of a share-partition."""
        return self._states.get(key)

    def summary(self, key: ShareStateKey) -> ShareStateSummary | None:
        state = self._states.get(key)
        if state is None:
            return None
        return ShareStateSummary(
            state.state_epoch,
            max(state.leader_epoch, self._leader_epochs.get(key, NO_LEADER_EPOCH)),
            state.start_offset,
        )

    def keys_of_group(self, group_id: str) -> list[ShareStateKey]:
        """Every share-partition of ``group_id`` with state here."""
        return sorted(
            (key for key in self._states if key.group_id == group_id),
            key=lambda k: (str(k.topic_id), k.partition),
        )

    # =================================================================== loading

    def replay(self, key: bytes, value: bytes | None) -> None:
        share_key = decode_key(key)
        if value is None:
            self._states.pop(share_key, None)
            self._leader_epochs.pop(share_key, None)
            return
        state = decode_value(value)
        self._states[share_key] = state
        self._leader_epochs[share_key] = state.leader_epoch

    def replay_transactional(self, producer_id: int, key: bytes, value: bytes | None) -> None:
        raise AssertionError("__share_group_state holds no transactional records")

    def replay_marker(self, producer_id: int, committed: bool) -> None:
        raise AssertionError("__share_group_state holds no transaction markers")

    def load_completed(self, now_ms: int) -> None:
        pass

    def next_deadline_ms(self) -> int | None:
        return None

    def poll(self, now_ms: int) -> list[Effect]:
        return []

    def task_completed(self, now_ms: int, task_id: int, result: object) -> list[Effect]:
        raise AssertionError("the share coordinator hands out no tasks")

    # ================================================================ operations

    def read(
        self, now_ms: int, token: RequestToken, key: ShareStateKey, leader_epoch: int
    ) -> list[Effect]:
        """ReadShareGroupState: the state (None if there is none), recording
        ``leader_epoch`` as the newest leader's."""
        return self._serialized(key, lambda: self._read(token, key, leader_epoch))

    def initialize(
        self,
        now_ms: int,
        token: RequestToken,
        key: ShareStateKey,
        start_offset: int,
        state_epoch: int | None = None,
    ) -> list[Effect]:
        """InitializeShareGroupState: a fresh state at ``start_offset``, replacing any.
        Its state epoch is ``state_epoch`` when given (refused with FENCED_STATE_EPOCH if
        the current one is newer: Kafka's rule, so a retried request succeeds), else the
        current one + 1 (:data:`INITIAL_STATE_EPOCH` for a share-partition without
        state)."""
        return self._serialized(
            key, lambda: self._initialize(token, key, start_offset, state_epoch)
        )

    def write(
        self, now_ms: int, token: RequestToken, key: ShareStateKey, state: ShareState
    ) -> list[Effect]:
        """WriteShareGroupState: replace the state. A negative ``start_offset`` keeps the
        current one (Kafka: -1, "not being written")."""
        return self._serialized(key, lambda: self._write(token, key, state))

    def delete(self, now_ms: int, token: RequestToken, key: ShareStateKey) -> list[Effect]:
        """DeleteShareGroupState: forget the share-partition (a tombstone)."""
        return self._serialized(key, lambda: self._delete(token, key))

    def append_completed(
        self, now_ms: int, append_id: int, error: ErrorCode | None
    ) -> list[Effect]:
        key, stored, token = self._in_flight.pop(append_id)
        effects: list[Effect]
        if error is not None:
            effects = _refused(
                token, look_up_again(error), f"writing the state failed: {error.name}"
            )
        else:
            if stored is None:
                self._states.pop(key, None)
                self._leader_epochs.pop(key, None)
            else:
                self._states[key] = stored
                self._leader_epochs[key] = max(
                    stored.leader_epoch, self._leader_epochs.get(key, NO_LEADER_EPOCH)
                )
            effects = [Reply(token, Outcome(state=stored))]
        waiting = self._busy.pop(key)
        while waiting:
            effects += waiting.popleft()()
            if key in self._busy:
                # That operation writes a record: the rest wait for it.
                self._busy[key].extend(waiting)
                break
        return effects

    # ================================================================== plumbing

    def _serialized(self, key: ShareStateKey, operation: _Operation) -> list[Effect]:
        """Run ``operation`` now, or once the share-partition's record being written
        is committed or failed."""
        waiting = self._busy.get(key)
        if waiting is not None:
            waiting.append(operation)
            return []
        return operation()

    def _store(
        self, token: RequestToken, key: ShareStateKey, stored: ShareState | None
    ) -> list[Effect]:
        append_id = next(self._append_ids)
        self._in_flight[append_id] = (key, stored, token)
        self._busy[key] = collections.deque()
        value = None if stored is None else encode_value(stored)
        return [Append(append_id, ((encode_key(key), value),))]

    def _fenced_leader(self, key: ShareStateKey, leader_epoch: int) -> str | None:
        recorded = self._leader_epochs.get(key, NO_LEADER_EPOCH)
        if leader_epoch < recorded:
            return f"leader epoch {leader_epoch} is older than {recorded}"
        return None

    def _read(self, token: RequestToken, key: ShareStateKey, leader_epoch: int) -> list[Effect]:
        state = self._states.get(key)
        if leader_epoch == NO_LEADER_EPOCH:
            return [Reply(token, Outcome(state=state))]
        fenced = self._fenced_leader(key, leader_epoch)
        if fenced is not None:
            return _refused(token, ErrorCode.fenced_leader_epoch, fenced)
        if leader_epoch == self._leader_epochs.get(key, NO_LEADER_EPOCH):
            return [Reply(token, Outcome(state=state))]
        if state is None:
            # Nothing to store it in yet: remembered here until the first state.
            self._leader_epochs[key] = leader_epoch
            return [Reply(token, Outcome())]
        return self._store(
            token,
            key,
            ShareState(state.state_epoch, state.start_offset, state.batches, leader_epoch),
        )

    def _initialize(
        self,
        token: RequestToken,
        key: ShareStateKey,
        start_offset: int,
        state_epoch: int | None,
    ) -> list[Effect]:
        if start_offset < 0:
            return _refused(token, ErrorCode.invalid_request, f"start offset {start_offset}")
        current = self._states.get(key)
        if state_epoch is None:
            state_epoch = INITIAL_STATE_EPOCH if current is None else current.state_epoch + 1
        elif current is not None and current.state_epoch > state_epoch:
            return _refused(
                token,
                ErrorCode.fenced_state_epoch,
                f"state epoch {state_epoch} is older than {current.state_epoch}",
            )
        leader_epoch = self._leader_epochs.get(key, NO_LEADER_EPOCH)
        return self._store(token, key, ShareState(state_epoch, start_offset, (), leader_epoch))

    def _write(self, token: RequestToken, key: ShareStateKey, state: ShareState) -> list[Effect]:
        current = self._states.get(key)
        if current is None:
            return _refused(token, ErrorCode.fenced_state_epoch, "the share-partition has no state")
        if state.state_epoch != current.state_epoch:
            return _refused(
                token,
                ErrorCode.fenced_state_epoch,
                f"state epoch {state.state_epoch} is not the current {current.state_epoch}",
            )
        fenced = self._fenced_leader(key, state.leader_epoch)
        if fenced is not None:
            return _refused(token, ErrorCode.fenced_leader_epoch, fenced)
        start_offset = current.start_offset if state.start_offset < 0 else state.start_offset
        problem = batches_problem(start_offset, state.batches)
        if problem is not None:
            return _refused(token, ErrorCode.invalid_request, problem)
        leader_epoch = max(state.leader_epoch, self._leader_epochs.get(key, NO_LEADER_EPOCH))
        return self._store(
            token, key, ShareState(state.state_epoch, start_offset, state.batches, leader_epoch)
        )

    def _delete(self, token: RequestToken, key: ShareStateKey) -> list[Effect]:
        if key not in self._states:
            self._leader_epochs.pop(key, None)
            return [Reply(token, Outcome())]
        return self._store(token, key, None)
