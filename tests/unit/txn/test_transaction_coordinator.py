"""The transaction coordinator as a state machine: every operation driven directly, its
appends completed (or failed) by hand, its marker tasks finished by hand. No broker."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.coordinator.api import Append, Effect, Reply, Task
from sluice.txn.api import (
    AddPartitionsRequest,
    AddPartitionsResult,
    EndTxnRequest,
    InitProducerIdRequest,
    ListTransactionsFilter,
    ProducerIdAndEpoch,
    WriteMarkers,
)
from sluice.txn.config import TransactionConfig
from sluice.txn.coordinator import PRODUCER_EPOCH_MAX, Transaction, TransactionCoordinator
from sluice.txn.records import TransactionState, decode_key, decode_value

T = "app-1"
P0, P1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
TIMEOUT_MS = 10_000
CHECK_MS = 1_000


class Driver:
    """Feeds a coordinator, completes its appends in order, and collects replies."""

    def __init__(self) -> None:
        self.shard = TransactionCoordinator(TransactionConfig(abort_check_interval_ms=CHECK_MS))
        self.shard.load_completed(0)
        self.now = 0
        self.token = 0
        self.replies: dict[int, object] = {}
        self.appends: list[Append] = []
        self.tasks: list[Task] = []
        self.log: list[tuple[bytes, bytes | None]] = []

    def take(self, effects: Sequence[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Reply):
                self.replies[effect.token] = effect.response
            elif isinstance(effect, Task):
                self.tasks.append(effect)
            else:
                self.appends.append(effect)

    def complete_appends(self, error: ErrorCode | None = None) -> None:
        while self.appends:
            self.complete_next_append(error)

    def complete_next_append(self, error: ErrorCode | None = None) -> None:
        append = self.appends.pop(0)
        if error is None:
            self.log.extend(append.records)
        self.take(self.shard.append_completed(self.now, append.append_id, error))

    def finish_tasks(self) -> list[WriteMarkers]:
        done = []
        while self.tasks:
            task = self.tasks.pop(0)
            assert isinstance(task.work, WriteMarkers)
            done.append(task.work)
            self.take(self.shard.task_completed(self.now, task.task_id, None))
            self.complete_appends()
        return done

    def call(self, operation: str, *args: object, settle: bool = True) -> object:
        self.token += 1
        token = self.token
        self.take(getattr(self.shard, operation)(self.now, token, *args))
        if settle:
            self.complete_appends()
        return self.replies.get(token)

    def init(self, fresh: int | None = 100, tid: str = T, **kwargs: int) -> ProducerIdAndEpoch:
        answer = self.call(
            "init_producer_id", InitProducerIdRequest(tid, TIMEOUT_MS, **kwargs), fresh
        )
        assert isinstance(answer, ProducerIdAndEpoch)
        return answer

    def add(
        self,
        producer: ProducerIdAndEpoch,
        *partitions: TopicPartition,
        verify: bool = False,
        tid: str = T,
    ) -> AddPartitionsResult:
        answer = self.call(
            "add_partitions",
            AddPartitionsRequest(
                tid, producer.producer_id, producer.producer_epoch, partitions, verify
            ),
        )
        assert isinstance(answer, AddPartitionsResult)
        return answer

    def end(
        self,
        producer: ProducerIdAndEpoch,
        *,
        commit: bool,
        bump: bool = False,
        fresh: int | None = None,
        tid: str = T,
    ) -> ProducerIdAndEpoch:
        answer = self.call(
            "end_txn",
            EndTxnRequest(tid, producer.producer_id, producer.producer_epoch, commit, bump),
            fresh,
        )
        assert isinstance(answer, ProducerIdAndEpoch)
        return answer

    def state(self, tid: str = T) -> TransactionState:
        return self.transaction(tid).state

    def transaction(self, tid: str = T) -> Transaction:
        transaction = self.shard.transaction(tid)
        assert transaction is not None
        return transaction

    def check(self, now: int) -> list[Effect]:
        """Move the clock and run the timers; the effects are taken (not settled)."""
        self.now = now
        effects = self.shard.poll(now)
        self.take(effects)
        return effects


def ok(answer: ProducerIdAndEpoch) -> ProducerIdAndEpoch:
    assert answer.error is ErrorCode.none, answer
    return answer


def test_a_new_id_gets_the_fresh_producer_id_at_epoch_0_and_a_record() -> None:
    driver = Driver()
    producer = ok(driver.init())
    assert (producer.producer_id, producer.producer_epoch) == (100, 0)
    ((key, value),) = driver.log
    assert decode_key(key) == T
    assert value is not None and decode_value(value).state is TransactionState.EMPTY


def test_init_again_bumps_the_epoch_and_fences_the_old_instance() -> None:
    driver = Driver()
    old = ok(driver.init())
    new = ok(driver.init(fresh=None))
    assert (new.producer_id, new.producer_epoch) == (100, 1)
    assert driver.add(old, P0).errors == {P0: ErrorCode.producer_fenced}
    assert driver.end(old, commit=True).error is ErrorCode.producer_fenced


def test_a_commit_answers_after_the_decision_then_writes_markers_then_completes() -> None:
    driver = Driver()
    producer = ok(driver.init())
    assert driver.add(producer, P0, P1).errors == {P0: ErrorCode.none, P1: ErrorCode.none}
    assert driver.state() is TransactionState.ONGOING
    assert driver.add(producer, P0).errors == {P0: ErrorCode.none}
    records_before = len(driver.log)
    assert driver.add(producer, P1).errors[P1] is ErrorCode.none
    assert len(driver.log) == records_before, "adding a partition already in writes nothing"
    answer = driver.call("end_txn", EndTxnRequest(T, 100, 0, True), None, settle=False)
    assert answer is None, "no answer before the decision is written"
    driver.complete_appends()
    assert driver.replies[driver.token] == ProducerIdAndEpoch(ErrorCode.none, 100, 0)
    assert driver.state() is TransactionState.PREPARE_COMMIT
    (markers,) = driver.finish_tasks()
    assert (markers.committed, markers.partitions, markers.producer_epoch) == (True, (P0, P1), 0)
    assert driver.state() is TransactionState.COMPLETE_COMMIT
    # A retried commit is answered as done; an abort of it is refused.
    assert driver.end(producer, commit=True).error is ErrorCode.none
    assert driver.end(producer, commit=False).error is ErrorCode.invalid_txn_state


def test_requests_while_deciding_or_writing_are_concurrent() -> None:
    driver = Driver()
    producer = ok(driver.init())
    driver.add(producer, P0)
    driver.end(producer, commit=False)
    assert driver.state() is TransactionState.PREPARE_ABORT
    assert driver.add(producer, P1).errors == {P1: ErrorCode.concurrent_transactions}
    assert driver.init(fresh=None).error is ErrorCode.concurrent_transactions
    driver.call("add_partitions", AddPartitionsRequest(T, 100, 0, (P0,)), settle=False)
    driver.finish_tasks()
    assert driver.state() is TransactionState.COMPLETE_ABORT


def test_verify_only_answers_per_partition_and_writes_nothing() -> None:
    driver = Driver()
    producer = ok(driver.init())
    driver.add(producer, P0)
    records = len(driver.log)
    answer = driver.add(producer, P0, P1, verify=True)
    assert answer.errors == {P0: ErrorCode.none, P1: ErrorCode.invalid_txn_state}
    assert len(driver.log) == records
    assert driver.add(ProducerIdAndEpoch(ErrorCode.none, 7, 0), P0, verify=True).errors == {
        P0: ErrorCode.invalid_producer_id_mapping
    }


def test_a_failed_write_changes_nothing_and_says_look_again() -> None:
    driver = Driver()
    producer = ok(driver.init())
    driver.call("add_partitions", AddPartitionsRequest(T, 100, 0, (P0,)), settle=False)
    driver.complete_appends(ErrorCode.not_leader_or_follower)
    assert driver.replies[driver.token] == AddPartitionsResult({P0: ErrorCode.not_coordinator})
    assert driver.state() is TransactionState.EMPTY
    assert driver.add(producer, P0).errors == {P0: ErrorCode.none}


def test_a_new_id_whose_first_write_fails_is_forgotten() -> None:
    driver = Driver()
    driver.call("init_producer_id", InitProducerIdRequest(T, TIMEOUT_MS), 100, settle=False)
    driver.complete_appends(ErrorCode.request_timed_out)
    assert driver.replies[driver.token] == ProducerIdAndEpoch(ErrorCode.coordinator_not_available)
    assert driver.shard.transaction(T) is None


def test_init_while_a_transaction_is_open_aborts_it_with_the_epoch_bumped() -> None:
    driver = Driver()
    producer = ok(driver.init())
    driver.add(producer, P0)
    assert driver.init(fresh=None).error is ErrorCode.concurrent_transactions
    (markers,) = driver.finish_tasks()
    assert (markers.committed, markers.producer_epoch) == (False, 1)
    again = ok(driver.init(fresh=None))
    assert again.producer_epoch == 2


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() -> None:
    driver = Driver()
    producer = ok(driver.init())
    driver.add(producer, P0)
    driver.now = TIMEOUT_MS + CHECK_MS
    assert driver.shard.next_deadline_ms() is not None
    driver.take(driver.shard.poll(driver.now))
    driver.complete_appends()
    (markers,) = driver.finish_tasks()
    assert (markers.committed, markers.producer_epoch) == (False, 1)
    assert driver.state() is TransactionState.COMPLETE_ABORT
    assert driver.end(producer, commit=True).error is ErrorCode.producer_fenced
    # KIP-360: the fenced producer may start over with its last id and epoch.
    assert ok(driver.init(fresh=None, producer_id=100, producer_epoch=0)).producer_epoch == 2


def test_transaction_version_2_bumps_the_epoch_at_each_end_and_fences_a_late_end_txn() -> None:
    """KAFKA-17754: EndTxn(T1) delayed until T2 has begun is fenced, not applied to T2."""
    driver = Driver()
    first = ok(driver.init())
    driver.add(first, P0)
    second = ok(driver.end(first, commit=True, bump=True))
    assert (second.producer_id, second.producer_epoch) == (100, 1)
    (markers,) = driver.finish_tasks()
    assert markers.producer_epoch == 1, "the markers carry the new epoch"
    # The client retries the EndTxn that bumped: answered as done, with the new epoch.
    assert driver.end(first, commit=True, bump=True) == ProducerIdAndEpoch(ErrorCode.none, 100, 1)
    driver.add(second, P0)
    # The delayed EndTxn of the first transaction arrives during the second.
    assert driver.end(first, commit=True, bump=True).error is ErrorCode.producer_fenced
    assert driver.state() is TransactionState.ONGOING


def reloaded(driver: Driver) -> Driver:
    """A new coordinator for the partition (failover): it knows only the log."""
    loaded = Driver()
    loaded.shard = TransactionCoordinator(TransactionConfig(abort_check_interval_ms=CHECK_MS))
    for key, value in driver.log:
        loaded.shard.replay(key, value)
    loaded.shard.load_completed(driver.now)
    loaded.now, loaded.log = driver.now, list(driver.log)
    return loaded


def test_a_version_2_end_txn_retried_while_its_markers_are_written_is_concurrent() -> None:
    """The retry carries the epoch before the bump: CONCURRENT_TRANSACTIONS while the
    decision is being finished (the client retries), not PRODUCER_FENCED (fatal)."""
    driver = Driver()
    first = ok(driver.init())
    driver.add(first, P0)
    assert ok(driver.end(first, commit=True, bump=True)).producer_epoch == 1
    assert driver.state() is TransactionState.PREPARE_COMMIT
    assert driver.end(first, commit=True, bump=True).error is ErrorCode.concurrent_transactions
    assert driver.end(first, commit=False, bump=True).error is ErrorCode.invalid_txn_state
    # The markers are written and Complete* is being written: still concurrent.
    (task,) = driver.tasks
    driver.tasks.clear()
    driver.take(driver.shard.task_completed(driver.now, task.task_id, None))
    assert driver.end(first, commit=True, bump=True).error is ErrorCode.concurrent_transactions
    driver.complete_appends()
    assert driver.state() is TransactionState.COMPLETE_COMMIT
    assert driver.end(first, commit=True, bump=True) == ProducerIdAndEpoch(ErrorCode.none, 100, 1)
    assert driver.end(first, commit=False, bump=True).error is ErrorCode.invalid_txn_state
    # An epoch older than the one before the bump is a zombie's.
    stale = ProducerIdAndEpoch(ErrorCode.none, 100, -1)
    assert driver.end(stale, commit=True, bump=True).error is ErrorCode.producer_fenced


def test_a_version_2_abort_retried_after_it_completed_is_answered_with_the_new_epoch() -> None:
    driver = Driver()
    first = ok(driver.init())
    driver.add(first, P0)
    ok(driver.end(first, commit=False, bump=True))
    assert driver.end(first, commit=False, bump=True).error is ErrorCode.concurrent_transactions
    assert driver.end(first, commit=True, bump=True).error is ErrorCode.invalid_txn_state
    driver.finish_tasks()
    assert driver.end(first, commit=False, bump=True) == ProducerIdAndEpoch(ErrorCode.none, 100, 1)
    assert driver.end(first, commit=True, bump=True).error is ErrorCode.invalid_txn_state
    assert driver.state() is TransactionState.COMPLETE_ABORT


@pytest.mark.parametrize("markers_written", [False, True])
def test_a_version_2_end_txn_retried_at_a_new_coordinator_is_recognised(
    markers_written: bool,
) -> None:
    """The client is told NOT_COORDINATOR, finds the new coordinator and retries with
    the epoch it had: the new coordinator knows the retry from the epoch alone."""
    driver = Driver()
    first = ok(driver.init())
    driver.add(first, P0)
    ok(driver.end(first, commit=True, bump=True))
    if markers_written:
        driver.finish_tasks()
    new = reloaded(driver)
    if markers_written:
        assert new.end(first, commit=True, bump=True) == ProducerIdAndEpoch(ErrorCode.none, 100, 1)
        return
    assert new.end(first, commit=True, bump=True).error is ErrorCode.concurrent_transactions
    new.take(new.shard.poll(new.now))
    (markers,) = new.finish_tasks()
    assert (markers.committed, markers.producer_epoch) == (True, 1)
    assert new.end(first, commit=True, bump=True) == ProducerIdAndEpoch(ErrorCode.none, 100, 1)


def test_a_producer_fenced_by_a_timeout_is_not_taken_for_a_version_2_retry() -> None:
    """The coordinator's own bump (timeout abort) also leaves the producer one epoch
    behind; its EndTxn is a zombie's, not a retry."""
    driver = Driver()
    producer = ok(driver.init())
    driver.add(producer, P0)
    driver.now = TIMEOUT_MS + CHECK_MS
    driver.take(driver.shard.poll(driver.now))
    driver.complete_appends()
    assert driver.state() is TransactionState.PREPARE_ABORT
    assert driver.end(producer, commit=False, bump=True).error is ErrorCode.producer_fenced
    driver.finish_tasks()
    assert driver.state() is TransactionState.COMPLETE_ABORT
    assert driver.end(producer, commit=False, bump=True).error is ErrorCode.producer_fenced
    assert driver.end(producer, commit=True, bump=True).error is ErrorCode.producer_fenced


