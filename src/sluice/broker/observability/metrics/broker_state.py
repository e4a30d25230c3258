"""Scrape-time metrics of the broker's other parts: connections per listener, requests
waiting in the purgatory, delayed delivery, transactions coordinated here, and share
groups' share-partitions led here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sluice.broker.extensions.delays import DelayScheduler
from sluice.broker.network.server import Server
from sluice.broker.replication.fetch_sessions import FetchSessionCache
from sluice.broker.replication.purgatory import Purgatory
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.broker.share.partitions import SharePartitions
from sluice.txn.records import TransactionState
from sluice.txn.runtime import TransactionCoordinatorRuntime


class ConnectionCollector(Collector):
    def __init__(self, servers: Sequence[Server]) -> None:
        self._servers = servers

    def collect(self) -> Iterator[Metric]:
        open_now = GaugeMetricFamily(
            "sluice_connections", "Open client connections, by listener", labels=["listener"]
        )
        accepted = CounterMetricFamily(
            "sluice_connections_accepted",
            "Connections accepted, by listener",
            labels=["listener"],
        )
        refused = CounterMetricFamily(
            "sluice_connections_refused",
            "Connections closed at once by the connection limits, by listener",
            labels=["listener"],
        )
        closed = CounterMetricFamily(
            "sluice_connections_closed",
            "Accepted connections since closed, by listener",
            labels=["listener"],
        )
        for server in self._servers:
            labels = [server.listener_name]
            open_now.add_metric(labels, server.open_connections)
            accepted.add_metric(labels, server.accepted_total)
            refused.add_metric(labels, server.refused_total)
            closed.add_metric(labels, server.closed_total)
        yield from (open_now, accepted, refused, closed)


class BrokerStateCollector(Collector):
    def __init__(
        self,
        purgatory: Purgatory,
        replicas: ReplicaManager,
        delays: DelayScheduler,
        transactions: Callable[[], TransactionCoordinatorRuntime | None],
        share_partitions: Callable[[], SharePartitions | None],
        fetch_sessions: FetchSessionCache,
    ) -> None:
        self._fetch_sessions = fetch_sessions
        self._purgatory = purgatory
        self._replicas = replicas
        self._delays = delays
        self._transactions = transactions
        self._share_partitions = share_partitions

    def collect(self) -> Iterator[Metric]:
        waiting = GaugeMetricFamily(
            "sluice_purgatory_requests",
            "Requests waiting in the purgatory, by what they wait for: a partition's high "
            "watermark (acks=all producers, consumer fetches) or its log end (followers)",
            labels=["kind"],
        )
        for kind, count in sorted(self._purgatory.waiting().items()):
            waiting.add_metric([kind], count)
        yield waiting
        yield from self._incremental_fetch_sessions()
        yield from self._delayed_delivery()
        yield from self._transaction_states()
        yield from self._share()

    def _incremental_fetch_sessions(self) -> Iterator[Metric]:
        sessions = self._fetch_sessions
        yield GaugeMetricFamily(
            "sluice_incremental_fetch_sessions",
            "Incremental fetch sessions (KIP-227) kept here (Kafka's NumIncrementalFetchSessions)",
            value=len(sessions),
        )
        yield GaugeMetricFamily(
            "sluice_incremental_fetch_partitions_cached",
            "Partitions held by the incremental fetch sessions kept here "
            "(Kafka's NumIncrementalFetchPartitionsCached)",
            value=sessions.partitions_cached,
        )
        yield CounterMetricFamily(
            "sluice_incremental_fetch_session_evictions",
            "Fetch sessions evicted to make room for new ones "
            "(Kafka's IncrementalFetchSessionEvictionsPerSec)",
            value=sessions.evictions_total,
        )
        yield CounterMetricFamily(
            "sluice_incremental_fetches",
            "Incremental fetches served from a fetch session",
            value=sessions.incremental_fetches_total,
        )
        yield CounterMetricFamily(
            "sluice_incremental_fetch_partitions_named",
            "Partitions named by incremental fetches (the rest of their sessions' "
            "partitions were read without being named)",
            value=sessions.incremental_partitions_named_total,
        )

    def _delayed_delivery(self) -> Iterator[Metric]:
        parked = 0
        for partition in self._replicas:
            if partition.is_leader and not partition.log.closed:
                delays = partition.log.delays
                if delays.index is not None:
                    parked += delays.counts().pending
        yield GaugeMetricFamily(
            "sluice_delayed_records_parked",
            "Parked records not yet delivered, in partitions led here",
            value=parked,
        )
        yield GaugeMetricFamily(
            "sluice_delayed_records_loaded",
            "Parked records held in memory to be fired soon (the rest wait on disk)",
            value=self._delays.loaded,
        )
        yield CounterMetricFamily(
            "sluice_delayed_records_delivered",
            "Parked records this broker delivered (fired) since start",
            value=self._delays.fired_records,
        )

    def _transaction_states(self) -> Iterator[Metric]:
        runtime = self._transactions()
        states: Counter[str] = Counter({state.name: 0 for state in TransactionState})
        if runtime is not None:
            for partition in runtime.loaded_partitions():
                coordinator = runtime.shard(partition)
                if coordinator is None:
                    continue
                for transaction in coordinator.transactions():
                    states[transaction.state.name] += 1
        family = GaugeMetricFamily(
            "sluice_transactions",
            "Transactional ids coordinated here, by state (ONGOING: open transactions)",
            labels=["state"],
        )
        for state, count in sorted(states.items()):
            family.add_metric([state], count)
        yield family

    def _share(self) -> Iterator[Metric]:
        share_partitions = self._share_partitions()
        hosted = [] if share_partitions is None else share_partitions.all_loaded()
        yield GaugeMetricFamily(
            "sluice_share_partitions_loaded",
            "Share-partitions (a share group on a partition) loaded on this leader",
            value=len(hosted),
        )
        acquired = GaugeMetricFamily(
            "sluice_share_partition_acquired_records",
            "Records of a share-partition led here locked to a member now",
            labels=["group", "topic", "partition"],
        )
        window = GaugeMetricFamily(
            "sluice_share_partition_in_flight_records",
            "Offsets in a share-partition's window (start to end offset)",
            labels=["group", "topic", "partition"],
        )
        for entry in sorted(hosted, key=lambda h: (h.key.group_id, h.topic_partition)):
            labels = [
                entry.key.group_id,
                entry.topic_partition.topic,
                str(entry.topic_partition.partition),
            ]
            acquired.add_metric(labels, entry.share.acquired_count())
            window.add_metric(labels, entry.share.end_offset - entry.share.start_offset)
        yield from (acquired, window)
