"""Transactions: Kafka's transaction coordinator and its ``__transaction_state`` records.

What belongs here: the coordinator as a deterministic state machine per
``__transaction_state`` partition (:mod:`~sluice.txn.coordinator`), its record layouts
(:mod:`~sluice.txn.records`), its plain requests and results and the marker work it
hands out (:mod:`~sluice.txn.api`), its settings (:mod:`~sluice.txn.config`), and the
operations on top of the generic coordinator runtime (:mod:`~sluice.txn.runtime`).
Writing markers into partitions, checking transactional produce and the wire messages
belong to the broker. This package imports only ``common``, ``protocol``, ``storage``
and ``coordinator``.
"""

from sluice.txn.config import TRANSACTION_STATE_TOPIC, TransactionConfig
from sluice.txn.coordinator import TransactionCoordinator
from sluice.txn.runtime import TransactionCoordinatorRuntime

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "TransactionConfig",
    "TransactionCoordinator",
    "TransactionCoordinatorRuntime",
]
