"""Transactions as an administrator sees them: ListTransactions on every broker,
DescribeTransactions at each transactional id's coordinator (what ``sluice
transactions`` prints, and Kafka's ``kafka-transactions.sh`` asks)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sluice.client.cluster import Cluster, run_all
from sluice.client.groups import retry_coordinator_errors
from sluice.client.messages import Request
from sluice.client.transactions import find_transaction_coordinator
from sluice.common import errors
from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.protocol.versions import ApiKey

TIMEOUT_S_DEFAULT = 30.0
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    """Kafka's names: Empty, Ongoing, PrepareCommit, CompleteCommit, …"""


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int
    """When the open transaction started (-1: none is open)."""
    partitions: tuple[TopicPartition, ...]


async def list_transactions(
    cluster: Cluster,
    *,
    states: Iterable[str] = (),
    producer_ids: Iterable[int] = (),
    open_longer_than_ms: int = -1,
) -> list[TransactionListing]:
    """Every transactional id of every broker, sorted, optionally filtered by state,
    producer id, or (ListTransactions v1) how long the open transaction has run."""
    metadata = await cluster.metadata([])
    found: list[TransactionListing] = []

    async def on(node_id: int) -> None:
        connection = await cluster.connection(node_id)
        response = await connection.request(
            Request(
                ApiKey.LIST_TRANSACTIONS,
                {
                    "state_filters": list(states),
                    "producer_id_filters": list(producer_ids),
                    "duration_filter": open_longer_than_ms,
                },
            )
        )
        if response.error_code != ErrorCode.none:
            raise errors.for_code(response.error_code)(f"listing transactions of broker {node_id}")
        found.extend(
            TransactionListing(t.transactional_id, int(t.producer_id), t.transaction_state)
            for t in response.transaction_states
        )

    await run_all(on(node_id) for node_id in metadata.brokers)
    return sorted(found, key=lambda listing: listing.transactional_id)


async def describe_transactions(
    cluster: Cluster, transactional_ids: Sequence[str], *, timeout_s: float = TIMEOUT_S_DEFAULT
) -> list[TransactionDescription]:
    """Each id's state at its coordinator, in the order asked. Raises
    TransactionalIdNotFound for an id no coordinator knows."""
    described = []
    for transactional_id in transactional_ids:

        async def attempt(transactional_id: str = transactional_id) -> TransactionDescription:
            node_id = await find_transaction_coordinator(cluster, transactional_id)
            connection = await cluster.connection(node_id)
            response = await connection.request(
                Request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]})
            )
            (state,) = response.transaction_states
            if state.error_code != ErrorCode.none:
                raise errors.for_code(state.error_code)(f"transactional id {transactional_id!r}")
            start_ms = round((state.transaction_start_time - EPOCH).total_seconds() * 1000)
            return TransactionDescription(
                transactional_id,
                state.transaction_state,
                int(state.producer_id),
                int(state.producer_epoch),
                int(state.transaction_timeout.total_seconds() * 1000),
                start_ms if start_ms > 0 else -1,  # 0 or -1: no transaction is open
                tuple(
                    TopicPartition(topic.topic, int(index))
                    for topic in state.topics
                    for index in topic.partitions
                ),
            )

        described.append(await retry_coordinator_errors(attempt, timeout_s))
    return described