def test_a_version_2_end_txn_that_moved_to_a_new_producer_id_can_be_retried() -> None:
    driver = Driver()
    ok(driver.init())
    transaction = driver.shard.transaction(T)
    assert transaction is not None
    transaction.producer_epoch = PRODUCER_EPOCH_MAX - 1
    exhausted = ProducerIdAndEpoch(ErrorCode.none, 100, PRODUCER_EPOCH_MAX - 1)
    driver.add(exhausted, P0)
    assert ok(driver.end(exhausted, commit=True, bump=True, fresh=300)).producer_id == 300
    retried = driver.end(exhausted, commit=True, bump=True)
    assert retried.error is ErrorCode.concurrent_transactions
    driver.finish_tasks()
    assert driver.end(exhausted, commit=True, bump=True) == ProducerIdAndEpoch(
        ErrorCode.none, 300, 0
    )
    assert driver.end(exhausted, commit=False, bump=True).error is ErrorCode.invalid_txn_state


def finish_markers_then_fail_completion(driver: Driver, error: ErrorCode) -> None:
    """Every marker is written, but writing Complete* fails."""
    while driver.tasks:
        task = driver.tasks.pop(0)
        driver.take(driver.shard.task_completed(driver.now, task.task_id, None))
    assert len(driver.appends) == 1
    driver.complete_appends(error)


