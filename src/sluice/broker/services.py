"""The parts of the broker that request handlers use, built once at start.

Handlers get a :class:`BrokerServices`, never the broker itself: what a handler can
touch is written down here, and the broker's start-up, shutdown and background tasks
stay out of their reach. Each handler module narrows that further: it declares the few
services it uses as a protocol made of the ``Uses…`` parts at the end of this module
(``class FetchServices(UsesAuthorizer, UsesClock, …, Protocol)``) and takes that, so a
reader sees at the top of a handler what it may touch, and the type checker refuses a
handler that reaches for anything else. :class:`BrokerServices` has every part.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from sluice.broker.authorization import Authorizer
from sluice.broker.coordination.producer_ids import ProducerIdManager
from sluice.broker.coordination.transactions import TransactionMarkers
from sluice.broker.extensions.delays import DelayScheduler
from sluice.broker.network.peers import Peers
from sluice.broker.observability.metrics.requests import RequestMetrics
from sluice.broker.observability.metrics.traffic import TopicTraffic
from sluice.broker.produce_checks import ProduceChecks
from sluice.broker.quotas import ClientQuotas
from sluice.broker.registry.forwarding import RegistryCalls
from sluice.broker.replication.fetch_sessions import FetchSessionCache
from sluice.broker.replication.purgatory import Purgatory
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.broker.schema_validation import SchemaValidation
from sluice.broker.share.partitions import SharePartitions
from sluice.broker.share.sessions import ShareSessions
from sluice.broker.topics import TopicManager
from sluice.cluster.controller import Controller
from sluice.cluster.store import MetadataStore
from sluice.common.clock import Clock
from sluice.common.config import BrokerConfig
from sluice.common.ids import TopicPartition
from sluice.group.runtime import GroupCoordinatorRuntime
from sluice.share.state import SharePersister
from sluice.share.state_runtime import ShareStateCoordinatorRuntime
from sluice.txn.runtime import TransactionCoordinatorRuntime


@dataclass(frozen=True, slots=True)
class BrokerServices:
    config: BrokerConfig
    store: MetadataStore
    """The cluster metadata: brokers, topics, partition states, group configs."""
    topics: TopicManager
    replicas: ReplicaManager
    """The partitions hosted here, with their logs."""
    purgatory: Purgatory
    """Where acks=all produce requests wait for the high watermark."""
    fetch_sessions: FetchSessionCache
    """The fetchers' incremental fetch sessions (KIP-227)."""
    groups: GroupCoordinatorRuntime
    transactions: TransactionCoordinatorRuntime
    markers: TransactionMarkers
    """Writes transaction markers into partitions led here (WriteTxnMarkers)."""
    verify_transaction: Callable[[str, int, int, TopicPartition, bool], Awaitable[None]]
    """KIP-890: raises unless the partition is in the producer's open transaction, or
    (last argument True, transaction version 2) adds it (``TransactionVerifier.verify``)."""
    producer_ids: ProducerIdManager
    produce_checks: ProduceChecks
    """Threads for the records checks of large produced batches."""
    check_storage_error: Callable[[BaseException, object], None]
    """Called with a request's storage error and its partition: an I/O error stops the
    broker (see :class:`sluice.broker.fatal.FatalStorageStop`)."""
    delays: DelayScheduler
    """Fires the delayed records parked in partitions led here."""
    share_states: ShareStateCoordinatorRuntime
    """The share coordinators of the ``__share_group_state`` partitions led here (the
    internal share-state APIs)."""
    share_persister: SharePersister
    """Where a share-partition led here reads and writes its state: the share
    coordinator of its key, here or on another broker (``BrokerSharePersister``)."""
    share_partitions: SharePartitions
    """The share-partitions (share groups' in-flight records) of partitions led here."""
    share_sessions: ShareSessions
    """The share sessions of share-group members fetching from this broker."""
    peers: Peers
    """Requests to the other brokers of the cluster."""
    controller: Controller
    """This broker's controller (it answers AlterPartition while elected)."""
    clock: Clock
    authorizer: Authorizer
    """Whether the request's principal may do an operation (the ACLs, indexed)."""
    quotas: ClientQuotas | None = None
    """Client quotas: recorded after each request, its throttle time in the response."""
    traffic: TopicTraffic = field(default_factory=TopicTraffic)
    """Per-topic bytes and records in and out (the produce and fetch handlers count)."""
    request_metrics: RequestMetrics = field(default_factory=RequestMetrics)
    """The dispatcher's request counts; handlers that frame their own responses add
    their errors."""
    static_config: BrokerConfig | None = None
    """The settings the broker started with, before dynamic broker configs (``config``
    holds them applied); None: the same as ``config``."""
    schema_validation: SchemaValidation = field(kw_only=True)
    """Checks the schema ids of records produced to topics that validate them."""
    schema_registry: RegistryCalls = field(kw_only=True)
    """The Schema Registry's calls, answered here or forwarded (every broker has them)."""


