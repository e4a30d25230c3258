"""The transactional side of ``sluice.Producer``: Kafka's transaction protocol as a
client speaks it.

A producer with a ``transactional_id`` goes through::

    start() ──InitProducerId──▶ READY ──begin_transaction()──▶ IN_TRANSACTION
                                  ▲                                 │ send(): the first record
                                  │                                 │ for a partition adds it
                                  │                                 │ (AddPartitionsToTxn);
                                  │                                 │ send_offsets_to_transaction
                                  │                                 │ (AddOffsetsToTxn, then
                                  │                                 │ TxnOffsetCommit)
                                  ├──── commit_transaction(): flush, EndTxn(commit)
                                  └──── abort_transaction(): flush, EndTxn(abort)

    a send fails inside a transaction ─▶ ABORTABLE: commit refuses, abort works (and
                                         starts a new epoch, KIP-360)
    prepare_transaction() ─▶ HANDED_OVER: the open transaction is left to whoever holds
                                         its PreparedTransaction (end_prepared commits
                                         or aborts it, from any process); the producer
                                         can only be closed
    PRODUCER_FENCED / INVALID_PRODUCER_EPOCH ─▶ FENCED: every call raises
                                         ProducerFencedError; close the producer

Requests go to the transaction coordinator (FindCoordinator key type 1), retried while
it is unavailable, loading or moving, and while it answers CONCURRENT_TRANSACTIONS (a
previous commit or abort is still writing its markers).
"""

from __future__ import annotations

import asyncio
import datetime
import enum
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from sluice.client.cluster import Cluster
from sluice.client.errors import ClientError, ConnectionClosedError, RequestTimedOutError
from sluice.client.groups import COORDINATOR_RETRY_CODES, GroupCoordinators
from sluice.client.messages import Request
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import NodeId, TopicPartition
from sluice.protocol.versions import ApiKey

T = TypeVar("T")

TRANSACTION_KEY_TYPE = 1
"""FindCoordinator key type of a transactional id."""

TRANSACTION_RETRY_CODES = COORDINATOR_RETRY_CODES | {ErrorCode.concurrent_transactions}
"""Answers meaning "ask again": the coordinator moved, is loading, or is finishing the
previous transaction."""

FENCED_CODES = frozenset(
    {
        ErrorCode.producer_fenced,
        ErrorCode.invalid_producer_epoch,
        ErrorCode.transactional_id_authorization_failed,
    }
)

EPOCH_BUMPING_END_TXN_VERSION = 5

RETRY_BACKOFF_S = (0.02, 1.0)
"""First and largest wait between retries of a coordinator request (doubling)."""


class ProducerFencedError(ClientError):
    """Another producer started with the same transactional id (or the coordinator
    aborted a transaction that ran past its timeout): this one may not write any more.
    Close it; a new producer with the same id carries on."""


class TransactionAbortableError(ClientError):
    """A send inside the transaction failed: the transaction cannot commit. Call
    ``abort_transaction()``, then retry the work in a new transaction."""


class TransactionStateError(ClientError):
    """A transactional call out of order (``commit_transaction()`` outside a
    transaction, ``send()`` before ``begin_transaction()``, …)."""


@dataclass(frozen=True)
class GroupMetadata:
    """What TxnOffsetCommit checks of the consumer whose offsets a transaction commits
    (the consumer's ``group_metadata()``); a generation of -1 skips the check."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True)
class PreparedTransaction:
    """An open transaction handed over for another process to end (a Spark task's,
    committed by the driver)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


class TransactionState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    ABORTABLE = "abortable error"
    FENCED = "fenced"
    HANDED_OVER = "handed over"


