"""Coordinators that keep their state in an internal topic, and the one runtime they share.

Kafka runs several coordinators the same way: consumer groups on ``__consumer_offsets``,
transactions on ``__transaction_state``, share groups on ``__share_group_state``. Each
partition of the topic has a shard, a deterministic state machine whose operations take
``now_ms`` and return effects; the leader of the partition runs the shard, and the log is
its source of truth.

What belongs here: what every such coordinator needs and none owns — the effect types and
the shard and log interfaces (:mod:`~sluice.coordinator.api`), and the asyncio runtime that
loads shards from their partitions, writes their records in order, answers requests once
the records are committed and drives their timers (:mod:`~sluice.coordinator.runtime`).
A coordinator's own state machine, records and requests live in its package (``group``,
``txn``, …), which uses this one. This package imports only ``common``.
"""

from sluice.coordinator.api import (
    Append,
    CoordinatorLog,
    CoordinatorShard,
    Effect,
    LoggedRecord,
    Record,
    Reload,
    Reply,
    RequestToken,
    Task,
    TransactionalRecord,
    TransactionMarker,
)
from sluice.coordinator.runtime import CoordinatorRuntime

__all__ = [
    "Append",
    "CoordinatorLog",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "Effect",
    "LoggedRecord",
    "Record",
    "Reload",
    "Reply",
    "RequestToken",
    "Task",
    "TransactionMarker",
    "TransactionalRecord",
]