# -- the parts a handler may name in its protocol, one per BrokerServices field ---------


class UsesConfig(Protocol):
    @property
    def config(self) -> BrokerConfig: ...


class UsesStore(Protocol):
    @property
    def store(self) -> MetadataStore: ...


class UsesTopics(Protocol):
    @property
    def topics(self) -> TopicManager: ...


class UsesReplicas(Protocol):
    @property
    def replicas(self) -> ReplicaManager: ...


class UsesPurgatory(Protocol):
    @property
    def purgatory(self) -> Purgatory: ...


class UsesFetchSessions(Protocol):
    @property
    def fetch_sessions(self) -> FetchSessionCache: ...


class UsesGroups(Protocol):
    @property
    def groups(self) -> GroupCoordinatorRuntime: ...


class UsesTransactions(Protocol):
    @property
    def transactions(self) -> TransactionCoordinatorRuntime: ...


class UsesMarkers(Protocol):
    @property
    def markers(self) -> TransactionMarkers: ...


class UsesVerifyTransaction(Protocol):
    @property
    def verify_transaction(
        self,
    ) -> Callable[[str, int, int, TopicPartition, bool], Awaitable[None]]: ...


class UsesProducerIds(Protocol):
    @property
    def producer_ids(self) -> ProducerIdManager: ...


class UsesProduceChecks(Protocol):
    @property
    def produce_checks(self) -> ProduceChecks: ...


class UsesSchemaValidation(Protocol):
    @property
    def schema_validation(self) -> SchemaValidation: ...


class UsesCheckStorageError(Protocol):
    @property
    def check_storage_error(self) -> Callable[[BaseException, object], None]: ...


class UsesDelays(Protocol):
    @property
    def delays(self) -> DelayScheduler: ...


class UsesShareStates(Protocol):
    @property
    def share_states(self) -> ShareStateCoordinatorRuntime: ...


class UsesSharePersister(Protocol):
    @property
    def share_persister(self) -> SharePersister: ...


class UsesSharePartitions(Protocol):
    @property
    def share_partitions(self) -> SharePartitions: ...


class UsesShareSessions(Protocol):
    @property
    def share_sessions(self) -> ShareSessions: ...


class UsesPeers(Protocol):
    @property
    def peers(self) -> Peers: ...


class UsesClock(Protocol):
    @property
    def clock(self) -> Clock: ...


class UsesAuthorizer(Protocol):
    @property
    def authorizer(self) -> Authorizer: ...


class UsesQuotas(Protocol):
    @property
    def quotas(self) -> ClientQuotas | None: ...


class UsesTraffic(Protocol):
    @property
    def traffic(self) -> TopicTraffic: ...


class UsesRequestMetrics(Protocol):
    @property
    def request_metrics(self) -> RequestMetrics: ...


class UsesStaticConfig(Protocol):
    @property
    def static_config(self) -> BrokerConfig | None: ...


class UsesController(Protocol):
    @property
    def controller(self) -> Controller: ...


class UsesSchemaRegistry(Protocol):
    @property
    def schema_registry(self) -> RegistryCalls: ...