class TransactionManager:
    """The producer's transaction state and its requests to the coordinators."""

    def __init__(
        self,
        cluster: Cluster,
        transactional_id: str,
        *,
        transaction_timeout_ms: int,
        timeout_s: float,
    ) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.state = TransactionState.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self.partitions: set[TopicPartition] = set()
        """Partitions added to the open transaction."""
        self.registered = False
        """The coordinator knows of the open transaction (partitions or offsets were
        added): ending it takes an EndTxn."""
        self.failure: BaseException | None = None
        """Why the open transaction can only be aborted."""
        self._cluster = cluster
        self._timeout_s = timeout_s
        self._coordinator: NodeId | None = None
        self._groups = GroupCoordinators(cluster, timeout_s=timeout_s)

    # ── state ───────────────────────────────────────────────────────────────────────

    def check_can_send(self) -> None:
        self._raise_if_fenced()
        if self.state is TransactionState.HANDED_OVER:
            raise TransactionStateError(
                "the transaction was handed over (prepare_transaction()): close this producer"
            )
        if self.state is TransactionState.UNINITIALIZED:
            raise TransactionStateError("the transactional producer is not started")
        if self.state is TransactionState.READY:
            raise TransactionStateError(
                "send() outside a transaction: call begin_transaction() first"
            )

    def begin(self) -> None:
        self._raise_if_fenced()
        if self.state is not TransactionState.READY:
            raise TransactionStateError(
                f"begin_transaction() while {self.state.value}: commit or abort the "
                "current transaction first"
            )
        self.state = TransactionState.IN_TRANSACTION
        self.partitions.clear()
        self.registered = False
        self.failure = None

    def fail(self, error: BaseException) -> None:
        """A send of the open transaction failed."""
        if self.state is TransactionState.FENCED:
            return
        if isinstance(error, KafkaError) and error.code in FENCED_CODES:
            self._fence(error)
            return
        if self.state is TransactionState.IN_TRANSACTION:
            self.state = TransactionState.ABORTABLE
            self.failure = error

    def _fence(self, cause: BaseException) -> None:
        self.state = TransactionState.FENCED
        self.failure = cause

    def _raise_if_fenced(self) -> None:
        if self.state is TransactionState.FENCED:
            raise ProducerFencedError(
                f"producer with transactional id {self.transactional_id!r} is fenced "
                f"({self.failure}); another producer with this id took over, or a "
                "transaction ran past transaction_timeout_ms: close this producer"
            ) from self.failure

    # ── requests ────────────────────────────────────────────────────────────────────

    async def init(self) -> None:
        """InitProducerId: a producer id and a new epoch (fencing earlier instances;
        the coordinator aborts what they left open). After an abortable error the
        current id and epoch are sent along (KIP-360) to keep the id."""

        async def attempt(connection: Any) -> Any:
            return await connection.request(
                Request(
                    ApiKey.INIT_PRODUCER_ID,
                    {
                        "transactional_id": self.transactional_id,
                        "transaction_timeout": datetime.timedelta(
                            milliseconds=self.transaction_timeout_ms
                        ),
                        "producer_id": self.producer_id,
                        "producer_epoch": self.producer_epoch,
                    },
                )
            )

        response = await self._call(attempt, "InitProducerId")
        self.producer_id = int(response.producer_id)
        self.producer_epoch = int(response.producer_epoch)
        self.state = TransactionState.READY
        self.partitions.clear()
        self.registered = False
        self.failure = None

    async def add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """AddPartitionsToTxn for partitions not added yet. A partition refused
        (unknown topic, …) makes the transaction abortable and raises."""
        wanted = sorted(set(partitions) - self.partitions)
        if not wanted:
            return
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in wanted:
            by_topic[tp.topic].append(tp.partition)

        async def attempt(connection: Any) -> Any:
            response = await connection.request(
                Request(
                    ApiKey.ADD_PARTITIONS_TO_TXN,
                    {
                        "v3_and_below_transactional_id": self.transactional_id,
                        "v3_and_below_producer_id": self.producer_id,
                        "v3_and_below_producer_epoch": self.producer_epoch,
                        "v3_and_below_topics": [
                            {"name": topic, "partitions": ids} for topic, ids in by_topic.items()
                        ],
                    },
                )
            )
            worst = ErrorCode.none
            for topic in response.results_by_topic_v3_and_below:
                for result in topic.results_by_partition:
                    code = ErrorCode(result.partition_error_code)
                    if code is not ErrorCode.none and code is not ErrorCode.operation_not_attempted:
                        worst = code
            return _Answer(worst)

        await self._call(attempt, "AddPartitionsToTxn")
        self.partitions.update(wanted)
        self.registered = True

    async def send_offsets(
        self, offsets: Mapping[TopicPartition, int], group: GroupMetadata, metadata: str = ""
    ) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator, each offset
        with ``metadata`` as its metadata string."""

        async def add(connection: Any) -> Any:
            return await connection.request(
                Request(
                    ApiKey.ADD_OFFSETS_TO_TXN,
                    {
                        "transactional_id": self.transactional_id,
                        "producer_id": self.producer_id,
                        "producer_epoch": self.producer_epoch,
                        "group_id": group.group_id,
                    },
                )
            )

        await self._call(add, "AddOffsetsToTxn")
        self.registered = True
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp, offset in offsets.items():
            by_topic[tp.topic].append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": offset,
                    "committed_leader_epoch": -1,
                    "committed_metadata": metadata,
                }
            )

        async def commit(connection: Any) -> Any:
            response = await connection.request(
                Request(
                    ApiKey.TXN_OFFSET_COMMIT,
                    {
                        "transactional_id": self.transactional_id,
                        "group_id": group.group_id,
                        "producer_id": self.producer_id,
                        "producer_epoch": self.producer_epoch,
                        "generation_id": group.generation_id,
                        "member_id": group.member_id,
                        "group_instance_id": group.group_instance_id,
                        "topics": [
                            {"name": topic, "partitions": entries}
                            for topic, entries in by_topic.items()
                        ],
                    },
                )
            )
            worst = ErrorCode.none
            for topic in response.topics:
                for partition in topic.partitions:
                    if partition.error_code != ErrorCode.none:
                        worst = ErrorCode(partition.error_code)
            _raise_for(worst, f"TxnOffsetCommit for group {group.group_id!r}")

        await self._retrying(lambda: self._groups.call(group.group_id, commit), "TxnOffsetCommit")

    async def end(self, *, commit: bool) -> None:
        """EndTxn; the transaction is over when it returns. With EndTxn v5 (transaction
        version 2) the answer carries the producer's new epoch (or a new producer id
        when the epoch ran out): a request of the finished transaction still in the
        network is fenced by it."""
        if self.registered:

            async def attempt(connection: Any) -> Any:
                return await connection.request(
                    Request(
                        ApiKey.END_TXN,
                        {
                            "transactional_id": self.transactional_id,
                            "producer_id": self.producer_id,
                            "producer_epoch": self.producer_epoch,
                            "committed": commit,
                        },
                    )
                )

            response = await self._call(attempt, "EndTxn")
            if int(response.__version__) >= EPOCH_BUMPING_END_TXN_VERSION:
                self.producer_id = int(response.producer_id)
                self.producer_epoch = int(response.producer_epoch)
        self.partitions.clear()
        self.registered = False
        self.state = TransactionState.READY

    def hand_over(self) -> PreparedTransaction:
        """Leave the open transaction to someone else (see :class:`PreparedTransaction`)."""
        self.check_can_send()
        if self.state is TransactionState.ABORTABLE:
            raise TransactionAbortableError(
                f"the transaction cannot be prepared: {self.failure}; abort it"
            ) from self.failure
        prepared = PreparedTransaction(self.transactional_id, self.producer_id, self.producer_epoch)
        self.state = TransactionState.HANDED_OVER
        return prepared

    @classmethod
    def resume(
        cls, cluster: Cluster, prepared: PreparedTransaction, *, timeout_s: float
    ) -> TransactionManager:
        """A manager for someone else's open transaction, to add offsets and end it."""
        manager = cls(
            cluster, prepared.transactional_id, transaction_timeout_ms=1, timeout_s=timeout_s
        )
        manager.producer_id = prepared.producer_id
        manager.producer_epoch = prepared.producer_epoch
        manager.state = TransactionState.IN_TRANSACTION
        manager.registered = True
        return manager

    # ── plumbing ────────────────────────────────────────────────────────────────────

    async def _call(self, attempt: Callable[[Any], Awaitable[Any]], what: str) -> Any:
        """``attempt(connection to the transaction coordinator)``, whose answer has an
        ``error_code``, retried on coordinator errors; fencing errors fence."""

        async def once() -> Any:
            connection = await self._cluster.connection(await self._find_coordinator())
            try:
                response = await attempt(connection)
            except (ConnectionClosedError, RequestTimedOutError):
                # A request lost in the network must not come out behind the retry:
                # the retry goes on a new connection, as librdkafka's do.
                self._coordinator = None
                await connection.close()
                raise
            code = ErrorCode(response.error_code)
            if code in COORDINATOR_RETRY_CODES:
                self._coordinator = None
            _raise_for(code, f"{what} for transactional id {self.transactional_id!r}")
            return response

        return await self._retrying(once, what)

    async def _retrying(self, once: Callable[[], Awaitable[T]], what: str) -> T:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        backoff_s = RETRY_BACKOFF_S[0]
        while True:
            try:
                return await once()
            except KafkaError as e:
                if e.code in FENCED_CODES:
                    self._fence(e)
                    self._raise_if_fenced()
                if e.code not in TRANSACTION_RETRY_CODES or loop.time() + backoff_s > deadline:
                    raise
            except (ConnectionClosedError, RequestTimedOutError):
                if loop.time() + backoff_s > deadline:
                    raise
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, RETRY_BACKOFF_S[1])

    async def _find_coordinator(self) -> NodeId:
        if self._coordinator is None:
            self._coordinator = await find_transaction_coordinator(
                self._cluster, self.transactional_id
            )
        return self._coordinator


