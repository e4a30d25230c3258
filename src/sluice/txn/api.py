"""Plain requests and results of the transaction coordinator (the broker's handlers
translate the wire messages), and the marker work it hands its runtime."""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


@dataclass(frozen=True)
class InitProducerIdRequest:
    transactional_id: str
    transaction_timeout_ms: int
    producer_id: int = NO_PRODUCER_ID
    """v3+ (KIP-360): the producer's current id and epoch, to recover after an error."""
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class ProducerIdAndEpoch:
    """The answer to InitProducerId and EndTxn (v5 returns the bumped epoch)."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class AddPartitionsRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    verify_only: bool = False
    """KIP-890 part 1: a partition leader asks whether the partitions are in the open
    transaction; nothing is added."""


@dataclass(frozen=True)
class AddPartitionsResult:
    errors: dict[TopicPartition, ErrorCode]


@dataclass(frozen=True)
class EndTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    bump_epoch: bool = False
    """Transaction version 2 (EndTxn v5): the epoch goes up at every commit or abort."""


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    error: ErrorCode
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class ListTransactionsFilter:
    states: frozenset[str] = frozenset()
    """Kafka's state names (Ongoing, …); empty: every state."""
    producer_ids: frozenset[int] = frozenset()
    duration_ms: int = -1
    """v1: only transactions open longer than this; -1: any."""


@dataclass(frozen=True)
class WriteMarkers:
    """Task: write a COMMIT or ABORT marker for the producer to every partition, each
    through its leader's replicated append; finished when all are written (or their
    topic is gone)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    partitions: tuple[TopicPartition, ...] = field(default=())
