"""What passes between a coordinator shard, its runtime and the log: the effects a shard
returns, and the interfaces the runtime expects of the shard and of the log.

A shard never does I/O. Its operations return a list of effects:

- :class:`Append` — records to write to the shard's partition. When they are committed
  (or failed), the runtime calls ``append_completed(now_ms, append_id, error)``.
- :class:`Reply` — the response to a waiting request, named by the token the runtime
  gave when it handed the request in. A request may be answered at once, after its
  records are committed, or much later (a JoinGroup waits for the rebalance).
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


@dataclass(frozen=True)
class Reply:
    token: RequestToken
    response: object
    """The coordinator's response type; its runtime layer checks which it expects."""


Effect = Append | Reply


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

    async def append(self, partition: int, records: Sequence[Record]) -> None:
        """Append the records as one batch and return once they are committed (the high
        watermark is past them). Raise a KafkaError (NOT_LEADER_OR_FOLLOWER,
        NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, …) if they were not; the shard maps it
        to the error its clients expect."""
        ...

    def read(self, partition: int) -> Iterable[Record]:
        """Every record now in the partition, in offset order (for loading)."""
        ...