@pytest.mark.parametrize(
    "error",
    [ErrorCode.not_enough_replicas, ErrorCode.request_timed_out, ErrorCode.not_leader_or_follower],
)
def test_a_completion_that_failed_to_be_written_is_written_again_at_the_next_check(
    error: ErrorCode,
) -> None:
    driver = Driver()
    driver.take(driver.shard.poll(driver.now))  # the first check: the next is at CHECK_MS
    producer = ok(driver.init())
    driver.add(producer, P0)
    ok(driver.end(producer, commit=True))
    driver.now = CHECK_MS
    assert driver.shard.poll(driver.now) == [], "markers being written are left alone"
    finish_markers_then_fail_completion(driver, error)
    assert driver.state() is TransactionState.PREPARE_COMMIT
    assert driver.end(producer, commit=True).error is ErrorCode.concurrent_transactions
    driver.now = 2 * CHECK_MS - 1
    assert driver.shard.poll(driver.now) == [], "nothing before the next check"
    driver.now = 2 * CHECK_MS
    assert driver.shard.next_deadline_ms() == 2 * CHECK_MS
    effects = driver.shard.poll(driver.now)
    assert [type(effect) for effect in effects] == [Append], "the markers are in already"
    driver.take(effects)
    records = len(driver.log)
    driver.complete_appends()
    (key, value) = driver.log[records]
    assert decode_key(key) == T
    assert value is not None
    assert decode_value(value).state is TransactionState.COMPLETE_COMMIT
    assert driver.state() is TransactionState.COMPLETE_COMMIT
    assert driver.end(producer, commit=True).error is ErrorCode.none
    driver.now = 3 * CHECK_MS
    assert driver.shard.poll(driver.now) == [], "finished: nothing more to write"


