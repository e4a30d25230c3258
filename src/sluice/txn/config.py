"""Settings of the transaction coordinator (Kafka's broker property names are in
``common.config``; the broker builds this from them)."""

from __future__ import annotations

from dataclasses import dataclass

TRANSACTION_STATE_TOPIC = "__transaction_state"

TRANSACTION_STATE_WRITE_TIMEOUT_MS = 5_000
"""How long a write to ``__transaction_state`` may wait for the in-sync replicas."""


@dataclass(frozen=True)
class TransactionConfig:
    transaction_max_timeout_ms: int = 900_000
    """transaction.max.timeout.ms: InitProducerId asking for more is refused with
    INVALID_TRANSACTION_TIMEOUT."""
    abort_check_interval_ms: int = 10_000
    """transaction.abort.timed.out.transaction.cleanup.interval.ms."""
