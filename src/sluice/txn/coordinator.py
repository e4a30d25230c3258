"""The transaction coordinator: a deterministic, synchronous state machine.

One :class:`TransactionCoordinator` holds the transactional ids of one
``__transaction_state`` partition; it is the shard the generic coordinator runtime runs
(see :mod:`sluice.coordinator`). It does no I/O: operations take ``now_ms`` and a token
and return effects (records to append, replies, and :class:`~sluice.txn.api.WriteMarkers`
tasks). A transactional id moves through Kafka's states::

    ┌──── InitProducerId (epoch + 1), from Empty or Complete* ◀────────────────┐
    ▼                                                                          │
  Empty ──AddPartitions──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
                             │
                             └──EndTxn(abort), timeout, ──▶ PrepareAbort ──markers──▶ CompleteAbort
                                InitProducerId (fences)
  Complete* ──AddPartitions──▶ Ongoing (the next transaction)

- Every change is written to the log first (the record carries the whole new state)
  and takes effect when it is committed; meanwhile the id is *pending* and other
  requests for it get CONCURRENT_TRANSACTIONS (clients retry).
- The decision is the Prepare* record: once it is committed the client is answered,
  and the markers are written by a task; a coordinator that loads a partition with a
  Prepare* id (failover) writes its markers again. Then Complete* is written; if that
  write fails, the periodic check writes it again (no decision stays unfinished while
  the partition is led here).
- A transaction open longer than its timeout is aborted with the producer's epoch
  bumped, so the producer is fenced (its next request fails with PRODUCER_FENCED and
  it must call InitProducerId again, KIP-360). InitProducerId on an open transaction
  does the same (the new instance fences the old one) and answers
  CONCURRENT_TRANSACTIONS until the abort is complete.
- Transaction version 2 (EndTxn v5, KIP-890 part 2): each EndTxn bumps the epoch, and
  the markers carry the new epoch, so a request of the finished transaction delayed in
  the network (a Produce, an EndTxn) is fenced instead of landing in the next one.
  A retry of that EndTxn (its answer was lost) carries the epoch before the bump: it
  gets CONCURRENT_TRANSACTIONS while the decision is being finished, then the answer
  again (the other outcome: INVALID_TXN_STATE).
- Epochs are int16: when one is exhausted the producer gets a new producer id at
  epoch 0 (from the runtime, which reserves ids).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.coordinator.api import Append, Effect, Reply, RequestToken, Task, look_up_again
from sluice.txn.api import (
    AddPartitionsRequest,
    AddPartitionsResult,
    EndTxnRequest,
    InitProducerIdRequest,
    ListTransactionsFilter,
    ProducerIdAndEpoch,
    TransactionDescription,
    TransactionListing,
    WriteMarkers,
)
from sluice.txn.config import TransactionConfig
from sluice.txn.records import (
    TransactionState,
    TransactionValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

log = logging.getLogger(__name__)

PRODUCER_EPOCH_MAX = 32767
"""Epochs are int16; one at ``PRODUCER_EPOCH_MAX - 1`` cannot be bumped (Kafka)."""

_PREPARE = (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)
_COMPLETE = (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= PRODUCER_EPOCH_MAX - 1


@dataclass
class Transaction:
    """One transactional id's state (what its last committed record says)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = -1
    """The epoch before the last bump (not stored: KIP-360 recovery on this broker)."""
    next_producer_id: int = -1
    """While Prepare*: the id the producer moves to when its epoch is exhausted."""
    previous_producer_id: int = -1
    """After Complete* moved the producer to a new id: the old one (not stored: a
    version-2 EndTxn retried with the old id is recognised on this broker only)."""
    fenced: bool = False
    """Prepare*/Complete* of an abort the coordinator decided, bumping the epoch to
    fence the producer (timeout, a new instance), not one its EndTxn asked for. Not
    stored: after a failover, such a producer's version-2 abort is taken for a retry and
    answered with the new epoch, which is what it asked for (the transaction is
    aborted)."""
    pending: bool = field(default=False, compare=False)
    """A record for this id is being written."""

    def value(self) -> TransactionValue:
        return TransactionValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            self.state,
            self.partitions,
            self.last_update_ms,
            self.start_ms,
        )