def test_a_completion_is_retried_at_every_check_until_it_is_written() -> None:
    """A version-2 abort of a transaction that added nothing has no markers: Complete*
    is written at once, and retried the same way."""
    driver = Driver()
    driver.take(driver.shard.poll(driver.now))
    producer = ok(driver.init())
    driver.call("end_txn", EndTxnRequest(T, 100, 0, False, True), None, settle=False)
    driver.complete_next_append()  # the decision
    assert driver.state() is TransactionState.PREPARE_ABORT
    assert len(driver.appends) == 1, "Complete* follows the decision at once"
    driver.complete_appends(ErrorCode.not_enough_replicas)
    for check in (1, 2):
        driver.now = check * CHECK_MS
        driver.take(driver.shard.poll(driver.now))
        assert len(driver.appends) == 1
        driver.complete_appends(ErrorCode.not_enough_replicas if check == 1 else None)
    assert driver.state() is TransactionState.COMPLETE_ABORT
    retried = driver.end(producer, commit=False, bump=True)
    assert retried == ProducerIdAndEpoch(ErrorCode.none, 100, 1)


def test_an_exhausted_epoch_moves_the_producer_to_a_fresh_id() -> None:
    driver = Driver()
    ok(driver.init())
    transaction = driver.shard.transaction(T)
    assert transaction is not None
    transaction.producer_epoch = PRODUCER_EPOCH_MAX - 1
    exhausted = ProducerIdAndEpoch(ErrorCode.none, 100, PRODUCER_EPOCH_MAX - 1)
    assert driver.init(fresh=None).error is ErrorCode.concurrent_transactions
    assert ok(driver.init(fresh=200)).producer_id == 200
    # With version 2, EndTxn switches ids once the markers of the old one are written.
    transaction.producer_id, transaction.producer_epoch = 100, PRODUCER_EPOCH_MAX - 1
    driver.add(exhausted, P0)
    answer = ok(driver.end(exhausted, commit=True, bump=True, fresh=300))
    assert (answer.producer_id, answer.producer_epoch) == (300, 0)
    (markers,) = driver.finish_tasks()
    assert (markers.producer_id, markers.producer_epoch) == (100, PRODUCER_EPOCH_MAX - 1)
    assert driver.shard.transaction(T).producer_id == 300  # type: ignore[union-attr]


