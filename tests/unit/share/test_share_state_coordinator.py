"""The share coordinator shard on its own: what each operation writes and answers, the
leader-epoch and state-epoch fencing, operations on one share-partition waiting for its
record, and a new shard rebuilt by replaying the records."""

from __future__ import annotations

import uuid

from sluice.common.errors import ErrorCode
from sluice.coordinator.api import Append, Effect, Record, Reply
from sluice.share.state import DeliveryState, ShareState, ShareStateKey, StateBatch
from sluice.share.state_coordinator import Outcome, ShareStateCoordinator, ShareStateSummary
from sluice.share.state_records import decode_key, decode_value

KEY = ShareStateKey("queue-a", uuid.UUID(int=1), 0)
OTHER = ShareStateKey("queue-a", uuid.UUID(int=1), 1)
ELSEWHERE = ShareStateKey("queue-b", uuid.UUID(int=2), 0)


class Driver:
    """Hands operations to a shard and completes its appends like the runtime: the
    records of every committed append are kept, as the partition would keep them."""

    def __init__(self) -> None:
        self.shard = ShareStateCoordinator()
        self.log: list[Record] = []
        self.pending: list[Append] = []
        self.replies: dict[int, Outcome] = {}
        self._tokens = 0

    def _collect(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Append):
                self.pending.append(effect)
            else:
                assert isinstance(effect, Reply) and isinstance(effect.response, Outcome)
                self.replies[effect.token] = effect.response

    def start(self, operation: str, *args: object) -> int:
        self._tokens += 1
        self._collect(getattr(self.shard, operation)(0, self._tokens, *args))
        return self._tokens

    def complete(self, error: ErrorCode | None = None) -> None:
        append = self.pending.pop(0)
        if error is None:
            self.log.extend(append.records)
        self._collect(self.shard.append_completed(0, append.append_id, error))

    def call(self, operation: str, *args: object) -> Outcome:
        """Run an operation and complete every append it (and what waited) makes."""
        token = self.start(operation, *args)
        while self.pending:
            self.complete()
        return self.replies.pop(token)


def test_initialize_write_read_delete() -> None:
    driver = Driver()
    assert driver.call("read", KEY, 3) == Outcome()
    initialized = driver.call("initialize", KEY, 100)
    assert initialized.state == ShareState(0, 100, (), leader_epoch=3)
    batches = (StateBatch(100, 109, DeliveryState.ACKNOWLEDGED, 1),)
    assert driver.call("write", KEY, ShareState(0, 100, batches, 3)) == Outcome(
        state=ShareState(0, 100, batches, 3)
    )
    assert driver.call("read", KEY, 3).state == ShareState(0, 100, batches, 3)
    assert driver.shard.summary(KEY) == ShareStateSummary(0, 3, 100)
    # A start offset of -1 keeps the current one (Kafka's "not being written").
    assert driver.call("write", KEY, ShareState(0, -1, (), 3)).state == ShareState(0, 100, (), 3)
    assert driver.call("delete", KEY) == Outcome()
    assert driver.call("read", KEY, 3) == Outcome()
    assert driver.shard.summary(KEY) is None
    assert decode_key(driver.log[-1][0]) == KEY and driver.log[-1][1] is None


def test_initialize_takes_the_next_state_epoch_and_fences_older_writes() -> None:
    driver = Driver()
    driver.call("initialize", KEY, 0)
    assert driver.call("initialize", KEY, 50).state == ShareState(1, 50)
    fenced = driver.call("write", KEY, ShareState(0, 60))
    assert fenced.error is ErrorCode.fenced_state_epoch
    assert driver.call("write", KEY, ShareState(1, 60)).error is ErrorCode.none
    # An explicit state epoch (a peer's InitializeShareGroupState) may not go back.
    assert driver.call("initialize", KEY, 0, 0).error is ErrorCode.fenced_state_epoch
    assert driver.call("initialize", KEY, 70, 5).state == ShareState(5, 70)


