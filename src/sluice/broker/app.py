"""The broker process, wired together: metadata store, replica manager, topic manager,
producer ids, the coordinators of the internal topics (groups, transactions, share
state), the services handed to request handlers, the
dispatcher and network server, and the log maintenance loops (flusher, retention,
cleaner: :mod:`sluice.broker.log_maintenance`).

Start-up::

    lock data dir ─▶ check meta.properties (node id) ─▶ read .clean-shutdown
      ─▶ open metadata store ─▶ check/write meta.properties (cluster id)
      ─▶ open local partition logs (recover them if the marker was missing)
      ─▶ remove .clean-shutdown ─▶ bind the ports ─▶ the console, if given
      ─▶ bind the HTTP port ─▶ background tasks ─▶ load the group coordinators
      ─▶ accept clients (ready)

The HTTP listener (:mod:`sluice.broker.observability.http_server`: ``/metrics``, ``/health``,
``/ready``, the web console a :data:`ConsoleFactory` makes) answers from its bind on;
``/ready`` says 503 until clients are accepted and again from the request to stop. The
metrics (:mod:`sluice.broker.observability.metrics`) are this broker's own registry.

Shutdown (SIGTERM/SIGINT) runs the same steps backwards and ends by fsyncing every log
and writing the ``.clean-shutdown`` marker, so the next start skips recovery. Each step
is named to a :class:`~sluice.broker.shutdown.ShutdownWatch`, which says the slow ones
and, in ``sluice serve``'s process, ends it at ``sluice.shutdown.timeout.ms`` or at a
second signal, without the marker.

A fatal storage error (a failed fsync, a disk that turned full or read-only under the
flusher, a log that cannot be closed) takes the other way out
(:mod:`sluice.broker.fatal`): the broker stops listening and ends with
:class:`BrokerFatalError`, without closing (fsyncing, checkpointing) the logs and
without the marker, so the next start recovers every log.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from sluice.broker import meta_properties
from sluice.broker.allocator import tune_allocator
from sluice.broker.authorization import Authorizer
from sluice.broker.coordination.coordinator_hosting import CoordinatorHosting
from sluice.broker.coordination.coordinator_log import PartitionCoordinatorLog
from sluice.broker.coordination.producer_ids import ProducerIdManager
from sluice.broker.coordination.transactions import TransactionMarkers, TransactionVerifier
from sluice.broker.data_dir import create_data_dir, open_in_data_dir
from sluice.broker.dispatcher import Dispatcher
from sluice.broker.dynamic_config import DynamicBrokerConfig
from sluice.broker.extensions.delays import DelayScheduler
from sluice.broker.fatal import (
    BrokerFatalError,
    FatalStorageStop,
    describe_os_error,
    what_to_do,
)
from sluice.broker.handlers.table import HANDLERS, PRIVATE_HANDLERS
from sluice.broker.log_maintenance import LogMaintenance
from sluice.broker.network.peer_connection import InterBrokerListener, InterBrokerSasl
from sluice.broker.network.peers import Peers
from sluice.broker.network.server import ConnectionCounts, ConnectionInfo, Response, Server
from sluice.broker.network.tls import (
    ReloadingServerContext,
    TlsFiles,
    client_context,
    principal_from_peercert,
)
from sluice.broker.observability.http_auth import HttpAuthenticator, HttpIdentity, metrics_access
from sluice.broker.observability.http_server import (
    DEFAULT_PORT,
    LOOPBACK_HOST,
    ConsoleFactory,
    HttpListener,
    everyone,
)
from sluice.broker.observability.metrics.broker_state import (
    BrokerStateCollector,
    ConnectionCollector,
)
from sluice.broker.observability.metrics.end_offsets import RemoteEndOffsets
from sluice.broker.observability.metrics.groups import GroupCollector, committed_partitions
from sluice.broker.observability.metrics.partitions import PartitionCollector
from sluice.broker.observability.metrics.registry import BrokerMetrics
from sluice.broker.produce_checks import ProduceChecks
from sluice.broker.quotas import ClientQuotas
from sluice.broker.registry.access import SubjectAccess
from sluice.broker.registry.core import REGISTRY_CORE
from sluice.broker.registry.service import RegistryCore, SchemaRegistry
from sluice.broker.replication.controller_channel import ControllerChannel
from sluice.broker.replication.fetch_sessions import FetchSessionCache
from sluice.broker.replication.isr import IsrChanges
from sluice.broker.replication.metadata_applier import MetadataApplier
from sluice.broker.replication.purgatory import Purgatory
from sluice.broker.replication.replica_fetcher import ReplicaFetchers
from sluice.broker.replication.replica_manager import ReplicaManager, raise_open_files_limit
from sluice.broker.schema_validation import RegistrySchemaLookup, SchemaValidation
from sluice.broker.services import BrokerServices
from sluice.broker.share.dead_letters import DeadLetterWriter
from sluice.broker.share.partitions import SharePartitions
from sluice.broker.share.persister import BrokerSharePersister
from sluice.broker.share.sessions import ShareSessions
from sluice.broker.shutdown import ShutdownWatch
from sluice.broker.topics import TopicManager
from sluice.cluster.controller import Controller, LeaderRebalance
from sluice.cluster.embedded import EmbeddedMetadataStore
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import BrokerInfo, Endpoint
from sluice.cluster.store import BrokerIdInUse, MetadataStore, MetadataStoreError
from sluice.cluster.zookeeper import ZooKeeperMetadataStore
from sluice.common.clock import SYSTEM_CLOCK, Clock
from sluice.common.config import (
    SASL_PROTOCOLS,
    TLS_SECURITY_PROTOCOLS,
    BrokerConfig,
    BrokerConfigError,
)
from sluice.common.errors import KafkaStorageError
from sluice.common.quotas import WindowConfig
from sluice.group.config import OFFSETS_COMMIT_TIMEOUT_MS, OFFSETS_TOPIC, GroupConfig
from sluice.group.runtime import GroupCoordinatorRuntime
from sluice.share.config import SHARE_STATE_TOPIC, SHARE_STATE_WRITE_TIMEOUT_MS
from sluice.share.state_runtime import ShareStateCoordinatorRuntime
from sluice.storage import (
    clean_shutdown_marker_exists,
    remove_clean_shutdown_marker,
    write_clean_shutdown_marker,
)
from sluice.storage.machine_boot import record_boot, same_boot_as_previous_run
from sluice.txn.config import (
    TRANSACTION_STATE_TOPIC,
    TRANSACTION_STATE_WRITE_TIMEOUT_MS,
    TransactionConfig,
)
from sluice.txn.runtime import TransactionCoordinatorRuntime

__all__ = ["Broker", "BrokerFatalError", "ConsoleFactory", "DataDirInUse", "serve"]

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
REGISTRATION_APPLIED_TIMEOUT_S = 60.0
"""How long the broker waits at start to see its own registration in the metadata."""


class DataDirInUse(Exception):
    pass


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock = SYSTEM_CLOCK,
        console: ConsoleFactory | None = None,
        shutdown_watch: ShutdownWatch | None = None,
        registry_core: RegistryCore | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self._console = console
        self._registry_core = registry_core or REGISTRY_CORE
        self.schema_registry: SchemaRegistry | None = None
        """The Schema Registry, made by :meth:`start` on every broker: hosted here while
        this broker leads its partition, and served over HTTP unless
        schema.registry.listeners is empty (None only before the start made it)."""
        self.metrics = BrokerMetrics()
        self.http: HttpListener | None = None
        """The HTTP listener once bound (None with http.port=0)."""
        self._not_ready: str | None = "starting"
        """Why clients are not served (``/ready``), None while they are."""
        self._logs_intact = False
        """Whether the logs hold everything the previous run appended (a clean
        shutdown, or a crash while the machine stayed up): the registration says so,
        as KIP-966's clean shutdown."""
        self.data_dir = Path(config.data_dir)
        self.purgatory = Purgatory()
        self.fetch_sessions = FetchSessionCache(
            config.max_incremental_fetch_session_cache_slots, config.request_max_partitions
        )
        self._lock_file: IO[bytes] | None = None
        self._stopping = asyncio.Event()
        self.shutdown_watch = shutdown_watch or ShutdownWatch()
        """The steps of the shutdown, said when slow (:mod:`sluice.broker.shutdown`);
        bounded by ending the process when the broker owns it (``serve``)."""
        self.replicas = ReplicaManager(
            config.node_id, self.data_dir, clock, self.purgatory, config.topic_defaults
        )
        config.check_listeners()
        config.check_share_group_bounds()
        self.servers = self._listener_servers()
        self.server = self.servers[0]
        """The first listener's server."""
        self.dynamic_config = DynamicBrokerConfig(config, self.servers)
        """Applies dynamic broker configs to ``config`` (which it copied as the static one)."""
        self.inter_broker = self._inter_broker_listener()
        self._dispatcher: Dispatcher | None = None
        self.store: MetadataStore | None = None
        self.peers: Peers | None = None
        self.fatal = FatalStorageStop(self.data_dir, self.request_stop)
        self.maintenance = LogMaintenance(
            config, clock, self.replicas, self.fatal, self.metrics.storage
        )
        self.delays = DelayScheduler(self.replicas, clock)
        self.produce_checks = ProduceChecks()
        """Threads for the records checks of large produced batches."""
        self.schema_validation: SchemaValidation | None = None
        """The schema ids of records produced to topics that validate them, checked
        against the Schema Registry (made by :meth:`start`, with the registry)."""

    def _listener_servers(self) -> list[Server]:
        """One server per listener, TLS ones with their (reloading) server context;
        the connection limits count all of them together."""
        config = self.config
        counts = ConnectionCounts()
        servers = []
        for listener in config.listener_list():
            protocol = config.security_protocol(listener.name)
            tls_context = None
            if protocol in TLS_SECURITY_PROTOCOLS:
                tls_context = ReloadingServerContext(
                    TlsFiles.of_listener(config, listener.name), f"listener {listener.name}"
                ).context
            servers.append(
                Server(
                    listener.host or "0.0.0.0",
                    listener.port,
                    self._handle,
                    connections_max_idle_ms=config.connections_max_idle_ms,
                    max_connections=config.max_connections,
                    max_connections_per_ip=config.max_connections_per_ip,
                    listener_name=listener.name,
                    security_protocol=protocol,
                    ssl_context=tls_context,
                    principal_of=principal_from_peercert if tls_context else None,
                    connection_counts=counts,
                    max_connections_per_ip_overrides=config.max_connections_per_ip_overrides,
                    listener_max_connections=config.listener_max_connections.get(listener.name),
                    request_max_bytes=config.socket_request_max_bytes,
                    unauthenticated_frame_bytes_max=config.sasl_server_max_receive_size,
                    failed_authentication_delay_ms=(
                        config.connection_failed_authentication_delay_ms
                    ),
                )
            )
        return servers

    def _inter_broker_listener(self) -> InterBrokerListener:
        """The listener this broker uses to reach the others, with a TLS client context
        when its protocol is SSL (or SASL_SSL)."""
        config = self.config
        name = config.inter_broker_listener()
        protocol = config.security_protocol(name)
        sasl = None
        if protocol in SASL_PROTOCOLS:
            sasl = InterBrokerSasl(
                config.sasl_mechanism_inter_broker_protocol,
                config.inter_broker_sasl_username or "",
                config.inter_broker_sasl_password or "",
            )
        if protocol not in TLS_SECURITY_PROTOCOLS:
            return InterBrokerListener(name, sasl=sasl)
        files = TlsFiles.of_listener(config, name)
        return InterBrokerListener(
            name, client_context(files, f"inter-broker listener {name}"), sasl=sasl
        )

    def _advertised_endpoints(self) -> tuple[Endpoint, ...]:
        """Each listener's advertised endpoint, once the servers are bound (a port 0
        listener is advertised with the port it got): the advertised.listeners entry of
        its name, else where it listens (advertised.host, or this machine's name for a
        listener without a host)."""
        config = self.config
        advertised = {listener.name: listener for listener in config.advertised_listeners}
        endpoints = []
        for index, server in enumerate(self.servers):
            name = server.listener_name
            given = advertised.get(name)
            if given is not None:
                host, port = given.host or socket.getfqdn(), given.port
            else:
                host = self._advertised_host(server.host, index)
                port = server.port
                if index == 0 and config.advertised_port:
                    port = config.advertised_port
            endpoints.append(Endpoint(name, host, port, server.security_protocol))
        return tuple(endpoints)

    async def _handle(self, frame: bytes, connection: ConnectionInfo) -> Response:
        assert self._dispatcher is not None, "requests arrive only after start()"
        return await self._dispatcher.handle(frame, connection)

    def _lock_data_dir(self) -> None:
        create_data_dir(self.data_dir)
        self._lock_file = open_in_data_dir(self.data_dir, LOCK_FILE)
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirInUse(
                f"data directory {self.data_dir} is used by another running broker; "
                "stop it or pass a different --data-dir"
            ) from None

    async def start(self) -> None:
        self.replicas.open_files_limit = raise_open_files_limit()
        self._lock_data_dir()
        stored_identity = meta_properties.read(self.data_dir)
        if stored_identity is not None:
            meta_properties.check_node_id(self.data_dir, stored_identity, self.config.node_id)
        try:
            try:
                await self._open_storage(stored_identity)
            except (KafkaStorageError, OSError) as e:
                raise BrokerFatalError(
                    f"cannot open the data directory {self.data_dir}: "
                    f"{describe_os_error(e)}; {what_to_do(e)}"
                ) from None
            await self._start_services()
        except BaseException:
            await self._close_storage_after_failed_start()
            raise

    async def _close_storage_after_failed_start(self) -> None:
        """Nothing was served: close the logs and leave the marker, so that the next
        start (say, on a free port) need not recover. A storage error here leaves no
        marker, which only costs that recovery."""
        try:
            await self._stop_http()
            if self.schema_registry is not None:
                await self.schema_registry.listener.stop()
                await self.schema_registry.close()
            self.replicas.close_all()
            if self.store is not None:
                await self.store.close()
            write_clean_shutdown_marker(self.data_dir)
        except (KafkaStorageError, OSError) as e:
            log.warning("closing the logs after a failed start: %s", describe_os_error(e))
        self._release_lock()

    def _make_store(self) -> MetadataStore:
        connect = self.config.zookeeper_connect
        if connect is None:
            return EmbeddedMetadataStore(self.data_dir)
        return ZooKeeperMetadataStore(
            connect,
            session_timeout_s=self.config.zookeeper_session_timeout_ms / 1000,
            connect_timeout_s=self.config.zookeeper_connection_timeout_ms / 1000,
        )

    async def _open_storage(self, stored_identity: meta_properties.MetaProperties | None) -> None:
        """Open the metadata store and every local log (recovering them without the
        clean-shutdown marker)."""
        clean = clean_shutdown_marker_exists(self.data_dir)
        same_boot = same_boot_as_previous_run(self.data_dir)
        self._logs_intact = stored_identity is not None and (clean or same_boot)
        if stored_identity is None:
            log.info("new data directory %s", self.data_dir)
        elif not clean:
            log.info(
                "no clean-shutdown marker: recovering partition logs (%s)",
                "the machine stayed up: nothing appended is lost"
                if same_boot
                else "the machine may have gone down: unsynced tails may be lost",
            )
        self.store = store = self._make_store()
        try:
            await store.start()
        except MetadataStoreError as e:
            raise BrokerFatalError(str(e)) from None
        cluster_id = store.image().cluster_id
        if stored_identity is None:
            meta_properties.write(
                self.data_dir, meta_properties.MetaProperties(self.config.node_id, cluster_id)
            )
        else:
            meta_properties.check_cluster_id(self.data_dir, stored_identity, cluster_id)
        self.isr_changes = IsrChanges(
            ControllerChannel(
                self.config.node_id, store.image, lambda: self.peers, lambda: self.controller
            ),
            store.image,
            self.config.node_id,
            self.replicas,
            self.config.replica_lag_time_max_ms,
        )
        self.replicas.isr_changes = self.isr_changes
        self.applier = MetadataApplier(
            self.config.node_id,
            store.image(),
            self.replicas,
            self._metadata_storage_error,
            on_broker_configs=self.dynamic_config.apply,
        )
        self.fetchers = ReplicaFetchers(
            self.config,
            self.replicas,
            lambda: self.applier.image,
            self._replication_storage_error,
            self.inter_broker,
        )
        self.replicas.partition_exists = lambda tp: self.applier.image.partition(tp) is not None
        self.topics = TopicManager(store, self.replicas, self.applier, self.config)
        self.topics.open_files_limit = self.replicas.open_files_limit
        opening_started = time.monotonic()
        await self.applier.apply_first(store.image(), recover=not clean)
        if len(self.replicas):
            log.info(
                "opened %d partition log(s) in %.1f s%s",
                len(self.replicas),
                time.monotonic() - opening_started,
                "" if clean else ", recovered from their recovery points",
            )
        self.replicas.say_leadership()
        store.subscribe(self.applier.offer)
        remove_clean_shutdown_marker(self.data_dir)
        record_boot(self.data_dir)

    async def _start_services(self) -> None:
        """The controller, producer ids, group coordinators and request handlers; bind
        the port and register with the cluster."""
        store = self.store
        assert store is not None
        rebalance = (
            LeaderRebalance(
                self.config.leader_imbalance_check_interval_seconds,
                self.config.leader_imbalance_per_broker_percentage,
            )
            if self.config.auto_leader_rebalance_enable
            else None
        )
        self.controller = Controller(
            store, self.config.node_id, self.config.topic_defaults, rebalance, clock=self.clock
        )
        self.producer_ids = ProducerIdManager(store)
        try:
            group_config = GroupConfig.from_properties(self.config.group_properties)
        except ValueError as e:
            raise BrokerConfigError(str(e)) from None
        offsets_topic = self.topics.get(OFFSETS_TOPIC)
        self.groups = GroupCoordinatorRuntime(
            PartitionCoordinatorLog(
                OFFSETS_TOPIC,
                self.replicas,
                self.purgatory,
                self.clock,
                self.config.offsets_topic_num_partitions
                if offsets_topic is None
                else offsets_topic.partition_count,
                OFFSETS_COMMIT_TIMEOUT_MS,
            ),
            group_config,
            self.clock,
        )
        self.peers = Peers(self.config.node_id, lambda: self.applier.image, self.inter_broker)
        self.markers = TransactionMarkers(
            self.config.node_id,
            self.replicas,
            self.purgatory,
            lambda: self.applier.image,
            self.peers,
            self.groups,
        )
        transaction_topic = self.topics.get(TRANSACTION_STATE_TOPIC)
        self.transactions = TransactionCoordinatorRuntime(
            PartitionCoordinatorLog(
                TRANSACTION_STATE_TOPIC,
                self.replicas,
                self.purgatory,
                self.clock,
                self.config.transaction_state_log_num_partitions
                if transaction_topic is None
                else transaction_topic.partition_count,
                TRANSACTION_STATE_WRITE_TIMEOUT_MS,
            ),
            self.producer_ids,
            self.markers.write,
            TransactionConfig(
                self.config.transaction_max_timeout_ms,
                self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            ),
            self.clock,
        )
        self.markers.coordinator = self.transactions
        verifier = TransactionVerifier(
            self.config.node_id, self.transactions, lambda: self.applier.image, self.peers
        )
        share_state_topic = self.topics.get(SHARE_STATE_TOPIC)
        self.share_states = ShareStateCoordinatorRuntime(
            PartitionCoordinatorLog(
                SHARE_STATE_TOPIC,
                self.replicas,
                self.purgatory,
                self.clock,
                self.config.share_coordinator_state_topic_num_partitions
                if share_state_topic is None
                else share_state_topic.partition_count,
                SHARE_STATE_WRITE_TIMEOUT_MS,
            ),
            self.clock,
        )
        share_persister = BrokerSharePersister(
            self.config.node_id, self.share_states, self.topics, self.peers
        )
        self.share_partitions = SharePartitions(
            self.config,
            store,
            self.replicas,
            share_persister,
            self.purgatory,
            DeadLetterWriter(
                self.config.node_id,
                self.replicas,
                self.topics,
                self.purgatory,
                self.peers,
                lambda: self.applier.image,
            ),
            self.clock,
        )
        registry = self.schema_registry = self._make_schema_registry(store)
        schema_validation = self.schema_validation = SchemaValidation(
            self.clock, RegistrySchemaLookup(registry.calls, self.produce_checks)
        )
        self.hosting = (
            CoordinatorHosting(OFFSETS_TOPIC, self.groups, self.replicas),
            CoordinatorHosting(TRANSACTION_STATE_TOPIC, self.transactions, self.replicas),
            CoordinatorHosting(SHARE_STATE_TOPIC, self.share_states, self.replicas),
            registry.hosting,
        )
        self.quotas = ClientQuotas(
            store,
            WindowConfig(self.config.quota_window_num, self.config.quota_window_size_seconds),
        )
        services = BrokerServices(
            config=self.config,
            store=store,
            topics=self.topics,
            replicas=self.replicas,
            purgatory=self.purgatory,
            fetch_sessions=self.fetch_sessions,
            groups=self.groups,
            transactions=self.transactions,
            markers=self.markers,
            verify_transaction=verifier.verify,
            producer_ids=self.producer_ids,
            produce_checks=self.produce_checks,
            schema_validation=schema_validation,
            check_storage_error=self.fatal.check_storage_error,
            delays=self.delays,
            share_states=self.share_states,
            share_persister=share_persister,
            share_partitions=self.share_partitions,
            share_sessions=ShareSessions(self.config.share_max_share_sessions),
            peers=self.peers,
            controller=self.controller,
            clock=self.clock,
            quotas=self.quotas,
            authorizer=Authorizer(self.config, store),
            traffic=self.metrics.traffic,
            request_metrics=self.metrics.requests,
            static_config=self.dynamic_config.static,
            schema_registry=registry.calls,
        )
        await self.quotas.load()
        self._dispatcher = Dispatcher(
            HANDLERS, services, PRIVATE_HANDLERS, metrics=self.metrics.requests
        )
        # Bind now (a port in use fails here); accept clients once the group
        # coordinators are loaded (run).
        for server in self.servers:
            await server.start(start_serving=False)
        endpoints = self._advertised_endpoints()
        inter_broker = next(
            e for e in endpoints if e.listener == self.config.inter_broker_listener()
        )
        self.node = BrokerInfo(
            self.config.node_id,
            inter_broker.host,
            inter_broker.port,
            self.config.rack,
            endpoints=endpoints,
            logs_intact=self._logs_intact,
        )
        self._add_collectors()
        self._not_ready = "registering with the cluster"
        # The registry's listeners first: the console is told where they listen.
        await self._start_schema_registry()
        await self._start_http()
        try:
            self.node = await store.register_broker(self.node)
        except BrokerIdInUse as e:
            raise BrokerFatalError(str(e)) from None
        self.replicas.registered(self.node.epoch)
        self.replicas.say_leadership()

    def _make_schema_registry(self, store: MetadataStore) -> SchemaRegistry:
        """The registry. A broker without registry listeners still hosts it when it
        leads its partition, so the other brokers can forward to it."""
        config = self.config
        secured = config.http_secured()
        return SchemaRegistry(
            config,
            replicas=self.replicas,
            purgatory=self.purgatory,
            clock=self.clock,
            image=lambda: self.applier.image,
            # Connections of its own: a forwarded call may take seconds at the leader.
            peers=Peers(self.config.node_id, lambda: self.applier.image, self.inter_broker),
            ensure_topic=self.topics.ensure_schema_registry_topic,
            core=self._registry_core,
            authenticator=self._http_authenticator(store) if secured else None,
            access=SubjectAccess(Authorizer(config, store)) if secured else None,
        )

    def _http_authenticator(self, store: MetadataStore) -> HttpAuthenticator:
        """HTTP Basic against the SCRAM users (the HTTP and registry listeners)."""
        config = self.config
        return HttpAuthenticator(
            store.scram_credentials,
            config.http_metrics_bearer_token,
            failed_authentication_delay_s=config.connection_failed_authentication_delay_ms / 1000,
        )

    async def _start_schema_registry(self) -> None:
        """Bind the registry's listeners (a port in use fails the start, naming the
        setting); the registry answers once this broker or another hosts it."""
        registry = self.schema_registry
        assert registry is not None, "made by the start"
        if not self.config.schema_registry_listeners:
            return
        await registry.listener.start()
        log.info(
            "Schema Registry on %s%s",
            ", ".join(registry.urls),
            "; credentials required" if self.config.http_secured() else "",
        )

    def _add_collectors(self) -> None:
        """The scrape-time collectors, once the parts they read exist."""
        assert self.peers is not None

        def image() -> MetadataImage:
            return self.applier.image

        self.end_offsets = RemoteEndOffsets(
            self.config.node_id,
            self.replicas,
            image,
            self.peers,
            lambda: committed_partitions(self.groups),
        )
        for collector in (
            PartitionCollector(
                self.replicas, image, lambda: self.controller, lambda: self.isr_changes
            ),
            GroupCollector(self.groups, self.replicas, self.end_offsets),
            ConnectionCollector(self.servers),
            BrokerStateCollector(
                self.purgatory,
                self.replicas,
                self.delays,
                lambda: self.transactions,
                lambda: self.share_partitions,
                self.fetch_sessions,
            ),
        ):
            self.metrics.add(collector)

    def console_connection(self) -> tuple[str, dict[str, object]]:
        """How a client in this process reaches this broker: the bootstrap address of
        its inter-broker listener (where it is bound, a wildcard host made loopback)
        and the client security options for that listener, under the names Kafka
        clients use."""
        return self._client_connection(
            self.config.inter_broker_listener(), with_broker_credentials=True
        )

    def console_caller_connection(self) -> tuple[str, dict[str, object]] | None:
        """How a console acting as each HTTP caller reaches this broker: a SASL listener
        (the inter-broker one if it is SASL, else the first) with its TLS options and
        no credentials (each caller brings their own); None without a SASL listener."""
        config = self.config
        names = [config.inter_broker_listener()] + [s.listener_name for s in self.servers]
        for name in names:
            if config.security_protocol(name) in SASL_PROTOCOLS:
                return self._client_connection(name, with_broker_credentials=False)
        return None

    def _client_connection(
        self, name: str, *, with_broker_credentials: bool
    ) -> tuple[str, dict[str, object]]:
        config = self.config
        server = next(s for s in self.servers if s.listener_name == name)
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(server.host, server.host)
        bootstrap = f"[{host}]:{server.port}" if ":" in host else f"{host}:{server.port}"
        protocol = server.security_protocol
        options: dict[str, object] = {"security_protocol": protocol}
        if protocol in TLS_SECURITY_PROTOCOLS:
            files = TlsFiles.of_listener(config, name)
            # On SASL_SSL the principal is the SASL user's, whatever certificate the
            # client shows (one is needed where ssl.client.auth=required).
            tls_options = {
                "ssl_cafile": files.truststore,
                "ssl_certfile": files.keystore,
                "ssl_keyfile": files.keystore,
                "ssl_password": files.key_password,
            }
            options.update({k: v for k, v in tls_options.items() if v is not None})
        if protocol in SASL_PROTOCOLS and with_broker_credentials:
            options["sasl_mechanism"] = config.sasl_mechanism_inter_broker_protocol
            options["sasl_plain_username"] = config.inter_broker_sasl_username or ""
            options["sasl_plain_password"] = config.inter_broker_sasl_password or ""
        return bootstrap, options

    async def _start_http(self) -> None:
        """Make the console's application (if given) and bind the HTTP listener
        (http.port=0: none). On a broker with SASL or ACLs the listener binds to
        loopback unless ``http.host`` is given, asks every request but the probes for
        credentials, and the console acts as each caller (no console without a SASL
        listener to connect through)."""
        config = self.config
        if config.http_port == 0:
            return
        secured = config.http_secured()
        app = None
        if self._console is not None:
            connection = self.console_caller_connection() if secured else self.console_connection()
            if connection is None:
                log.warning(
                    "no web console: on a broker with ACLs it acts as each HTTP caller "
                    "through a SASL listener, and this broker has none"
                )
            else:
                registry_urls = [] if self.schema_registry is None else self.schema_registry.urls
                app = self._console(*connection, secured, registry_urls)
        default_host = LOOPBACK_HOST if secured else self.servers[0].host
        host = config.http_host or default_host
        authenticator = None
        may_read_metrics: Callable[[HttpIdentity, str], bool] = everyone
        if not secured and config.http_metrics_bearer_token is not None:
            log.warning(
                "http.metrics.bearer.token is set, but a broker without SASL or ACLs asks "
                "for no credentials on HTTP: /metrics is open to anyone reaching %s",
                host,
            )
        if secured:
            assert self.store is not None
            authenticator = self._http_authenticator(self.store)
            may_read_metrics = metrics_access(Authorizer(config, self.store))
        http = HttpListener(
            host,
            config.http_port,
            self.metrics,
            lambda: self._not_ready,
            app,
            authenticator=authenticator,
            may_read_metrics=may_read_metrics,
            any_port_if_taken=not self._http_port_given(),
        )
        await http.start()
        self.http = http
        if http.port_taken is not None:
            log.warning(
                "the HTTP port %d on %s is taken (another broker on this machine?): "
                "metrics, health and the console are on %s instead; -o http.port=<port> "
                "picks one",
                http.port_taken,
                host,
                http.url,
            )
        log.info(
            "HTTP on %s (metrics, health, ready%s%s)",
            http.url,
            ", console" if http.has_console else "",
            "; credentials required but for health and ready" if secured else "",
        )

    def _http_port_given(self) -> bool:
        """Whether http.port was chosen (given as a setting, or set by a program to
        other than its default): a chosen port that is taken fails the start; the
        default one is replaced by a free one."""
        config = self.config
        return "http.port" in config.static_names or config.http_port != DEFAULT_PORT

    def _metadata_storage_error(self, error: BaseException) -> None:
        self.fatal.fail(
            f"opening partition logs in {self.data_dir} for new metadata failed: "
            f"{describe_os_error(error)}; {what_to_do(error)}"
        )

    def _replication_storage_error(self, error: BaseException) -> None:
        self.fatal.fail(
            f"copying from a partition leader into {self.data_dir} failed: "
            f"{describe_os_error(error)}; {what_to_do(error)}"
        )

    async def _start_serving(self) -> None:
        for server in self.servers:
            await server.start_serving()
        connect = self.config.zookeeper_connect
        log.info(
            "sluice broker %d ready on %s (data in %s, %d partition(s); %s; %s; %s)",
            self.config.node_id,
            ", ".join(
                f"{s.listener_name} {s.host}:{s.port} ({s.security_protocol})" for s in self.servers
            ),
            self.data_dir,
            len(self.replicas),
            "single node" if connect is None else f"cluster through ZooKeeper {connect}",
            "no Schema Registry"
            if self.schema_registry is None or not self.schema_registry.urls
            else f"Schema Registry {', '.join(self.schema_registry.urls)}",
            "no HTTP listener (http.port=0)" if self.http is None else f"HTTP {self.http.url}",
        )

    def _advertised_host(self, listening_host: str, index: int) -> str:
        """advertised.host, else the listening host; a listener with no host is
        advertised under this machine's name, as in Kafka."""
        if self.config.advertised_host:
            return self.config.advertised_host
        if self.config.listeners and not self.config.listeners[index].host:
            return socket.getfqdn()
        return listening_host

    async def _ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` (compacted) on a single node's first start. Its
        partition count must never change afterwards: groups are placed by hashing onto
        it. A cluster creates it on the first FindCoordinator instead, as Kafka does, so
        that its partitions spread over the brokers started by then."""
        existing = self.topics.get(OFFSETS_TOPIC)
        if existing is not None:
            if existing.partition_count != self.config.offsets_topic_num_partitions:
                log.warning(
                    "%s has %d partitions; offsets.topic.num.partitions=%d is ignored",
                    OFFSETS_TOPIC,
                    existing.partition_count,
                    self.config.offsets_topic_num_partitions,
                )
            return
        if self.config.zookeeper_connect is None:
            await self.topics.ensure_offsets_topic()

    def _follow_leadership(self, tasks: asyncio.TaskGroup) -> None:
        """Load the coordinators of internal partitions this broker came to lead,
        unload those it no longer leads (after each applied metadata)."""
        for hosting in self.hosting:
            hosting.follow(tasks)

    def request_stop(self) -> None:
        self._not_ready = "shutting down"
        self.shutdown_watch.begin()
        self._stopping.set()

    async def run(self) -> None:
        """Serve until :meth:`request_stop`, then shut down cleanly; after a fatal storage error,
        stop without the marker and raise :class:`BrokerFatalError`."""
        try:
            async with asyncio.TaskGroup() as tasks:
                self.maintenance.start(tasks)
                background = [
                    tasks.create_task(self.applier.run(), name="metadata applier"),
                    tasks.create_task(self.controller.run(), name="controller"),
                    tasks.create_task(self.isr_changes.run(), name="ISR changes"),
                    tasks.create_task(self.fetchers.run(), name="replica fetchers"),
                    tasks.create_task(self.delays.run(), name="delayed delivery"),
                    tasks.create_task(self.share_partitions.run(tasks), name="share locks"),
                    tasks.create_task(self.quotas.refresh_forever(), name="client quotas"),
                    tasks.create_task(self.end_offsets.run(), name="end offsets for lag"),
                ]
                self.applier.add_listener(lambda delta: self.controller.notify())
                self.applier.add_listener(lambda delta: self.fetchers.sync())
                self.applier.add_listener(lambda delta: self.delays.wake())
                self.applier.add_listener(lambda delta: self.share_partitions.unload_not_led())
                await self.applier.wait_for(
                    lambda image: self.config.node_id in image.brokers,
                    REGISTRATION_APPLIED_TIMEOUT_S,
                )
                self._not_ready = "loading the coordinators"
                await self._ensure_offsets_topic()
                # Load before serving: loading runs on the event loop in slices, so a
                # client served meanwhile waits a slice between two responses, and
                # groups of partitions not loaded yet got NOT_COORDINATOR although
                # FindCoordinator named this broker. librdkafka (2.10+) re-bootstraps
                # after a restart: Metadata and FindCoordinator pipelined on a
                # bootstrap connection that it drops as soon as the Metadata answer
                # arrives; a FindCoordinator answer a slice later is lost, and an
                # admin call waiting on it hangs until its timeout. Clients that
                # connect while we load are refused and retry.
                await self.groups.start(tasks, sorted(self.hosting[0].led_partitions()))
                await self.transactions.start(tasks, sorted(self.hosting[1].led_partitions()))
                await self.share_states.start(tasks, sorted(self.hosting[2].led_partitions()))
                registry = self.schema_registry
                assert registry is not None, "made by the start"
                await registry.runtime.start(tasks, sorted(registry.hosting.led_partitions()))
                self.applier.add_listener(lambda delta: self._follow_leadership(tasks))
                await self._start_serving()
                if not self._stopping.is_set():
                    self._not_ready = None
                await self._stopping.wait()
                self.shutdown_watch.step(
                    "stopping the coordinators, replica fetchers and log maintenance",
                    say=False,
                )
                self.groups.stop()
                self.transactions.stop()
                self.share_states.stop()
                registry.runtime.stop()
                self.maintenance.stop()
                for task in background:
                    task.cancel()
        finally:
            await self.shutdown()

    async def shutdown(self) -> None:
        """Each step named to the shutdown watch, which says the slow ones and ends the
        process at its bound (a broker whose ZooKeeper is gone must still stop)."""
        self._not_ready = "shutting down"
        self.shutdown_watch.begin()
        try:
            await self._shut_down()
        finally:
            self.shutdown_watch.broker_stopped()

    async def _shut_down(self) -> None:
        watch = self.shutdown_watch
        watch.step("closing the Kafka listeners and their connections", say=False)
        for server in self.servers:
            await server.stop()
        watch.step("closing the HTTP listener", say=False)
        await self._stop_http()
        if self.schema_registry is not None:
            await self.schema_registry.listener.stop()
        watch.step("closing the connections to other brokers", say=False)
        if self.peers is not None:
            await self.peers.close()
        watch.step("ending topic creations in flight", say=False)
        await self.topics.close()
        if self.schema_validation is not None:
            await self.schema_validation.close()
        self.produce_checks.close()
        if self.schema_registry is not None:
            await self.schema_registry.close()
        # Leave the cluster first: the controller moves leadership off this broker
        # while its logs close.
        assert self.store is not None, "shutdown follows a successful start"
        if self.config.zookeeper_connect is None:
            watch.step("closing the metadata store", say=False)
        else:
            watch.step("leaving the cluster: waiting for ZooKeeper to close the session")
        await self.store.close()
        if self.fatal.error is None:
            watch.step(
                f"flushing and closing {len(self.replicas)} partition log(s)",
                say=len(self.replicas) > 0,
            )
            self._close_logs()
        if self.fatal.error is not None:
            # The logs stay as they are: no fsync that could now succeed over lost pages,
            # no checkpoint, no marker. Process exit closes their files.
            self._release_lock()
            log.debug("sluice broker %d stopped on a fatal error", self.config.node_id)
            raise self.fatal.error
        watch.step("writing the clean-shutdown marker", say=False)
        try:
            write_clean_shutdown_marker(self.data_dir)
        except OSError as e:
            self._release_lock()
            raise BrokerFatalError(
                f"cannot write the clean-shutdown marker in {self.data_dir}: "
                f"{describe_os_error(e)}; the next start recovers the logs; {what_to_do(e)}"
            ) from None
        watch.marker_written()
        self._release_lock()
        log.info("sluice broker %d stopped cleanly", self.config.node_id)

    async def _stop_http(self) -> None:
        if self.http is not None:
            http, self.http = self.http, None
            await http.stop()

    def _close_logs(self) -> None:
        """Close (fsync, checkpoint) every log; the first failure is fatal and the logs
        after it are left for recovery."""
        for partition in list(self.replicas):
            try:
                partition.log.close()
            except (KafkaStorageError, OSError) as e:
                self.fatal.fail(
                    f"closing partition {partition.topic_partition} in "
                    f"{partition.log.directory} failed: {describe_os_error(e)}; the next "
                    f"start recovers the logs; {what_to_do(e)}"
                )
                return
        self.replicas.close_all()

    def _release_lock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def serve(config: BrokerConfig, console: ConsoleFactory | None = None) -> None:
    """Run a broker (with the web console ``console`` makes, if given) until SIGTERM or
    SIGINT; a second one during the shutdown ends the process at once.

    The handlers are Python's own (``signal.signal``), not the event loop's: they run
    in the main thread even while the loop is busy or stuck, so the second signal always
    works; the first only asks the loop to stop."""
    tune_allocator()
    watch = ShutdownWatch(config.shutdown_timeout_ms / 1000, exit=os._exit)
    broker = Broker(config, console=console, shutdown_watch=watch)
    await broker.start()
    loop = asyncio.get_running_loop()

    signals: list[int] = []
    """The stop signals received (the shutdown may have begun without one: a fatal
    error, a failed task)."""

    def on_signal(signum: int, _frame: object) -> None:
        signals.append(signum)
        if len(signals) > 1:
            watch.second_signal(signum)
            return
        watch.begin()
        log.info(
            "%s: shutting down (at most %.0f s; a second one exits at once)",
            signal.Signals(signum).name,
            watch.timeout_s,
        )
        loop.call_soon_threadsafe(broker.request_stop)

    # Kept to the process's end: a signal while the worker threads end exits at once.
    for signum in STOP_SIGNALS:
        signal.signal(signum, on_signal)
    try:
        await broker.run()
    finally:
        # The loop's executor ends its worker threads after this: bounded too.
        watch.step("waiting for the worker threads to end", say=False)