Completion = Callable[[int, ErrorCode | None], list[Effect]]


def _is_bumping_end_txn_retry(transaction: Transaction | None, request: EndTxnRequest) -> bool:
    """Whether a version-2 EndTxn is a retry of the one that bumped the epoch (its
    answer was lost): the decision is written (Prepare*, Complete*) and the request
    carries the epoch before the bump, or, once the producer moved to a new id because
    its epoch was exhausted, the old id at its last epoch. As Kafka does, the retry is
    told by the epochs alone, so it is recognised by a new coordinator too; an abort the
    coordinator decided to fence the producer (its own bump) has no retry."""
    if (
        transaction is None
        or transaction.fenced
        or transaction.state not in (*_PREPARE, *_COMPLETE)
    ):
        return False
    if request.producer_id == transaction.producer_id:
        return request.producer_epoch + 1 == transaction.producer_epoch
    return (
        request.producer_id == transaction.previous_producer_id
        and request.producer_epoch == PRODUCER_EPOCH_MAX - 1
        and transaction.producer_epoch == 0
        and transaction.state in _COMPLETE
    )


class TransactionCoordinator:
    """Every transactional id of one ``__transaction_state`` partition."""

    def __init__(self, config: TransactionConfig | None = None) -> None:
        self._config = config if config is not None else TransactionConfig()
        self._transactions: dict[str, Transaction] = {}
        self._append_ids = itertools.count(1)
        self._in_flight: dict[int, Completion] = {}
        self._task_ids = itertools.count(1)
        self._marker_tasks: dict[int, WriteMarkers] = {}
        self._markers_to_send: list[str] = []
        self._markers_written: set[str] = set()
        """Ids in Prepare* whose markers are all written but whose Complete* is not."""
        self._next_timeout_check_ms: int | None = None

    # ================================================================ inspection

    def transactions(self) -> list[Transaction]:
        """Every transactional id's state here, for metrics (do not modify them)."""
        return list(self._transactions.values())

    def transaction(self, transactional_id: str) -> Transaction | None:
        return self._transactions.get(transactional_id)

    def needs_producer_id(self, transactional_id: str, *, initializing: bool) -> bool:
        """Whether InitProducerId (``initializing``) or an epoch-bumping EndTxn for the
        id takes a new producer id: the id is new (InitProducerId), or its epoch is
        exhausted."""
        transaction = self._transactions.get(transactional_id)
        if transaction is None:
            return initializing
        return epoch_exhausted(transaction.producer_epoch)

    # =================================================================== loading

    def replay(self, key: bytes, value: bytes | None) -> None:
        transactional_id = decode_key(key)
        if value is None:
            self._transactions.pop(transactional_id, None)
            return
        stored = decode_value(value)
        self._transactions[transactional_id] = Transaction(
            transactional_id,
            stored.producer_id,
            stored.producer_epoch,
            stored.timeout_ms,
            stored.state,
            stored.partitions,
            stored.start_ms,
            stored.last_update_ms,
        )

    def replay_transactional(self, producer_id: int, key: bytes, value: bytes | None) -> None:
        raise AssertionError("__transaction_state holds no transactional batches")

    def replay_marker(self, producer_id: int, committed: bool) -> None:
        raise AssertionError("__transaction_state holds no markers")

    def load_completed(self, now_ms: int) -> None:
        """Decisions whose markers may not all be written are written again; open
        transactions keep their start time, so the timeout still applies."""
        self._markers_to_send = sorted(
            transactional_id
            for transactional_id, transaction in self._transactions.items()
            if transaction.state in _PREPARE
        )
        self._next_timeout_check_ms = now_ms
        log.debug(
            "transaction coordinator loaded %d id(s), %d decision(s) to finish",
            len(self._transactions),
            len(self._markers_to_send),
        )

    # ==================================================================== timers

    def next_deadline_ms(self) -> int | None:
        if self._markers_to_send:
            return 0
        return self._next_timeout_check_ms

    def poll(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        for transactional_id in self._markers_to_send:
            transaction = self._transactions.get(transactional_id)
            if transaction is not None and transaction.state in _PREPARE:
                effects.append(self._markers_task(transaction))
        self._markers_to_send = []
        if self._next_timeout_check_ms is not None and self._next_timeout_check_ms <= now_ms:
            effects += self._finish_stalled_decisions(now_ms)
            effects += self._abort_timed_out(now_ms)
            self._next_timeout_check_ms = now_ms + self._config.abort_check_interval_ms
        return effects

    def _finish_stalled_decisions(self, now_ms: int) -> list[Effect]:
        """Decisions left unfinished by a failed write are finished again: Complete* is
        written if every marker is in, else the markers are sent again (writing a
        marker twice is harmless)."""
        effects: list[Effect] = []
        sending = {work.transactional_id for work in self._marker_tasks.values()}
        for transaction in list(self._transactions.values()):
            transactional_id = transaction.transactional_id
            if (
                transaction.state not in _PREPARE
                or transaction.pending
                or transactional_id in sending
            ):
                continue
            log.info(
                "transaction %r of producer %d: finishing its %s again",
                transactional_id,
                transaction.producer_id,
                transaction.state.display_name,
            )
            if transactional_id in self._markers_written:
                effects += self._complete(transaction, now_ms)
            else:
                effects += self._send_markers(transaction, now_ms)
        return effects

    def _abort_timed_out(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        for transaction in list(self._transactions.values()):
            if (
                transaction.state is TransactionState.ONGOING
                and not transaction.pending
                and transaction.start_ms + transaction.timeout_ms <= now_ms
            ):
                log.info(
                    "aborting transaction %r of producer %d: open longer than %d ms",
                    transaction.transactional_id,
                    transaction.producer_id,
                    transaction.timeout_ms,
                )
                effects += self._fence_and_abort(transaction, now_ms, lambda _error: [])
        return effects

    # =================================================================== appends

    def _write(
        self, transaction: Transaction, new: Transaction, on_completion: Completion
    ) -> Append:
        """Write ``new`` as the id's state; it takes effect once committed."""
        assert not transaction.pending, "one write per id at a time"
        transaction.pending = True
        append_id = next(self._append_ids)

        def completed(now_ms: int, error: ErrorCode | None) -> list[Effect]:
            transaction.pending = False
            if error is None:
                for name in (f.name for f in dataclasses.fields(Transaction)):
                    if name != "pending":
                        setattr(transaction, name, getattr(new, name))
            elif transaction.state is TransactionState.DEAD:
                # A new id whose first record failed: forget it.
                self._transactions.pop(transaction.transactional_id, None)
            return on_completion(now_ms, error)

        self._in_flight[append_id] = completed
        record = (encode_key(new.transactional_id), encode_value(new.value()))
        return Append(append_id, (record,))

    def append_completed(
        self, now_ms: int, append_id: int, error: ErrorCode | None
    ) -> list[Effect]:
        return self._in_flight.pop(append_id)(now_ms, error)

    # ============================================================ InitProducerId

    def init_producer_id(
        self,
        now_ms: int,
        token: RequestToken,
        request: InitProducerIdRequest,
        fresh_producer_id: int | None,
    ) -> list[Effect]:
        def answer(error: ErrorCode, producer_id: int = -1, epoch: int = -1) -> list[Effect]:
            return [Reply(token, ProducerIdAndEpoch(error, producer_id, epoch))]

        timeout_ms = request.transaction_timeout_ms
        if not 0 < timeout_ms <= self._config.transaction_max_timeout_ms:
            return answer(ErrorCode.invalid_transaction_timeout)
        transaction = self._transactions.get(request.transactional_id)
        if transaction is None:
            if fresh_producer_id is None:
                return answer(ErrorCode.concurrent_transactions)  # asked again with an id
            transaction = Transaction(
                request.transactional_id, -1, -1, timeout_ms, TransactionState.DEAD
            )
            self._transactions[request.transactional_id] = transaction
            new = dataclasses.replace(
                transaction,
                producer_id=fresh_producer_id,
                producer_epoch=0,
                state=TransactionState.EMPTY,
                last_update_ms=now_ms,
            )
            return [self._write(transaction, new, self._answer_producer(token, transaction))]
        if transaction.pending or transaction.state in _PREPARE:
            return answer(ErrorCode.concurrent_transactions)
        if request.producer_id >= 0 and (
            request.producer_id != transaction.producer_id
            or request.producer_epoch
            not in (transaction.producer_epoch, transaction.last_producer_epoch)
        ):
            return answer(ErrorCode.producer_fenced)
        if transaction.state is TransactionState.ONGOING:
            # A new instance of the producer: abort what the old one left open, with
            # the epoch bumped so the old one is fenced; the client asks again.
            return self._fence_and_abort(
                transaction, now_ms, lambda _error: answer(ErrorCode.concurrent_transactions)
            )
        if epoch_exhausted(transaction.producer_epoch):
            if fresh_producer_id is None:
                return answer(ErrorCode.concurrent_transactions)
            producer_id, epoch = fresh_producer_id, 0
        else:
            producer_id, epoch = transaction.producer_id, transaction.producer_epoch + 1
        new = dataclasses.replace(
            transaction,
            producer_id=producer_id,
            producer_epoch=epoch,
            last_producer_epoch=transaction.producer_epoch,
            timeout_ms=timeout_ms,
            state=TransactionState.EMPTY,
            partitions=frozenset(),
            start_ms=-1,
            last_update_ms=now_ms,
        )
        return [self._write(transaction, new, self._answer_producer(token, transaction))]

    def _answer_producer(self, token: RequestToken, transaction: Transaction) -> Completion:
        """Answer with the id's producer id and epoch once the write is committed (the
        fields are updated by then)."""

        def on_written(_now_ms: int, error: ErrorCode | None) -> list[Effect]:
            if error is not None:
                return [Reply(token, ProducerIdAndEpoch(look_up_again(error)))]
            answer = ProducerIdAndEpoch(
                ErrorCode.none, transaction.producer_id, transaction.producer_epoch
            )
            return [Reply(token, answer)]

        return on_written

    # ============================================================== AddPartitions

    def add_partitions(
        self, now_ms: int, token: RequestToken, request: AddPartitionsRequest
    ) -> list[Effect]:
        def answer_all(error: ErrorCode) -> list[Effect]:
            result = AddPartitionsResult({p: error for p in request.partitions})
            return [Reply(token, result)]

        transaction = self._transactions.get(request.transactional_id)
        error = self._check_producer(transaction, request.producer_id, request.producer_epoch)
        if error is not None:
            return answer_all(error)
        assert transaction is not None
        if request.verify_only:
            ongoing = transaction.state is TransactionState.ONGOING
            return [
                Reply(
                    token,
                    AddPartitionsResult(
                        {
                            p: ErrorCode.none
                            if ongoing and p in transaction.partitions
                            else ErrorCode.invalid_txn_state
                            for p in request.partitions
                        }
                    ),
                )
            ]
        if transaction.pending or transaction.state in _PREPARE:
            return answer_all(ErrorCode.concurrent_transactions)
        if transaction.state is TransactionState.DEAD:
            return answer_all(ErrorCode.invalid_txn_state)
        added = frozenset(request.partitions)
        if transaction.state is TransactionState.ONGOING and added <= transaction.partitions:
            return answer_all(ErrorCode.none)
        starting = transaction.state is not TransactionState.ONGOING
        new = dataclasses.replace(
            transaction,
            state=TransactionState.ONGOING,
            partitions=added if starting else transaction.partitions | added,
            start_ms=now_ms if starting else transaction.start_ms,
            last_update_ms=now_ms,
        )

        def on_written(_now_ms: int, error: ErrorCode | None) -> list[Effect]:
            return answer_all(ErrorCode.none if error is None else look_up_again(error))

        return [self._write(transaction, new, on_written)]

    def _check_producer(
        self, transaction: Transaction | None, producer_id: int, producer_epoch: int
    ) -> ErrorCode | None:
        if transaction is None or transaction.state is TransactionState.DEAD:
            return ErrorCode.invalid_producer_id_mapping
        if producer_id != transaction.producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if producer_epoch != transaction.producer_epoch:
            return ErrorCode.producer_fenced
        return None

    # ===================================================================== EndTxn

    def end_txn(
        self,
        now_ms: int,
        token: RequestToken,
        request: EndTxnRequest,
        fresh_producer_id: int | None,
    ) -> list[Effect]:
        def answer(error: ErrorCode, transaction: Transaction | None = None) -> list[Effect]:
            if transaction is None:
                return [Reply(token, ProducerIdAndEpoch(error))]
            return [
                Reply(
                    token,
                    ProducerIdAndEpoch(error, transaction.producer_id, transaction.producer_epoch),
                )
            ]

        transaction = self._transactions.get(request.transactional_id)
        retry = request.bump_epoch and _is_bumping_end_txn_retry(transaction, request)
        if not retry:
            error = self._check_producer(transaction, request.producer_id, request.producer_epoch)
            if error is not None:
                return answer(error)
        assert transaction is not None
        if transaction.pending:
            return answer(ErrorCode.concurrent_transactions)
        deciding = (
            TransactionState.PREPARE_COMMIT if request.committed else TransactionState.PREPARE_ABORT
        )
        finished = (
            TransactionState.COMPLETE_COMMIT
            if request.committed
            else TransactionState.COMPLETE_ABORT
        )
        if transaction.state in _PREPARE:
            # The decision is taken and being finished: the same one asked again waits
            # (the client retries until Complete*), the other one cannot be had.
            same = transaction.state is deciding
            error = ErrorCode.concurrent_transactions if same else ErrorCode.invalid_txn_state
            return answer(error)
        if transaction.state in _COMPLETE and (retry or not request.bump_epoch):
            same = transaction.state is finished
            return answer(ErrorCode.none if same else ErrorCode.invalid_txn_state, transaction)
        if transaction.state is not TransactionState.ONGOING and not (
            request.bump_epoch and not request.committed
        ):
            return answer(ErrorCode.invalid_txn_state)
        # Ongoing; or, with version 2, an abort of a transaction that added nothing.
        if request.bump_epoch and epoch_exhausted(transaction.producer_epoch):
            if fresh_producer_id is None:
                return answer(ErrorCode.concurrent_transactions)
            epoch, next_producer_id = transaction.producer_epoch, fresh_producer_id
        elif request.bump_epoch:
            epoch, next_producer_id = transaction.producer_epoch + 1, -1
        else:
            epoch, next_producer_id = transaction.producer_epoch, -1
        new = dataclasses.replace(
            transaction,
            producer_epoch=epoch,
            last_producer_epoch=transaction.producer_epoch
            if request.bump_epoch
            else transaction.last_producer_epoch,
            state=deciding,
            last_update_ms=now_ms,
            next_producer_id=next_producer_id,
            fenced=False,
        )

        def on_decided(decided_ms: int, error: ErrorCode | None) -> list[Effect]:
            if error is not None:
                return answer(look_up_again(error))
            if transaction.next_producer_id >= 0:
                reply = ProducerIdAndEpoch(ErrorCode.none, transaction.next_producer_id, 0)
            else:
                reply = ProducerIdAndEpoch(
                    ErrorCode.none, transaction.producer_id, transaction.producer_epoch
                )
            return [Reply(token, reply), *self._send_markers(transaction, decided_ms)]

        return [self._write(transaction, new, on_decided)]

    def _fence_and_abort(
        self,
        transaction: Transaction,
        now_ms: int,
        then: Callable[[ErrorCode | None], list[Effect]],
    ) -> list[Effect]:
        """Abort the open transaction with the epoch bumped (so its producer is fenced);
        ``then`` is called with the write's error once the decision is written."""
        epoch = transaction.producer_epoch
        new = dataclasses.replace(
            transaction,
            producer_epoch=epoch if epoch_exhausted(epoch) else epoch + 1,
            last_producer_epoch=epoch,
            state=TransactionState.PREPARE_ABORT,
            last_update_ms=now_ms,
            next_producer_id=-1,
            fenced=True,
        )

        def on_decided(decided_ms: int, error: ErrorCode | None) -> list[Effect]:
            effects = then(None if error is None else look_up_again(error))
            if error is None:
                effects += self._send_markers(transaction, decided_ms)
            return effects

        return [self._write(transaction, new, on_decided)]

    # =================================================================== markers

    def _send_markers(self, transaction: Transaction, now_ms: int) -> list[Effect]:
        if not transaction.partitions:
            return self._complete(transaction, now_ms)
        return [self._markers_task(transaction)]

    def _markers_task(self, transaction: Transaction) -> Task:
        task_id = next(self._task_ids)
        work = WriteMarkers(
            transaction.transactional_id,
            transaction.producer_id,
            transaction.producer_epoch,
            transaction.state is TransactionState.PREPARE_COMMIT,
            tuple(sorted(transaction.partitions)),
        )
        self._marker_tasks[task_id] = work
        return Task(task_id, work)

    def task_completed(self, now_ms: int, task_id: int, result: object) -> list[Effect]:
        """Every marker of a decision is written: write Complete*."""
        work = self._marker_tasks.pop(task_id)
        transaction = self._transactions.get(work.transactional_id)
        if (
            transaction is None
            or transaction.state not in _PREPARE
            or transaction.producer_id != work.producer_id
            or transaction.producer_epoch != work.producer_epoch
        ):
            return []  # superseded (not expected: Prepare* admits no other change)
        if transaction.pending:
            return []
        return self._complete(transaction, now_ms)

    def _complete(self, transaction: Transaction, now_ms: int) -> list[Effect]:
        committed = transaction.state is TransactionState.PREPARE_COMMIT
        switching = transaction.next_producer_id >= 0
        new = dataclasses.replace(
            transaction,
            producer_id=transaction.next_producer_id if switching else transaction.producer_id,
            previous_producer_id=(
                transaction.producer_id if switching else transaction.previous_producer_id
            ),
            producer_epoch=0 if switching else transaction.producer_epoch,
            last_producer_epoch=-1 if switching else transaction.last_producer_epoch,
            next_producer_id=-1,
            state=(
                TransactionState.COMPLETE_COMMIT if committed else TransactionState.COMPLETE_ABORT
            ),
            partitions=frozenset(),
            last_update_ms=now_ms,
        )

        self._markers_written.add(transaction.transactional_id)

        def on_written(written_ms: int, error: ErrorCode | None) -> list[Effect]:
            if error is None:
                self._markers_written.discard(transaction.transactional_id)
            else:
                log.warning(
                    "transaction %r: writing its completion failed (%s); written again "
                    "at the next check",
                    transaction.transactional_id,
                    error.name,
                )
            return []

        return [self._write(transaction, new, on_written)]

    # ============================================================ describe, list

    def describe(self, transactional_ids: Iterable[str]) -> tuple[TransactionDescription, ...]:
        described = []
        for transactional_id in transactional_ids:
            transaction = self._transactions.get(transactional_id)
            if transaction is None or transaction.state is TransactionState.DEAD:
                described.append(
                    TransactionDescription(transactional_id, ErrorCode.transactional_id_not_found)
                )
                continue
            described.append(
                TransactionDescription(
                    transactional_id,
                    ErrorCode.none,
                    transaction.state.display_name,
                    transaction.timeout_ms,
                    transaction.start_ms,
                    transaction.producer_id,
                    transaction.producer_epoch,
                    tuple(sorted(transaction.partitions)),
                )
            )
        return tuple(described)

    def list_transactions(
        self, now_ms: int, wanted: ListTransactionsFilter
    ) -> tuple[TransactionListing, ...]:
        states = {state.lower() for state in wanted.states}
        listed = []
        for transactional_id in sorted(self._transactions):
            transaction = self._transactions[transactional_id]
            if transaction.state is TransactionState.DEAD:
                continue
            name = transaction.state.display_name
            if states and name.lower() not in states:
                continue
            if wanted.producer_ids and transaction.producer_id not in wanted.producer_ids:
                continue
            if wanted.duration_ms >= 0 and (
                transaction.state is not TransactionState.ONGOING
                or now_ms - transaction.start_ms <= wanted.duration_ms
            ):
                continue
            listed.append(TransactionListing(transactional_id, transaction.producer_id, name))
        return tuple(listed)