def test_loading_a_decided_transaction_writes_its_markers_again() -> None:
    driver = Driver()
    producer = ok(driver.init())
    driver.add(producer, P0)
    driver.end(producer, commit=True)
    driver.tasks.clear()  # the coordinator died before the markers were written
    loaded = TransactionCoordinator()
    for key, value in driver.log:
        loaded.replay(key, value)
    loaded.load_completed(5)
    assert loaded.next_deadline_ms() == 0
    (task,) = [effect for effect in loaded.poll(5) if isinstance(effect, Task)]
    assert isinstance(task.work, WriteMarkers)
    assert (task.work.committed, task.work.partitions) == (True, (P0,))


@pytest.mark.parametrize(
    ("wanted", "listed"),
    [
        (ListTransactionsFilter(), ["a", "b"]),
        (ListTransactionsFilter(states=frozenset({"Ongoing"})), ["a"]),
        (ListTransactionsFilter(producer_ids=frozenset({101})), ["b"]),
        (ListTransactionsFilter(duration_ms=500), ["a"]),
        (ListTransactionsFilter(duration_ms=5_000), []),
        (ListTransactionsFilter(states=frozenset({"Empty", "Ongoing"})), ["a", "b"]),
        (ListTransactionsFilter(states=frozenset({"CompleteCommit"})), []),
        (ListTransactionsFilter(producer_ids=frozenset({100, 101, 999})), ["a", "b"]),
        # Filters combine: every one must match.
        (ListTransactionsFilter(states=frozenset({"Ongoing"}), producer_ids=frozenset({101})), []),
        # Open longer than the duration (Kafka: strictly), and only open transactions.
        (ListTransactionsFilter(duration_ms=999), ["a"]),
        (ListTransactionsFilter(duration_ms=1_000), []),
        (ListTransactionsFilter(states=frozenset({"Empty"}), duration_ms=0), []),
    ],
)
def test_list_and_describe(wanted: ListTransactionsFilter, listed: list[str]) -> None:
    shard = TransactionCoordinator()
    shard.load_completed(0)
    effects: list[Effect] = []
    effects += shard.init_producer_id(0, 1, InitProducerIdRequest("a", TIMEOUT_MS), 100)
    effects += shard.init_producer_id(0, 2, InitProducerIdRequest("b", TIMEOUT_MS), 101)
    for effect in effects:
        if isinstance(effect, Append):
            shard.append_completed(0, effect.append_id, None)
    for effect in shard.add_partitions(0, 3, AddPartitionsRequest("a", 100, 0, (P0,))):
        if isinstance(effect, Append):
            shard.append_completed(0, effect.append_id, None)
    assert [t.transactional_id for t in shard.list_transactions(1_000, wanted)] == listed
    (described, unknown) = shard.describe(["a", "nope"])
    assert (described.state, described.partitions, described.start_ms) == ("Ongoing", (P0,), 0)
    assert unknown.error is ErrorCode.transactional_id_not_found


def test_describe_and_list_follow_a_transaction_to_its_end() -> None:
    driver = Driver()
    producer = ok(driver.init())
    driver.now = 300
    driver.add(producer, P1, P0)
    driver.now = 400
    ok(driver.end(producer, commit=True, bump=True))

    def described() -> tuple[object, ...]:
        (description,) = driver.shard.describe([T])
        assert description.error is ErrorCode.none
        return (
            description.state,
            description.partitions,
            description.start_ms,
            description.producer_id,
            description.producer_epoch,
            description.timeout_ms,
        )

    def listed(*states: str) -> list[str]:
        wanted = ListTransactionsFilter(states=frozenset(states))
        return [t.state for t in driver.shard.list_transactions(driver.now, wanted)]

    assert described() == ("PrepareCommit", (P0, P1), 300, 100, 1, TIMEOUT_MS)
    assert listed("PrepareCommit") == ["PrepareCommit"]
    assert listed("Ongoing") == []
    driver.finish_tasks()
    assert described() == ("CompleteCommit", (), 300, 100, 1, TIMEOUT_MS)
    assert listed("CompleteCommit", "CompleteAbort") == ["CompleteCommit"]