async def find_transaction_coordinator(cluster: Cluster, transactional_id: str) -> NodeId:
    """The broker coordinating ``transactional_id`` (FindCoordinator key type 1)."""
    connection = await cluster.any_connection()
    response = await connection.request(
        Request(
            ApiKey.FIND_COORDINATOR, {"key": transactional_id, "key_type": TRANSACTION_KEY_TYPE}
        )
    )
    message = getattr(response, "error_message", None)
    if response.error_code != ErrorCode.none:
        raise errors.for_code(response.error_code)(
            f"no transaction coordinator for {transactional_id!r}"
            + (f": {message}" if message else "")
        )
    return int(response.node_id)


@dataclass(frozen=True)
class _Answer:
    error_code: ErrorCode


def _raise_for(code: ErrorCode, what: str) -> None:
    if code is not ErrorCode.none:
        raise errors.for_code(code)(what)


async def end_prepared(
    cluster: Cluster,
    prepared: PreparedTransaction,
    *,
    commit: bool,
    offsets: tuple[GroupMetadata, Mapping[TopicPartition, int]] | None = None,
    offsets_metadata: str = "",
    timeout_s: float = 60.0,
) -> None:
    """Commit (with ``offsets`` of a group committed inside it, each with
    ``offsets_metadata``) or abort a transaction another producer handed over. Raises
    ProducerFencedError when its producer was fenced since (the transaction was aborted
    then)."""
    manager = TransactionManager.resume(cluster, prepared, timeout_s=timeout_s)
    if commit and offsets is not None:
        await manager.send_offsets(offsets[1], offsets[0], offsets_metadata)
    await manager.end(commit=commit)
