"""The client's view of a cluster: bootstrap, metadata, and one connection per broker.

:class:`Cluster` is what every higher piece (admin, producer, consumer) holds. It
connects to the first reachable bootstrap address, asks for metadata, and opens (and
reuses) one :class:`BrokerConnection` per broker as requests are routed to partition
leaders or to the controller::

    bootstrap "h1:9092,h2:9092" ──► first reachable ──► Metadata ──► brokers, topics,
                                                                    leaders, epochs
    connection(node id) ──► reuse if open, else connect to that broker's host:port

Metadata is cached as the last :class:`ClusterMetadata` received; callers refresh it
when an answer says a leader moved.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from sluice.client.connection import (
    CONNECT_TIMEOUT_S_DEFAULT,
    REQUEST_TIMEOUT_S_DEFAULT,
    BrokerConnection,
    SaslSettings,
)
from sluice.client.errors import BrokerUnreachableError, ClientError
from sluice.client.messages import Request
from sluice.client.tls import TlsSettings
from sluice.common import errors
from sluice.common.errors import ErrorCode
from sluice.common.ids import NodeId, TopicPartition
from sluice.protocol.versions import ApiKey

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
"""Where ``sluice serve`` listens unless told otherwise."""

BOOTSTRAP_ATTEMPTS = 4
"""Rounds over the bootstrap addresses a client's start makes before it gives up on
addresses that refuse connections: a refusal is quick and certain, so the client says
so within a second instead of waiting out its request timeout (Kafka's clients retry
forever, logging; a newcomer's program should fail and say why)."""

BOOTSTRAP_BACKOFF_MS = 50
"""Wait after the first round of refused bootstrap connections (Kafka's
reconnect.backoff.ms default); it doubles each round up to BOOTSTRAP_BACKOFF_MS_MAX."""

BOOTSTRAP_BACKOFF_MS_MAX = 400
"""Longest wait between rounds: 50 + 100 + 200 ms in all with BOOTSTRAP_ATTEMPTS 4."""

NO_LEADER = -1
"""Leader id of a partition that has no leader right now."""


async def run_all(coroutines: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run ``coroutines`` concurrently (one per broker, typically) and wait for all.

    When one fails the others are cancelled and its error is raised as it is, not
    wrapped in an ``ExceptionGroup``, so callers catch ``KafkaError`` and
    ``ClientError`` as from a single request. Failures of any other kind (bugs) are
    raised as the group, with nothing hidden.
    """
    pending = list(coroutines)
    if len(pending) == 1:
        await pending[0]
        return
    try:
        async with asyncio.TaskGroup() as group:
            for coroutine in pending:
                group.create_task(coroutine)
    except BaseExceptionGroup as failures:
        if all(isinstance(e, ClientError | errors.KafkaError) for e in failures.exceptions):
            raise failures.exceptions[0] from None
        raise


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[tuple[str, int]]:
    """Parse ``"host:port,host:port"`` (or a list of ``host:port``) into addresses.

    IPv6 addresses are written in brackets: ``[::1]:9092``. Raises ``ValueError`` with a
    message that names the bad entry.
    """
    entries = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    addresses = []
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        host, separator, port_text = entry.rpartition(":")
        if not separator or not host:
            raise ValueError(f"bootstrap server {entry!r} is not host:port (e.g. 127.0.0.1:9092)")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        try:
            port = int(port_text)
        except ValueError:
            raise ValueError(
                f"bootstrap server {entry!r} has a port that is not a number"
            ) from None
        if not 0 < port < 65536:
            raise ValueError(f"bootstrap server {entry!r} has port {port}, outside 1-65535")
        addresses.append((host, port))
    if not addresses:
        raise ValueError("no bootstrap server given (expected host:port, e.g. 127.0.0.1:9092)")
    return addresses


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    """One broker as the cluster advertises it."""

    node_id: NodeId
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """Leadership and replicas of one partition."""

    topic: str
    partition: int
    leader_id: NodeId
    leader_epoch: int
    replica_ids: tuple[NodeId, ...]
    isr_ids: tuple[NodeId, ...]
    offline_replica_ids: tuple[NodeId, ...] = ()
    error_code: ErrorCode = ErrorCode.none

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A topic and its partitions (sorted by partition index)."""

    name: str
    partitions: tuple[PartitionMetadata, ...]
    is_internal: bool = False
    error_code: ErrorCode = ErrorCode.none
    topic_id: uuid.UUID | None = None
    """The topic's id (Metadata v10+; None from older brokers)."""

    @property
    def replication_factor(self) -> int:
        return max((len(p.replica_ids) for p in self.partitions), default=0)

    def partition(self, index: int) -> PartitionMetadata:
        """The partition ``index``; raises ``UnknownTopicOrPartition`` if absent."""
        for metadata in self.partitions:
            if metadata.partition == index:
                return metadata
        last = len(self.partitions) - 1
        raise errors.UnknownTopicOrPartition(
            f"topic {self.name!r} has no partition {index} (it has partitions 0-{last})"
            if self.partitions
            else f"topic {self.name!r} has no partitions"
        )


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """One Metadata answer, as plain data."""

    cluster_id: str | None
    controller_id: NodeId
    brokers: dict[NodeId, BrokerMetadata]
    topics: dict[str, TopicMetadata]

    def topic(self, name: str) -> TopicMetadata:
        """The topic ``name``; raises the topic's error (usually UnknownTopicOrPartition)."""
        metadata = self.topics.get(name)
        if metadata is None or metadata.error_code == ErrorCode.unknown_topic_or_partition:
            raise errors.UnknownTopicOrPartition(f"topic {name!r} does not exist")
        if metadata.error_code != ErrorCode.none:
            raise errors.for_code(metadata.error_code)(f"topic {name!r}")
        return metadata

    def leader(self, topic_partition: TopicPartition) -> NodeId:
        """Leader of a partition; raises when the topic, partition or leader is missing."""
        partition = self.topic(topic_partition.topic).partition(topic_partition.partition)
        if partition.leader_id == NO_LEADER:
            raise errors.for_code(ErrorCode.leader_not_available)(
                f"partition {topic_partition} has no leader right now"
            )
        return partition.leader_id

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        """The topic with id ``topic_id``, if this metadata holds it."""
        for metadata in self.topics.values():
            if metadata.topic_id == topic_id:
                return metadata
        return None


def _topic_id(value: uuid.UUID | None) -> uuid.UUID | None:
    return None if value is None or value.int == 0 else value


def parse_metadata(response: Any) -> ClusterMetadata:
    """A Metadata answer (any version) as :class:`ClusterMetadata`."""
    brokers = {
        int(b.node_id): BrokerMetadata(
            int(b.node_id), b.host, int(b.port), getattr(b, "rack", None)
        )
        for b in response.brokers
    }
    topics: dict[str, TopicMetadata] = {}
    for topic in response.topics:
        partitions = tuple(
            sorted(
                (
                    PartitionMetadata(
                        topic=topic.name,
                        partition=int(p.partition_index),
                        leader_id=int(p.leader_id),
                        leader_epoch=int(getattr(p, "leader_epoch", -1)),
                        replica_ids=tuple(int(n) for n in p.replica_nodes),
                        isr_ids=tuple(int(n) for n in p.isr_nodes),
                        offline_replica_ids=tuple(
                            int(n) for n in getattr(p, "offline_replicas", ())
                        ),
                        error_code=ErrorCode(p.error_code),
                    )
                    for p in topic.partitions
                ),
                key=lambda p: p.partition,
            )
        )
        topics[topic.name] = TopicMetadata(
            name=topic.name,
            partitions=partitions,
            is_internal=bool(getattr(topic, "is_internal", False)),
            error_code=ErrorCode(topic.error_code),
            topic_id=_topic_id(getattr(topic, "topic_id", None)),
        )
    return ClusterMetadata(
        cluster_id=getattr(response, "cluster_id", None),
        controller_id=int(getattr(response, "controller_id", -1)),
        brokers=brokers,
        topics=topics,
    )


class Cluster:
    """Connections to the brokers of one cluster, found from bootstrap addresses.

    ::

        async with Cluster("127.0.0.1:9092") as cluster:
            metadata = await cluster.metadata(["orders"])
            connection = await cluster.leader_connection(TopicPartition("orders", 0))
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] = DEFAULT_BOOTSTRAP,
        *,
        client_id: str = "sluice",
        connect_timeout_s: float = CONNECT_TIMEOUT_S_DEFAULT,
        request_timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT,
        sasl: SaslSettings | None = None,
        tls: TlsSettings | None = None,
    ) -> None:
        """Parse the bootstrap addresses (``ValueError`` if malformed); connect lazily.
        With ``tls``, every connection is TLS (an SSL listener; its files are checked
        now, ``ValueError`` if unusable); with ``sasl``, every connection authenticates
        (SASL_PLAINTEXT; both: SASL_SSL)."""
        self.bootstrap_addresses = parse_bootstrap(bootstrap)
        self.sasl = sasl
        self.tls = tls
        if tls is not None:
            tls.context()  # unusable files fail here rather than at the first connect
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._connect_lock = asyncio.Lock()
        self._metadata: ClusterMetadata | None = None
        self._closed = False

    @property
    def cached_metadata(self) -> ClusterMetadata | None:
        """The last metadata received, or None before the first request."""
        return self._metadata

    async def _connection_to(self, host: str, port: int) -> BrokerConnection:
        assert not self._closed, "the Cluster is closed"
        async with self._connect_lock:
            existing = self._connections.get((host, port))
            if existing is not None and existing.is_usable:
                return existing
            if existing is not None:
                await existing.close()
            connection = await BrokerConnection.connect(
                host,
                port,
                client_id=self.client_id,
                connect_timeout_s=self.connect_timeout_s,
                request_timeout_s=self.request_timeout_s,
                sasl=self.sasl,
                tls=self.tls,
            )
            self._connections[(host, port)] = connection
            return connection

    async def any_connection(self, *, attempts: int = 1) -> BrokerConnection:
        """A usable connection to some broker: an open one, else the first bootstrap
        address that answers, trying them all up to ``attempts`` times (backing off
        between rounds, and not again after a round in which an attempt timed out).
        Raises a :class:`BrokerUnreachableError` naming every address and why it failed
        if none answers."""
        assert attempts >= 1
        for connection in self._connections.values():
            if connection.is_usable:
                return connection
        backoff_ms = BOOTSTRAP_BACKOFF_MS
        for attempt in range(1, attempts + 1):
            failures: list[BrokerUnreachableError] = []
            for host, port in self.bootstrap_addresses:
                try:
                    return await self._connection_to(host, port)
                except BrokerUnreachableError as e:
                    failures.append(e)
            if attempt == attempts or any(f.timed_out or f.host_unknown for f in failures):
                raise BrokerUnreachableError.of_bootstrap(failures, attempt)
            await asyncio.sleep(backoff_ms / 1000)
            backoff_ms = min(2 * backoff_ms, BOOTSTRAP_BACKOFF_MS_MAX)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def bootstrap(self) -> ClusterMetadata:
        """Connect to a bootstrap broker and read the cluster's brokers, as a client's
        ``start()`` does: addresses that refuse connections are tried again
        :data:`BOOTSTRAP_ATTEMPTS` times over a fraction of a second (a broker starting
        alongside gets that long), then a :class:`BrokerUnreachableError` names each."""
        await self.any_connection(attempts=BOOTSTRAP_ATTEMPTS)
        return await self.metadata([])

    async def connection(self, node_id: NodeId) -> BrokerConnection:
        """A connection to broker ``node_id`` as known from the last metadata."""
        metadata = self._metadata or await self.metadata([])
        broker = metadata.brokers.get(node_id)
        if broker is None:
            metadata = await self.metadata([])
            broker = metadata.brokers.get(node_id)
        if broker is None:
            raise errors.for_code(ErrorCode.broker_not_available)(
                f"the cluster has no broker with id {node_id}"
            )
        return await self._connection_to(broker.host, broker.port)

    async def controller_connection(self) -> BrokerConnection:
        """A connection to the controller (admin requests go there); any broker if the
        cluster names no controller."""
        metadata = self._metadata or await self.metadata([])
        if metadata.controller_id in metadata.brokers:
            return await self.connection(metadata.controller_id)
        return await self.any_connection()

    async def leader_connection(self, topic_partition: TopicPartition) -> BrokerConnection:
        """A connection to the leader of ``topic_partition`` per the cached metadata
        (fetched first if the topic is not in it)."""
        metadata = self._metadata
        if metadata is None or topic_partition.topic not in metadata.topics:
            metadata = await self.metadata([topic_partition.topic])
        return await self.connection(metadata.leader(topic_partition))

    async def metadata(
        self,
        topics: Iterable[str] | None = None,
        *,
        allow_auto_topic_creation: bool = False,
    ) -> ClusterMetadata:
        """Ask for metadata of ``topics`` (``None``: every topic; ``[]``: brokers only).

        Topics that do not exist come back with error code UNKNOWN_TOPIC_OR_PARTITION in
        their :class:`TopicMetadata`; :meth:`ClusterMetadata.topic` raises it.
        """
        connection = await self.any_connection()
        names = None if topics is None else [{"name": name} for name in topics]
        response = await connection.request(
            Request(
                ApiKey.METADATA,
                {
                    "topics": names,
                    "allow_auto_topic_creation": allow_auto_topic_creation,
                    "include_cluster_authorized_operations": False,
                    "include_topic_authorized_operations": False,
                },
            )
        )
        fresh = parse_metadata(response)
        if self._metadata is not None and topics is not None:
            # Keep what we knew of other topics; a partial answer only updates its own.
            merged = dict(self._metadata.topics)
            merged.update(fresh.topics)
            fresh = ClusterMetadata(fresh.cluster_id, fresh.controller_id, fresh.brokers, merged)
        self._metadata = fresh
        return fresh

    async def close(self) -> None:
        """Close every connection. The cluster object cannot be used afterwards."""
        self._closed = True
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            await connection.close()

    async def __aenter__(self) -> Cluster:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