# ============================================================================ fencing

OFFSETS = TopicPartition("__consumer_offsets", 7)


def test_every_request_of_a_fenced_instance_is_refused() -> None:
    """A new instance's InitProducerId fences the old one on all it may still send:
    AddPartitions, the verification of its Produce and TxnOffsetCommit (verify only, the
    group's ``__consumer_offsets`` partition), EndTxn of either version, and
    InitProducerId recovery (KIP-360) with its epoch or another producer id."""
    driver = Driver()
    old = ok(driver.init())
    driver.add(old, P0, OFFSETS)
    assert driver.init(fresh=None).error is ErrorCode.concurrent_transactions
    assert driver.state() is TransactionState.PREPARE_ABORT
    assert driver.end(old, commit=True).error is ErrorCode.producer_fenced, "while aborting"
    (markers,) = driver.finish_tasks()
    assert (markers.committed, markers.partitions) == (False, (OFFSETS, P0))
    new = ok(driver.init(fresh=None))
    assert (new.producer_id, new.producer_epoch) == (100, 2)
    assert driver.add(old, P1).errors == {P1: ErrorCode.producer_fenced}
    assert driver.add(old, OFFSETS, verify=True).errors == {OFFSETS: ErrorCode.producer_fenced}
    for bump in (False, True):
        for commit in (False, True):
            answer = driver.end(old, commit=commit, bump=bump)
            assert answer == ProducerIdAndEpoch(ErrorCode.producer_fenced), (commit, bump)
    assert driver.init(fresh=None, producer_id=100, producer_epoch=0).error is (
        ErrorCode.producer_fenced
    )
    assert driver.init(fresh=None, producer_id=99, producer_epoch=2).error is (
        ErrorCode.producer_fenced
    )
    records = len(driver.log)
    assert driver.add(new, OFFSETS).errors == {OFFSETS: ErrorCode.none}
    assert driver.add(new, OFFSETS, verify=True).errors == {OFFSETS: ErrorCode.none}
    assert len(driver.log) == records + 1, "the refused requests wrote nothing"
    assert ok(driver.end(new, commit=True)) == ProducerIdAndEpoch(ErrorCode.none, 100, 2)


def test_requests_for_an_unknown_id_or_producer_are_invalid_mappings() -> None:
    driver = Driver()
    stranger = ProducerIdAndEpoch(ErrorCode.none, 100, 0)
    assert driver.add(stranger, P0).errors == {P0: ErrorCode.invalid_producer_id_mapping}
    assert driver.end(stranger, commit=True).error is ErrorCode.invalid_producer_id_mapping
    ok(driver.init())
    other = ProducerIdAndEpoch(ErrorCode.none, 101, 0)
    assert driver.add(other, P0).errors == {P0: ErrorCode.invalid_producer_id_mapping}
    assert driver.end(other, commit=False, bump=True).error is (
        ErrorCode.invalid_producer_id_mapping
    )
    assert driver.call("init_producer_id", InitProducerIdRequest(T, 0), None) == (
        ProducerIdAndEpoch(ErrorCode.invalid_transaction_timeout)
    )
    too_long = InitProducerIdRequest(T, TransactionConfig().transaction_max_timeout_ms + 1)
    assert driver.call("init_producer_id", too_long, None) == ProducerIdAndEpoch(
        ErrorCode.invalid_transaction_timeout
    )


# =========================================================================== timeouts


def test_the_timeout_counts_from_the_start_and_is_checked_at_each_interval() -> None:
    driver = Driver()
    driver.check(0)  # the first check; the next ones every CHECK_MS
    producer = ok(driver.init())
    ok(driver.init(fresh=200, tid="idle"))
    driver.now = 500
    driver.add(producer, P0)
    driver.now = 9_000
    driver.add(producer, P1)  # adding partitions later does not move the start
    assert driver.transaction().start_ms == 500
    for now in range(CHECK_MS, 10 * CHECK_MS + 1, CHECK_MS):
        assert driver.check(now) == [], f"open {now - 500} ms of {TIMEOUT_MS}"
    assert driver.check(10_500) == [], "past the timeout, but no check is due"
    assert driver.shard.next_deadline_ms() == 11 * CHECK_MS
    (abort,) = driver.check(11 * CHECK_MS)
    assert isinstance(abort, Append)
    (_key, value), *_ = abort.records
    assert value is not None
    decided = decode_value(value)
    assert (decided.state, decided.producer_epoch) == (TransactionState.PREPARE_ABORT, 1)
    driver.complete_appends()
    (markers,) = driver.finish_tasks()
    assert (markers.committed, markers.partitions, markers.producer_epoch) == (False, (P0, P1), 1)
    assert driver.state() is TransactionState.COMPLETE_ABORT
    assert driver.state("idle") is TransactionState.EMPTY, "nothing open: nothing to abort"
    assert driver.check(12 * CHECK_MS) == [], "aborted once"


