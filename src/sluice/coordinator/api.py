"""What passes between a coordinator shard, its runtime and the log: the effects a shard
returns, and the interfaces the runtime expects of the shard and of the log.

A shard never does I/O. Its operations return a list of effects:

- :class:`Append` — records to write to the shard's partition. When they are committed
  (or failed), the runtime calls ``append_completed(now_ms, append_id, error)``.
- :class:`Reply` — the response to a waiting request, named by the token the runtime
  gave when it handed the request in. A request may be answered at once, after its
  records are committed, or much later (a JoinGroup waits for the rebalance).
- :class:`Task` — work outside the shard's partition (the transaction coordinator
  writing markers to other partitions, …), run by the coordinator's task runner; when
  it is done the runtime calls ``task_completed(now_ms, task_id, result)``.
- :class:`Reload` — the shard can no longer tell what its partition holds (an append
  failed after it may have reached the log, and may still be committed): the runtime
  replays the partition into a new shard, as a new leader would.

An :class:`Append` with a ``transaction`` is written as a transactional batch of that
producer (TxnOffsetCommit's offsets); such records are pending until a marker for the
producer lands in the partition. Loading replays them with ``replay_transactional``
and the markers with ``replay_marker``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sluice.common.errors import ErrorCode

RequestToken = int
"""Names a waiting request; chosen by the runtime, returned in the :class:`Reply`."""

Record = tuple[bytes, bytes | None]
"""A record of a coordinator's topic: key bytes and value bytes (None: a tombstone)."""


@dataclass(frozen=True)
class Append:
    append_id: int
    records: tuple[Record, ...] = field(repr=False)
    transaction: tuple[int, int] | None = None
    """(producer id, producer epoch): written as that producer's transactional batch."""


@dataclass(frozen=True)
class Reply:
    token: RequestToken
    response: object
    """The coordinator's response type; its runtime layer checks which it expects."""


@dataclass(frozen=True)
class Task:
    task_id: int
    work: object
    """What to do; the coordinator's task runner knows the types it hands out."""


@dataclass(frozen=True)
class Reload:
    """Replay the partition into a new shard. The runtime drops this shard first: its
    waiting requests fail with COORDINATOR_LOAD_IN_PROGRESS (retriable), its pending
    appends and tasks are forgotten, and requests meanwhile are told it is loading."""

    reason: str


Effect = Append | Reply | Task | Reload


@dataclass(frozen=True, slots=True)
class TransactionalRecord:
    """A record of a producer's transactional batch, as loading reads it."""

    producer_id: int
    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class TransactionMarker:
    """A COMMIT or ABORT marker for a producer, as loading reads it."""

    producer_id: int
    committed: bool


LoggedRecord = Record | TransactionalRecord | TransactionMarker
"""What loading reads from a partition, in log order."""


class CoordinatorShard(Protocol):
    """The state of one partition of a coordinator's topic: deterministic, synchronous.

    Besides these, the shard has its own operations (``join_group(now_ms, token,
    request)``, …) returning effects; the runtime hands them in through
    :meth:`~sluice.coordinator.runtime.CoordinatorRuntime.call`.
    """

    def replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one record of the partition, in log order, before any operation.
        Raise a KafkaError (CorruptMessage) for bytes that are not a record of ours: the
        runtime logs and skips the record."""
        ...

    def replay_transactional(self, producer_id: int, key: bytes, value: bytes | None) -> None:
        """Apply one record of a producer's transaction: pending until its marker."""
        ...

    def replay_marker(self, producer_id: int, committed: bool) -> None:
        """A marker: the producer's pending records take effect (or are dropped)."""
        ...

    def load_completed(self, now_ms: int) -> None:
        """The whole partition has been replayed; operations follow."""
        ...

    def next_deadline_ms(self) -> int | None:
        """When :meth:`poll` next has work (None: no timer set). Earlier is harmless."""
        ...

    def poll(self, now_ms: int) -> list[Effect]:
        """Run every timer due at or before ``now_ms``."""
        ...

    def append_completed(
        self, now_ms: int, append_id: int, error: ErrorCode | None
    ) -> list[Effect]:
        """The records of ``append_id`` are committed (``error`` None) or were not
        written. Appends are reported in the order the shard returned them."""
        ...

    def task_completed(self, now_ms: int, task_id: int, result: object) -> list[Effect]:
        """A :class:`Task` finished with ``result`` (the task runner's)."""
        ...


class CoordinatorLog(Protocol):
    """The partitions of one coordinator's topic, as the broker provides them."""

    @property
    def topic(self) -> str:
        """The internal topic's name (``__consumer_offsets``, …)."""
        ...

    @property
    def partition_count(self) -> int:
        """Partitions of the topic; fixed for the life of the cluster."""
        ...

    async def append(
        self,
        partition: int,
        records: Sequence[Record],
        transaction: tuple[int, int] | None = None,
    ) -> None:
        """Append the records as one batch (``transaction``: that producer's
        transactional batch) and return once they are committed (the high watermark is
        past them). Raise a KafkaError (NOT_LEADER_OR_FOLLOWER,
        NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, …) if they were not; the shard maps it
        to the error its clients expect."""
        ...

    def read(self, partition: int) -> Iterable[LoggedRecord]:
        """Every record and marker now in the partition, in offset order (loading)."""
        ...


def look_up_again(error: ErrorCode) -> ErrorCode:
    """What a caller is told when a shard's records could not be written, as the
    transaction and share-state coordinators answer (Kafka maps every write failure of
    theirs the same way): look the coordinator up again."""
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator):
        return ErrorCode.not_coordinator
    return ErrorCode.coordinator_not_available