def test_a_write_without_state_is_fenced_and_bad_batches_are_refused() -> None:
    driver = Driver()
    assert driver.call("write", KEY, ShareState(0, 0)).error is ErrorCode.fenced_state_epoch
    assert driver.call("initialize", KEY, -1).error is ErrorCode.invalid_request
    driver.call("initialize", KEY, 10)
    below = ShareState(0, 10, (StateBatch(5, 12, DeliveryState.AVAILABLE, 1),))
    assert driver.call("write", KEY, below).error is ErrorCode.invalid_request
    acquired = ShareState(0, 10, (StateBatch(10, 12, DeliveryState.ACQUIRED, 1),))
    assert driver.call("write", KEY, acquired).error is ErrorCode.invalid_request
    assert len(driver.log) == 1, "refusals write nothing"


def test_a_newer_leader_fences_the_older_one_across_a_reload() -> None:
    driver = Driver()
    driver.call("read", KEY, 4)
    driver.call("initialize", KEY, 0)
    assert driver.call("write", KEY, ShareState(0, 5, (), 4)).error is ErrorCode.none
    # A new leader (epoch 5) reads: the epoch is written before it is answered.
    written = len(driver.log)
    token = driver.start("read", KEY, 5)
    assert token not in driver.replies and len(driver.pending) == 1
    driver.complete()
    assert driver.replies[token].state == ShareState(0, 5, (), 5)
    assert decode_value(driver.log[written][1] or b"").leader_epoch == 5
    # The deposed leader can neither write nor read.
    assert driver.call("write", KEY, ShareState(0, 9, (), 4)).error is ErrorCode.fenced_leader_epoch
    assert driver.call("read", KEY, 4).error is ErrorCode.fenced_leader_epoch
    # A read without a leader epoch (-1) is neither fenced nor recorded.
    assert driver.call("read", KEY, -1).state == ShareState(0, 5, (), 5)
    # A new shard replaying the log fences the old leader the same way.
    reloaded = Driver()
    for key, value in driver.log:
        reloaded.shard.replay(key, value)
    reloaded.shard.load_completed(0)
    assert reloaded.shard.state(KEY) == ShareState(0, 5, (), 5)
    assert (
        reloaded.call("write", KEY, ShareState(0, 9, (), 4)).error is ErrorCode.fenced_leader_epoch
    )
    assert reloaded.call("write", KEY, ShareState(0, 9, (), 5)).error is ErrorCode.none


def test_operations_on_a_share_partition_wait_for_its_record_others_do_not() -> None:
    driver = Driver()
    driver.call("initialize", KEY, 0)
    driver.call("initialize", OTHER, 0)
    writing = driver.start("write", KEY, ShareState(0, 10, (), 1))
    reading = driver.start("read", KEY, 1)
    stale = driver.start("write", KEY, ShareState(0, 11, (), 0))
    other = driver.start("read", OTHER, -1)
    assert driver.replies.pop(other).state == ShareState(0, 0)
    assert not {writing, reading, stale} & set(driver.replies)
    driver.complete()
    assert driver.replies[writing].state == ShareState(0, 10, (), 1)
    assert driver.replies[reading].state == ShareState(0, 10, (), 1), "sees the committed write"
    assert driver.replies[stale].error is ErrorCode.fenced_leader_epoch


def test_a_failed_write_changes_nothing_and_releases_the_waiting() -> None:
    driver = Driver()
    driver.call("initialize", KEY, 0)
    writing = driver.start("write", KEY, ShareState(0, 10))
    reading = driver.start("read", KEY, -1)
    driver.complete(ErrorCode.not_leader_or_follower)
    assert driver.replies[writing].error is ErrorCode.not_coordinator
    assert driver.replies[reading].state == ShareState(0, 0)
    token = driver.start("write", KEY, ShareState(0, 10))
    driver.complete(ErrorCode.not_enough_replicas)
    assert driver.replies[token].error is ErrorCode.coordinator_not_available


def test_keys_of_a_group() -> None:
    driver = Driver()
    for key in (OTHER, ELSEWHERE, KEY):
        driver.call("initialize", key, 0)
    assert driver.shard.keys_of_group("queue-a") == [KEY, OTHER]
    assert driver.shard.keys_of_group("queue-b") == [ELSEWHERE]
    assert driver.shard.keys_of_group("nobody") == []