def test_a_timed_out_transaction_being_written_is_aborted_at_a_later_check() -> None:
    driver = Driver()
    producer = ok(driver.init())
    driver.add(producer, P0)
    driver.call("add_partitions", AddPartitionsRequest(T, 100, 0, (P1,)), settle=False)
    assert driver.check(TIMEOUT_MS) == [], "its AddPartitions is being written"
    driver.complete_appends()
    (abort,) = driver.check(TIMEOUT_MS + CHECK_MS)
    assert isinstance(abort, Append)
    driver.complete_appends()
    (markers,) = driver.finish_tasks()
    assert markers.partitions == (P0, P1)


def test_a_failed_timeout_abort_is_tried_again_at_the_next_check() -> None:
    driver = Driver()
    producer = ok(driver.init())
    driver.add(producer, P0)
    driver.check(TIMEOUT_MS)
    driver.complete_appends(ErrorCode.not_enough_replicas)
    assert (driver.state(), driver.transaction().producer_epoch) == (TransactionState.ONGOING, 0)
    assert driver.add(producer, P1).errors == {P1: ErrorCode.none}, "not fenced: not decided"
    driver.check(TIMEOUT_MS + CHECK_MS)
    driver.complete_appends()
    assert driver.state() is TransactionState.PREPARE_ABORT
    assert driver.add(producer, P1).errors == {P1: ErrorCode.producer_fenced}


# ==================================================================== epoch exhaustion


def exhaust(driver: Driver) -> ProducerIdAndEpoch:
    """Put the id's producer at the last epoch that can be bumped no more."""
    transaction = driver.transaction()
    transaction.producer_epoch = PRODUCER_EPOCH_MAX - 1
    return ProducerIdAndEpoch(ErrorCode.none, transaction.producer_id, PRODUCER_EPOCH_MAX - 1)


def test_only_a_new_id_or_an_exhausted_epoch_needs_a_producer_id() -> None:
    driver = Driver()
    assert driver.shard.needs_producer_id(T, initializing=True)
    assert not driver.shard.needs_producer_id(T, initializing=False)
    ok(driver.init())
    assert not driver.shard.needs_producer_id(T, initializing=True)
    exhaust(driver)
    assert driver.shard.needs_producer_id(T, initializing=True)
    assert driver.shard.needs_producer_id(T, initializing=False)


def test_an_exhausted_epoch_moves_init_to_a_new_producer_id_in_the_log() -> None:
    driver = Driver()
    ok(driver.init())
    old = exhaust(driver)
    new = ok(driver.init(fresh=200))
    assert (new.producer_id, new.producer_epoch) == (200, 0)
    _key, value = driver.log[-1]
    assert value is not None
    stored = decode_value(value)
    assert (stored.producer_id, stored.producer_epoch, stored.state) == (
        200,
        0,
        TransactionState.EMPTY,
    )
    assert driver.add(old, P0).errors == {P0: ErrorCode.invalid_producer_id_mapping}
    assert driver.add(new, P0).errors == {P0: ErrorCode.none}


def test_a_timeout_at_an_exhausted_epoch_aborts_without_a_bump_then_init_moves_on() -> None:
    """The epoch cannot go past the int16 limit: the abort keeps it (its markers at
    that epoch), and the next InitProducerId gets a new producer id."""
    driver = Driver()
    ok(driver.init())
    old = exhaust(driver)
    driver.add(old, P0)
    driver.check(TIMEOUT_MS)
    driver.complete_appends()
    (markers,) = driver.finish_tasks()
    assert (markers.producer_id, markers.producer_epoch) == (100, PRODUCER_EPOCH_MAX - 1)
    assert driver.state() is TransactionState.COMPLETE_ABORT
    assert driver.init(fresh=None).error is ErrorCode.concurrent_transactions, "needs an id"
    assert ok(driver.init(fresh=300)) == ProducerIdAndEpoch(ErrorCode.none, 300, 0)
    assert driver.add(old, P0).errors == {P0: ErrorCode.invalid_producer_id_mapping}


# ======================================================================= load, replay


def test_loading_rebuilds_every_id_from_its_last_record() -> None:
    """Completed and open transactions come back as they were (an open one keeps its
    start, so its timeout still applies); only Prepare* ids get their markers again; a
    tombstone removes an id."""
    driver = Driver()
    done = ok(driver.init(fresh=100, tid="done"))
    driver.add(done, P0, tid="done")
    ok(driver.end(done, commit=True, tid="done"))
    driver.finish_tasks()
    driver.now = 500
    open_ = ok(driver.init(fresh=101, tid="open"))
    driver.add(open_, P1, tid="open")
    deciding = ok(driver.init(fresh=102, tid="deciding"))
    driver.add(deciding, P0, P1, tid="deciding")
    ok(driver.end(deciding, commit=False, tid="deciding"))
    driver.tasks.clear()  # the coordinator fails before the markers are written
    gone = ok(driver.init(fresh=103, tid="gone"))
    driver.log.append((driver.log[-1][0], None))  # its tombstone
    assert decode_key(driver.log[-1][0]) == "gone" and gone.producer_id == 103
    driver.now = 5_000
    new = reloaded(driver)
    described = {d.transactional_id: d for d in new.shard.describe(["done", "open", "gone"])}
    assert (described["done"].state, described["done"].partitions) == ("CompleteCommit", ())
    assert (described["open"].state, described["open"].start_ms) == ("Ongoing", 500)
    assert described["gone"].error is ErrorCode.transactional_id_not_found
    assert new.state("deciding") is TransactionState.PREPARE_ABORT
    (task,) = new.check(5_000)
    assert isinstance(task, Task)
    assert task.work == WriteMarkers("deciding", 102, 0, False, (P0, P1))
    new.finish_tasks()
    assert new.state("deciding") is TransactionState.COMPLETE_ABORT
    # The open transaction's timeout counts from its start before the failover.
    assert new.check(5_000 + CHECK_MS) == []
    new.check(500 + TIMEOUT_MS + CHECK_MS)
    new.complete_appends()
    assert new.state("open") is TransactionState.PREPARE_ABORT
    # Producers carry on from their stored epochs.
    assert ok(new.init(fresh=None, tid="done")) == ProducerIdAndEpoch(ErrorCode.none, 100, 1)


def test_replaying_a_record_replaces_the_ids_state() -> None:
    driver = Driver()
    producer = ok(driver.init())
    driver.add(producer, P0)
    ok(driver.end(producer, commit=True))
    driver.finish_tasks()
    states = []
    shard = TransactionCoordinator()
    for key, value in driver.log:
        shard.replay(key, value)
        transaction = shard.transaction(T)
        assert transaction is not None
        states.append(transaction.state)
    assert states == [
        TransactionState.EMPTY,
        TransactionState.ONGOING,
        TransactionState.PREPARE_COMMIT,
        TransactionState.COMPLETE_COMMIT,
    ]
    shard.load_completed(0)
    assert shard.poll(0) == [], "nothing left to finish"


# ====================================================================== AddPartitions


@pytest.mark.parametrize("commit", [True, False])
def test_add_partitions_to_a_finished_transaction_starts_the_next_one(commit: bool) -> None:
    driver = Driver()
    producer = ok(driver.init())
    driver.add(producer, P0, P1)
    ok(driver.end(producer, commit=commit))
    driver.finish_tasks()
    assert driver.transaction().partitions == frozenset()
    driver.now = 700
    assert driver.add(producer, P1).errors == {P1: ErrorCode.none}
    transaction = driver.transaction()
    assert (transaction.state, transaction.partitions, transaction.start_ms) == (
        TransactionState.ONGOING,
        frozenset({P1}),
        700,
    )
    _key, value = driver.log[-1]
    assert value is not None
    stored = decode_value(value)
    assert (stored.state, stored.partitions, stored.start_ms, stored.last_update_ms) == (
        TransactionState.ONGOING,
        frozenset({P1}),
        700,
        700,
    )
    ok(driver.end(producer, commit=True))
    (markers,) = driver.finish_tasks()
    assert markers.partitions == (P1,), "only the new transaction's partitions"


def test_an_id_whose_first_record_is_being_written_is_not_there_yet() -> None:
    driver = Driver()
    driver.call("init_producer_id", InitProducerIdRequest(T, TIMEOUT_MS), 100, settle=False)
    early = AddPartitionsRequest(T, 100, 0, (P0,))
    answer = driver.call("add_partitions", early, settle=False)
    assert answer == AddPartitionsResult({P0: ErrorCode.invalid_producer_id_mapping})
    again = InitProducerIdRequest(T, TIMEOUT_MS)
    answer = driver.call("init_producer_id", again, 101, settle=False)
    assert answer == ProducerIdAndEpoch(ErrorCode.concurrent_transactions)
    (described,) = driver.shard.describe([T])
    assert described.error is ErrorCode.transactional_id_not_found
    assert driver.shard.list_transactions(0, ListTransactionsFilter()) == ()
    assert len(driver.appends) == 1
    driver.complete_appends()
    assert driver.add(ProducerIdAndEpoch(ErrorCode.none, 100, 0), P0).errors == {P0: ErrorCode.none}
