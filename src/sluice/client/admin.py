"""Administration: topics, configs, offsets and consumer groups, over the Kafka admin APIs.

Each method sends one kind of request to the broker that must answer it (the controller
for topic creation and deletion, partition leaders for offsets, any broker for configs,
the group's coordinator for groups, see :mod:`sluice.client.groups`) and turns
per-resource error codes into the matching :class:`~sluice.common.errors.KafkaError`,
with the resource named in the message.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from sluice.client.admin_consumer_groups import describe_consumer_group
from sluice.client.cluster import BrokerMetadata, Cluster, TopicMetadata, run_all
from sluice.client.connection import BrokerConnection
from sluice.client.errors import ConnectionClosedError
from sluice.client.groups import (
    CONSUMER_PROTOCOL_TYPE,
    COORDINATOR_RETRY_CODES,
    COORDINATOR_TIMEOUT_S_DEFAULT,
    GroupCoordinators,
    GroupDescription,
    GroupListing,
    GroupState,
    MalformedAssignmentError,
    MemberDescription,
    OffsetAndMetadata,
    decode_consumer_assignment,
    raise_for_group,
    retry_coordinator_errors,
)
from sluice.client.messages import Request
from sluice.common import errors
from sluice.common.errors import ErrorCode
from sluice.common.ids import NodeId, TopicPartition
from sluice.protocol.versions import ApiKey

ADMIN_TIMEOUT_MS_DEFAULT = 30_000
"""How long the broker may take to create or delete topics before answering."""

RESOURCE_TYPE_TOPIC = 2
RESOURCE_TYPE_BROKER = 4
RESOURCE_TYPE_GROUP = 32

NO_OFFSET = -1
"""ListOffsets' answer when no record matches (e.g. a timestamp after the last record);
also OffsetFetch's committed offset of a partition the group has not committed."""

SIMPLE_COMMIT_GENERATION_ID = -1
SIMPLE_COMMIT_MEMBER_ID = ""
"""An OffsetCommit outside any generation: a "simple consumer" or an administrator.
Coordinators accept it only while the group has no members."""

LIST_GROUPS_STATE_VERSION = 4
"""First ListGroups version whose answer carries each group's state."""

ACTIVE_MEMBER_CODES = frozenset(
    {
        ErrorCode.unknown_member_id,
        ErrorCode.illegal_generation,
        ErrorCode.rebalance_in_progress,
        ErrorCode.fenced_instance_id,
    }
)
"""How a coordinator refuses a commit without a generation while the group has members."""

DESCRIBE_CLUSTER_BROKERS = 1
"""DescribeCluster's endpoint type for brokers (2 asks a KRaft controller for its peers)."""

DELETE_RECORDS_TO_HIGH_WATERMARK = -1
"""The DeleteRecords offset that stands for "every record below the high watermark"."""


class OffsetSpec(IntEnum):
    """Which offset ListOffsets asks for; any value >= 0 is a timestamp in ms."""

    LATEST = -1
    """The log end offset (the high watermark for consumers): where the next record goes."""
    EARLIEST = -2
    """The log start offset: the oldest record still stored."""


class ElectionType(IntEnum):
    """Which leader an election picks (ElectLeaders, KIP-460)."""

    PREFERRED = 0
    """The first replica, if it is alive and in sync."""
    UNCLEAN = 1
    """Any live replica, in sync or not, for partitions that have no leader."""


class ConfigOperation(IntEnum):
    """IncrementalAlterConfigs operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigSource(IntEnum):
    """Where a config's value comes from (DescribeConfigs v1+)."""

    UNKNOWN = 0
    TOPIC = 1
    """DYNAMIC_TOPIC_CONFIG: set on the topic itself."""
    DYNAMIC_BROKER = 2
    DYNAMIC_DEFAULT_BROKER = 3
    STATIC_BROKER = 4
    """The broker's settings file or command line."""
    DEFAULT = 5
    """The built-in default."""
    DYNAMIC_BROKER_LOGGER = 6

    @classmethod
    def of(cls, value: int) -> ConfigSource:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create. ``configs`` are overrides of the broker's topic defaults."""

    name: str
    partitions: int = 1
    replication_factor: int = 1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One incremental config change: set ``name`` to ``value``, or delete the override."""

    name: str
    operation: ConfigOperation = ConfigOperation.SET
    value: str | None = None

    @classmethod
    def set(cls, name: str, value: str) -> AlterConfigOp:
        return cls(name, ConfigOperation.SET, value)

    @classmethod
    def delete(cls, name: str) -> AlterConfigOp:
        return cls(name, ConfigOperation.DELETE, None)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """A config value as DescribeConfigs reports it."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool = False
    is_sensitive: bool = False

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT


@dataclass(frozen=True, slots=True)
class ListedOffset:
    """One ListOffsets answer: the offset, and the timestamp of that record if asked by
    time (-1 otherwise)."""

    offset: int
    timestamp_ms: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """The cluster as a DescribeCluster (or, from older brokers, Metadata) answer
    describes it."""

    cluster_id: str | None
    controller_id: NodeId
    """-1 when the cluster names no controller."""
    brokers: tuple[BrokerMetadata, ...]
    """Sorted by node id."""

    @property
    def controller(self) -> BrokerMetadata | None:
        for broker in self.brokers:
            if broker.node_id == self.controller_id:
                return broker
        return None


@dataclass(frozen=True, slots=True)
class ReplicaLogInfo:
    """One partition replica in a log directory."""

    size_bytes: int
    """Bytes of its segment files."""
    offset_lag: int
    """How far its log end is behind the high watermark (0 on a leader)."""
    is_future: bool = False
    """A copy being moved to this directory (AlterReplicaLogDirs), not the live one."""


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log directory of a broker (DescribeLogDirs)."""

    path: str
    replicas: dict[TopicPartition, ReplicaLogInfo]
    total_bytes: int | None = None
    """Size of the volume holding the directory; None from brokers older than Kafka 3.3."""
    usable_bytes: int | None = None
    """Bytes still free for the broker on that volume; None as for ``total_bytes``."""
    error: errors.KafkaError | None = None
    """Why the directory could not be described (it is offline, say)."""


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A reassignment in progress (ListPartitionReassignments)."""

    replicas: tuple[NodeId, ...]
    adding_replicas: tuple[NodeId, ...]
    removing_replicas: tuple[NodeId, ...]


def _partitions_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic_partition in partitions:
        by_topic[topic_partition.topic].append(topic_partition.partition)
    return dict(by_topic)


def _log_dir(result: Any) -> LogDirDescription:
    total_bytes = int(getattr(result, "total_bytes", -1))
    usable_bytes = int(getattr(result, "usable_bytes", -1))
    code = int(result.error_code)
    return LogDirDescription(
        path=result.log_dir,
        replicas={
            TopicPartition(topic.name, int(partition.partition_index)): ReplicaLogInfo(
                size_bytes=int(partition.partition_size),
                offset_lag=int(partition.offset_lag),
                is_future=bool(partition.is_future_key),
            )
            for topic in result.topics
            for partition in topic.partitions
        },
        total_bytes=None if total_bytes < 0 else total_bytes,
        usable_bytes=None if usable_bytes < 0 else usable_bytes,
        error=None
        if code == ErrorCode.none
        else errors.for_code(code)(f"log directory {result.log_dir}"),
    )


def _raise_for(code: int, message: str | None, context: str) -> None:
    if code == ErrorCode.none:
        return
    detail = f"{context}: {message}" if message else context
    raise errors.for_code(code)(detail)


class Admin:
    """Topic, config and offset administration through a :class:`Cluster`.

    ::

        async with Cluster(bootstrap) as cluster:
            admin = Admin(cluster)
            await admin.create_topics([NewTopic("orders", partitions=3)])
    """

    def __init__(
        self, cluster: Cluster, *, coordinator_timeout_s: float = COORDINATOR_TIMEOUT_S_DEFAULT
    ) -> None:
        """``coordinator_timeout_s`` bounds the retries of group requests while a
        group's coordinator is unavailable, loading or moving."""
        self.cluster = cluster
        self.coordinators = GroupCoordinators(cluster, timeout_s=coordinator_timeout_s)

    # ── topics ─────────────────────────────────────────────────────────────────────

    async def list_topics(self, *, include_internal: bool = False) -> list[TopicMetadata]:
        """Every topic, sorted by name; internal topics only when asked for."""
        metadata = await self.cluster.metadata(None)
        return sorted(
            (
                topic
                for topic in metadata.topics.values()
                if topic.error_code == ErrorCode.none
                and (include_internal or not topic.is_internal)
            ),
            key=lambda topic: topic.name,
        )

    async def describe_topic(self, name: str) -> TopicMetadata:
        """Partitions, leaders, epochs and ISR of one topic; raises
        ``UnknownTopicOrPartition`` if it does not exist (it is never auto-created)."""
        metadata = await self.cluster.metadata([name], allow_auto_topic_creation=False)
        return metadata.topic(name)

    async def create_topics(
        self,
        topics: Sequence[NewTopic],
        *,
        timeout_ms: int = ADMIN_TIMEOUT_MS_DEFAULT,
        validate_only: bool = False,
    ) -> None:
        """Create topics; raises the error of the first topic the broker refused."""
        connection = await self.cluster.controller_connection()
        response = await connection.request(
            Request(
                ApiKey.CREATE_TOPICS,
                {
                    "topics": [
                        {
                            "name": topic.name,
                            "num_partitions": topic.partitions,
                            "replication_factor": topic.replication_factor,
                            "assignments": [],
                            "configs": [
                                {"name": name, "value": value}
                                for name, value in topic.configs.items()
                            ],
                        }
                        for topic in topics
                    ],
                    "timeout": datetime.timedelta(milliseconds=timeout_ms),
                    "validate_only": validate_only,
                },
            ),
            timeout_s=self._request_timeout_s(timeout_ms),
        )
        for result in response.topics:
            _raise_for(
                result.error_code, getattr(result, "error_message", None), f"topic {result.name!r}"
            )

    async def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int = ADMIN_TIMEOUT_MS_DEFAULT
    ) -> None:
        """Delete topics; raises the error of the first topic the broker refused."""
        connection = await self.cluster.controller_connection()
        response = await connection.request(
            Request(
                ApiKey.DELETE_TOPICS,
                {
                    "topic_names": list(names),
                    "timeout": datetime.timedelta(milliseconds=timeout_ms),
                },
            ),
            timeout_s=self._request_timeout_s(timeout_ms),
        )
        for result in response.responses:
            context = f"topic {result.name!r}"
            if result.error_code == ErrorCode.unknown_topic_or_partition:
                context += " does not exist"
            _raise_for(result.error_code, getattr(result, "error_message", None), context)

    async def create_partitions(
        self,
        new_totals: Mapping[str, int],
        *,
        validate_only: bool = False,
        timeout_ms: int = ADMIN_TIMEOUT_MS_DEFAULT,
    ) -> None:
        """Grow topics to the given total partition counts (``{"orders": 6}``).

        Partition counts only grow: asking for fewer or as many as a topic has raises
        ``InvalidPartitions``. Raises the error of the first topic the broker refused
        (``UnknownTopicOrPartition`` for a topic that does not exist). With
        ``validate_only`` the broker checks the request and changes nothing.
        """
        if not new_totals:
            return
        connection = await self.cluster.controller_connection()
        payload = Request(
            ApiKey.CREATE_PARTITIONS,
            {
                "topics": [
                    {"name": topic, "count": count, "assignments": None}
                    for topic, count in new_totals.items()
                ],
                "timeout": datetime.timedelta(milliseconds=timeout_ms),
                "validate_only": validate_only,
            },
        )
        response = await connection.request(payload, timeout_s=self._request_timeout_s(timeout_ms))
        for result in response.results:
            _raise_for(
                result.error_code, getattr(result, "error_message", None), f"topic {result.name!r}"
            )
        # The next lookups (leaders, partition counts) must see the new partitions.
        await self.cluster.metadata(list(new_totals))

    async def delete_records(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        timeout_ms: int = ADMIN_TIMEOUT_MS_DEFAULT,
    ) -> dict[TopicPartition, int]:
        """Delete the records below ``offset`` in each partition, asking its leader;
        :data:`DELETE_RECORDS_TO_HIGH_WATERMARK` (-1) deletes every record written so far.

        Returns each partition's new low watermark (its log start offset: where a
        consumer starting from the earliest offset now begins). An offset beyond the high
        watermark raises ``OffsetOutOfRange``; the first refusal is raised.
        """
        if not offsets:
            return {}
        metadata = await self.cluster.metadata({tp.topic for tp in offsets})
        by_leader: dict[NodeId, dict[TopicPartition, int]] = defaultdict(dict)
        for topic_partition, offset in offsets.items():
            by_leader[metadata.leader(topic_partition)][topic_partition] = offset
        results: dict[TopicPartition, int] = {}
        await run_all(
            self._delete_records_on(leader, leader_offsets, timeout_ms, results)
            for leader, leader_offsets in by_leader.items()
        )
        return {topic_partition: results[topic_partition] for topic_partition in offsets}

    async def _delete_records_on(
        self,
        leader: NodeId,
        offsets: Mapping[TopicPartition, int],
        timeout_ms: int,
        results: dict[TopicPartition, int],
    ) -> None:
        connection = await self.cluster.connection(leader)
        by_topic: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for topic_partition, offset in offsets.items():
            by_topic[topic_partition.topic].append((topic_partition.partition, offset))
        payload = Request(
            ApiKey.DELETE_RECORDS,
            {
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": index, "offset": offset}
                            for index, offset in partitions
                        ],
                    }
                    for topic, partitions in by_topic.items()
                ],
                "timeout": datetime.timedelta(milliseconds=timeout_ms),
            },
        )
        response = await connection.request(payload, timeout_s=self._request_timeout_s(timeout_ms))
        for topic in response.topics:
            for partition in topic.partitions:
                topic_partition = TopicPartition(topic.name, int(partition.partition_index))
                _raise_for(
                    partition.error_code,
                    None,
                    f"deleting records of {topic_partition} before offset "
                    f"{offsets.get(topic_partition)}",
                )
                results[topic_partition] = int(partition.low_watermark)
        missing = set(offsets) - set(results)
        if missing:
            raise errors.UnknownServerError(
                f"DeleteRecords answer from broker at {connection.address} does not mention "
                + ", ".join(sorted(str(tp) for tp in missing))
            )

    async def describe_cluster(self) -> ClusterDescription:
        """The cluster id, the controller and every broker.

        Asks with DescribeCluster where the broker serves it, with a Metadata request for
        no topics otherwise (Kafka before 2.8)."""
        connection = await self.cluster.any_connection()
        if not connection.supports(ApiKey.DESCRIBE_CLUSTER):
            metadata = await self.cluster.metadata([])
            return ClusterDescription(
                cluster_id=metadata.cluster_id,
                controller_id=metadata.controller_id,
                brokers=tuple(sorted(metadata.brokers.values(), key=lambda b: b.node_id)),
            )
        response = await connection.request(
            Request(
                ApiKey.DESCRIBE_CLUSTER,
                {
                    "include_cluster_authorized_operations": False,
                    "endpoint_type": DESCRIBE_CLUSTER_BROKERS,
                    "include_fenced_brokers": False,
                },
            )
        )
        _raise_for(response.error_code, response.error_message, "describing the cluster")
        brokers = sorted(
            (
                BrokerMetadata(int(b.broker_id), b.host, int(b.port), b.rack)
                for b in response.brokers
            ),
            key=lambda b: b.node_id,
        )
        return ClusterDescription(
            cluster_id=response.cluster_id,
            controller_id=int(response.controller_id),
            brokers=tuple(brokers),
        )

    async def describe_log_dirs(
        self,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        brokers: Iterable[NodeId] | None = None,
    ) -> dict[NodeId, list[LogDirDescription]]:
        """Each broker's log directories: their volume's size and free bytes, and the
        size on disk of every partition replica in them.

        ``partitions`` None describes every replica; otherwise only those named (a
        broker leaves out the ones it does not host). ``brokers`` None asks every broker.
        """
        if brokers is None:
            metadata = await self.cluster.metadata([])
            node_ids = sorted(metadata.brokers)
        else:
            node_ids = list(brokers)
        topics = (
            None
            if partitions is None
            else [
                {"topic": topic, "partitions": indexes}
                for topic, indexes in _partitions_by_topic(partitions).items()
            ]
        )
        described: dict[NodeId, list[LogDirDescription]] = {}

        async def describe_on(node_id: NodeId) -> None:
            connection = await self.cluster.connection(node_id)
            response = await connection.request(
                Request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": topics})
            )
            _raise_for(
                getattr(response, "error_code", ErrorCode.none),
                None,
                f"describing the log directories of broker {node_id}",
            )
            described[node_id] = [_log_dir(result) for result in response.results]

        await run_all(describe_on(node_id) for node_id in node_ids)
        return {node_id: described[node_id] for node_id in node_ids}

    async def elect_leaders(
        self,
        election_type: ElectionType = ElectionType.PREFERRED,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int = ADMIN_TIMEOUT_MS_DEFAULT,
    ) -> dict[TopicPartition, errors.KafkaError | None]:
        """Elect leaders (the preferred replica, or any live one for leaderless
        partitions with UNCLEAN) and return each partition's outcome: None when a new
        leader was elected, else the error, ``ElectionNotNeeded`` when the right leader
        already leads. ``partitions`` None means every partition; the answer then lists
        only the partitions where something was done or failed.

        An unknown ``election_type`` or a refused request raises the broker's error.
        """
        topic_partitions = (
            None
            if partitions is None
            else [
                {"topic": topic, "partitions": indexes}
                for topic, indexes in _partitions_by_topic(partitions).items()
            ]
        )
        connection = await self.cluster.controller_connection()
        response = await connection.request(
            Request(
                ApiKey.ELECT_LEADERS,
                {
                    "election_type": int(election_type),
                    "topic_partitions": topic_partitions,
                    "timeout": datetime.timedelta(milliseconds=timeout_ms),
                },
            ),
            timeout_s=self._request_timeout_s(timeout_ms),
        )
        _raise_for(getattr(response, "error_code", ErrorCode.none), None, "electing leaders")
        outcomes: dict[TopicPartition, errors.KafkaError | None] = {}
        for result in response.replica_election_results:
            for partition in result.partition_result:
                topic_partition = TopicPartition(result.topic, int(partition.partition_id))
                code = int(partition.error_code)
                outcomes[topic_partition] = (
                    None
                    if code == ErrorCode.none
                    else errors.for_code(code)(
                        f"partition {topic_partition}: {partition.error_message}"
                        if partition.error_message
                        else f"partition {topic_partition}"
                    )
                )
        return outcomes

    async def alter_partition_reassignments(
        self, targets: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, errors.KafkaError | None]:
        """Move partitions to the target replicas (None cancels a reassignment in
        progress); each partition's outcome: None when accepted (the move then goes on
        in the cluster), else the error."""
        by_topic: dict[str, list[tuple[int, Sequence[int] | None]]] = defaultdict(list)
        for topic_partition, target in targets.items():
            by_topic[topic_partition.topic].append((topic_partition.partition, target))
        connection = await self.cluster.controller_connection()
        response = await connection.request(
            Request(
                ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                {
                    "timeout": datetime.timedelta(milliseconds=ADMIN_TIMEOUT_MS_DEFAULT),
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {
                                    "partition_index": index,
                                    "replicas": None if target is None else list(target),
                                }
                                for index, target in entries
                            ],
                        }
                        for topic, entries in by_topic.items()
                    ],
                },
            )
        )
        _raise_for(response.error_code, response.error_message, "reassigning partitions")
        return {
            TopicPartition(topic.name, int(partition.partition_index)): (
                None
                if partition.error_code == ErrorCode.none
                else errors.for_code(partition.error_code)(partition.error_message or "")
            )
            for topic in response.responses
            for partition in topic.partitions
        }

    async def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress, of ``partitions`` or (None) of every partition."""
        topics = (
            None
            if partitions is None
            else [
                {"name": topic, "partition_indexes": indexes}
                for topic, indexes in _partitions_by_topic(partitions).items()
            ]
        )
        connection = await self.cluster.controller_connection()
        response = await connection.request(
            Request(
                ApiKey.LIST_PARTITION_REASSIGNMENTS,
                {
                    "topics": topics,
                    "timeout": datetime.timedelta(milliseconds=ADMIN_TIMEOUT_MS_DEFAULT),
                },
            )
        )
        _raise_for(response.error_code, response.error_message, "listing reassignments")
        return {
            TopicPartition(topic.name, int(partition.partition_index)): PartitionReassignment(
                replicas=tuple(int(n) for n in partition.replicas),
                adding_replicas=tuple(int(n) for n in partition.adding_replicas),
                removing_replicas=tuple(int(n) for n in partition.removing_replicas),
            )
            for topic in response.topics
            for partition in topic.partitions
        }

    def _request_timeout_s(self, timeout_ms: int) -> float:
        """Wait for the answer a little longer than the broker is allowed to take."""
        return max(self.cluster.request_timeout_s, timeout_ms / 1000 + 5.0)

    # ── configs ────────────────────────────────────────────────────────────────────

    async def describe_topic_configs(self, topic: str) -> dict[str, ConfigEntry]:
        """Every config of ``topic`` with its value and source, by name."""
        return await self.describe_configs(RESOURCE_TYPE_TOPIC, topic)

    async def describe_configs(self, resource_type: int, name: str) -> dict[str, ConfigEntry]:
        """Every config of one resource (topic, or broker by its id as a string). A
        broker's own configs are asked of that broker, which alone answers for them, as
        Kafka's admin client does; raises ``BrokerNotAvailable`` for an id the cluster
        does not have."""
        connection = await self._connection_for(resource_type, name)
        response = await connection.request(
            Request(
                ApiKey.DESCRIBE_CONFIGS,
                {
                    "resources": [
                        {
                            "resource_type": resource_type,
                            "resource_name": name,
                            "configuration_keys": None,
                        }
                    ],
                    "include_synonyms": False,
                    "include_documentation": False,
                },
            )
        )
        entries: dict[str, ConfigEntry] = {}
        for result in response.results:
            _raise_for(result.error_code, result.error_message, self._resource(resource_type, name))
            for config in result.configs:
                entries[config.name] = ConfigEntry(
                    name=config.name,
                    value=config.value,
                    source=ConfigSource.of(int(config.config_source)),
                    read_only=bool(config.read_only),
                    is_sensitive=bool(config.is_sensitive),
                )
        return entries

    async def alter_topic_configs(
        self, topic: str, operations: Sequence[AlterConfigOp], *, validate_only: bool = False
    ) -> None:
        """Apply incremental changes to a topic's config overrides (other keys stay)."""
        await self.incremental_alter_configs(
            RESOURCE_TYPE_TOPIC, topic, operations, validate_only=validate_only
        )

    async def incremental_alter_configs(
        self,
        resource_type: int,
        name: str,
        operations: Sequence[AlterConfigOp],
        *,
        validate_only: bool = False,
    ) -> None:
        """IncrementalAlterConfigs on one resource; raises the broker's error if any. A
        broker's own configs are changed through that broker, as Kafka's admin client
        does (a cluster-wide default, named "", through any)."""
        connection = await self._connection_for(resource_type, name)
        response = await connection.request(
            Request(
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                {
                    "resources": [
                        {
                            "resource_type": resource_type,
                            "resource_name": name,
                            "configs": [
                                {
                                    "name": op.name,
                                    "config_operation": int(op.operation),
                                    "value": op.value,
                                }
                                for op in operations
                            ],
                        }
                    ],
                    "validate_only": validate_only,
                },
            )
        )
        for result in response.responses:
            _raise_for(result.error_code, result.error_message, self._resource(resource_type, name))

    async def _connection_for(self, resource_type: int, name: str) -> BrokerConnection:
        """Where a config request about one resource goes: a broker's own configs to
        that broker (``BrokerNotAvailable`` for an id the cluster does not have), the
        rest to any broker."""
        if resource_type == RESOURCE_TYPE_BROKER and name.isdigit():
            return await self.cluster.connection(int(name))
        return await self.cluster.any_connection()

    @staticmethod
    def _resource(resource_type: int, name: str) -> str:
        if resource_type == RESOURCE_TYPE_TOPIC:
            return f"topic {name!r}"
        if resource_type == RESOURCE_TYPE_BROKER:
            return f"broker {name}"
        if resource_type == RESOURCE_TYPE_GROUP:
            return f"group {name!r}"
        return f"resource {name!r} (type {resource_type})"

    # ── offsets ────────────────────────────────────────────────────────────────────

    async def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        spec: OffsetSpec | int,
        *,
        read_committed: bool = False,
    ) -> dict[TopicPartition, ListedOffset]:
        """The offset matching ``spec`` in each partition, asking each partition's leader.

        ``spec`` is :attr:`OffsetSpec.EARLIEST`, :attr:`OffsetSpec.LATEST`, or a timestamp
        in ms (the first offset whose record timestamp is at least that, or
        :data:`NO_OFFSET` when there is none).
        """
        wanted = list(partitions)
        metadata = await self.cluster.metadata({tp.topic for tp in wanted})
        by_leader: dict[NodeId, list[TopicPartition]] = defaultdict(list)
        for topic_partition in wanted:
            by_leader[metadata.leader(topic_partition)].append(topic_partition)
        results: dict[TopicPartition, ListedOffset] = {}
        await run_all(
            self._list_offsets_from(leader, leader_partitions, int(spec), read_committed, results)
            for leader, leader_partitions in by_leader.items()
        )
        return results

    async def _list_offsets_from(
        self,
        leader: NodeId,
        partitions: Sequence[TopicPartition],
        timestamp: int,
        read_committed: bool,
        results: dict[TopicPartition, ListedOffset],
    ) -> None:
        connection = await self.cluster.connection(leader)
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic_partition in partitions:
            by_topic[topic_partition.topic].append(topic_partition.partition)
        response = await connection.request(
            Request(
                ApiKey.LIST_OFFSETS,
                {
                    "replica_id": -1,
                    "isolation_level": 1 if read_committed else 0,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {"partition_index": index, "timestamp": timestamp}
                                for index in indexes
                            ],
                        }
                        for topic, indexes in by_topic.items()
                    ],
                },
            )
        )
        for topic in response.topics:
            for partition in topic.partitions:
                topic_partition = TopicPartition(topic.name, int(partition.partition_index))
                _raise_for(partition.error_code, None, f"partition {topic_partition}")
                results[topic_partition] = ListedOffset(
                    offset=int(partition.offset),
                    timestamp_ms=int(partition.timestamp),
                    leader_epoch=int(getattr(partition, "leader_epoch", -1)),
                )

    # ── consumer groups ────────────────────────────────────────────────────────────

    async def find_coordinator(self, group_id: str) -> BrokerMetadata:
        """The broker coordinating ``group_id`` (retried while none is available)."""
        return await self.coordinators.find(group_id)

    async def list_groups(self) -> list[GroupListing]:
        """Every group of every broker, sorted by id, with its state.

        Each broker lists the groups it coordinates. ListGroups v4+ answers with their
        states; an older broker is asked for them (DescribeGroups) on the same
        connection, and a group it no longer coordinates by then is listed with state
        ``Unknown``.
        """
        metadata = await self.cluster.metadata([])
        listings: list[GroupListing] = []
        await run_all(self._list_groups_on(node_id, listings) for node_id in metadata.brokers)
        return sorted(listings, key=lambda listing: listing.group_id)

    async def _list_groups_on(self, node_id: NodeId, listings: list[GroupListing]) -> None:
        connection = await self.cluster.connection(node_id)

        async def list_and_describe() -> list[GroupListing]:
            response = await connection.request(Request(ApiKey.LIST_GROUPS, {"states_filter": []}))
            _raise_for(response.error_code, None, f"listing the groups of broker {node_id}")
            if connection.version_for(ApiKey.LIST_GROUPS) >= LIST_GROUPS_STATE_VERSION:
                return [
                    GroupListing(
                        group.group_id,
                        group.protocol_type,
                        group.group_state,
                        # v5+: the group's type (classic, share); lower-cased as Kafka's
                        # brokers spell it differently from version to version.
                        str(getattr(group, "group_type", None) or "classic").lower(),
                    )
                    for group in response.groups
                ]
            listed = [(group.group_id, group.protocol_type) for group in response.groups]
            if not listed:
                return []
            described = await connection.request(
                Request(
                    ApiKey.DESCRIBE_GROUPS,
                    {
                        "groups": [group_id for group_id, _ in listed],
                        "include_authorized_operations": False,
                    },
                )
            )
            states = {
                group.group_id: group.group_state
                for group in described.groups
                if group.error_code == ErrorCode.none
            }
            return [
                GroupListing(group_id, protocol_type, states.get(group_id, GroupState.UNKNOWN))
                for group_id, protocol_type in listed
            ]

        listings.extend(
            await retry_coordinator_errors(list_and_describe, self.coordinators.timeout_s)
        )

    async def describe_groups(self, group_ids: Sequence[str]) -> list[GroupDescription]:
        """State, protocol and members (with decoded assignments) of each group, in the
        order asked. A group that does not exist is described with state ``Dead``.
        Groups of the consumer group protocol (KIP-848) are described by
        ConsumerGroupDescribe, with their epochs and members' target assignments.

        Groups with the same coordinator are described in one request to it; a group
        whose coordinator turns out busy or moved (or whose connection drops) is asked
        about again on its own, with the usual retries."""
        wanted = list(dict.fromkeys(group_ids))
        nodes: dict[str, NodeId] = {}

        async def locate(group_id: str) -> None:
            nodes[group_id] = await self.coordinators.node_of(group_id)

        await run_all(locate(group_id) for group_id in wanted)
        by_node: dict[NodeId, list[str]] = defaultdict(list)
        for group_id in wanted:
            by_node[nodes[group_id]].append(group_id)
        descriptions: dict[str, GroupDescription] = {}
        await run_all(
            self._describe_groups_on(node_id, groups, descriptions)
            for node_id, groups in by_node.items()
        )
        await run_all(
            self._describe_group(group_id, descriptions)
            for group_id in wanted
            if group_id not in descriptions
        )
        await run_all(
            self._describe_consumer_group(group_id, descriptions)
            for group_id in wanted
            if not descriptions[group_id].exists
        )
        return [descriptions[group_id] for group_id in wanted]

    async def _describe_consumer_group(
        self, group_id: str, descriptions: dict[str, GroupDescription]
    ) -> None:
        """A group DescribeGroups calls Dead may be a consumer group (KIP-848), which
        only ConsumerGroupDescribe describes (:mod:`sluice.client.admin_consumer_groups`)."""

        async def attempt(connection: BrokerConnection) -> GroupDescription | None:
            return await describe_consumer_group(connection, group_id)

        found = await self.coordinators.call(group_id, attempt)
        if found is not None:
            descriptions[group_id] = found

    async def _describe_groups_on(
        self, node_id: NodeId, group_ids: list[str], descriptions: dict[str, GroupDescription]
    ) -> None:
        """One DescribeGroups for every group ``node_id`` coordinates; groups it does not
        answer for (now) are left out of ``descriptions``."""
        try:
            connection = await self.cluster.connection(node_id)
            response = await connection.request(
                Request(
                    ApiKey.DESCRIBE_GROUPS,
                    {"groups": group_ids, "include_authorized_operations": False},
                )
            )
        except ConnectionClosedError:
            for group_id in group_ids:
                self.coordinators.forget(group_id)
            return
        asked = set(group_ids)
        for described in response.groups:
            group_id = described.group_id
            if group_id not in asked:
                continue
            if described.error_code in COORDINATOR_RETRY_CODES:
                self.coordinators.forget(group_id)
            elif described.error_code == ErrorCode.group_id_not_found:
                descriptions[group_id] = GroupDescription(group_id, GroupState.DEAD, "", "")
            else:
                raise_for_group(
                    described.error_code, group_id, getattr(described, "error_message", None)
                )
                descriptions[group_id] = _group_description(described)

    async def _describe_group(
        self, group_id: str, descriptions: dict[str, GroupDescription]
    ) -> None:
        async def attempt(connection: BrokerConnection) -> GroupDescription:
            response = await connection.request(
                Request(
                    ApiKey.DESCRIBE_GROUPS,
                    {"groups": [group_id], "include_authorized_operations": False},
                )
            )
            for described in response.groups:
                if described.group_id != group_id:
                    continue
                if described.error_code == ErrorCode.group_id_not_found:
                    return GroupDescription(group_id, GroupState.DEAD, "", "")
                raise_for_group(
                    described.error_code, group_id, getattr(described, "error_message", None)
                )
                return _group_description(described)
            raise errors.UnknownServerError(
                f"DescribeGroups answer from broker at {connection.address} "
                f"does not mention group {group_id!r}"
            )

        descriptions[group_id] = await self.coordinators.call(group_id, attempt)

    async def list_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets: of ``partitions``, or of every partition it has
        committed to (``None``). Partitions without a committed offset are left out."""
        wanted = None if partitions is None else list(partitions)
        if wanted is not None and not wanted:
            return {}
        topics = (
            None
            if wanted is None
            else [
                {"name": topic, "partition_indexes": indexes}
                for topic, indexes in _partitions_by_topic(wanted).items()
            ]
        )

        async def attempt(connection: BrokerConnection) -> dict[TopicPartition, OffsetAndMetadata]:
            response = await connection.request(
                Request(
                    ApiKey.OFFSET_FETCH,
                    {"group_id": group_id, "topics": topics, "require_stable": False},
                )
            )
            raise_for_group(getattr(response, "error_code", ErrorCode.none), group_id)
            offsets: dict[TopicPartition, OffsetAndMetadata] = {}
            for topic in response.topics:
                for partition in topic.partitions:
                    topic_partition = TopicPartition(topic.name, int(partition.partition_index))
                    if partition.error_code == ErrorCode.unknown_topic_or_partition:
                        continue
                    _raise_for(
                        partition.error_code,
                        None,
                        f"committed offset of group {group_id!r} in {topic_partition}",
                    )
                    if partition.committed_offset < 0:
                        continue
                    offsets[topic_partition] = OffsetAndMetadata(
                        offset=int(partition.committed_offset),
                        leader_epoch=int(getattr(partition, "committed_leader_epoch", -1)),
                        metadata=partition.metadata or "",
                    )
            return offsets

        return await self.coordinators.call(group_id, attempt)

    async def alter_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        """Commit ``offsets`` for the group as an administrator (no generation, no member
        id). The coordinator accepts this only while the group has no members; otherwise
        the refusal (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION or REBALANCE_IN_PROGRESS) is
        raised with a message that says so."""
        if not offsets:
            return
        by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = defaultdict(list)
        for topic_partition, offset in offsets.items():
            by_topic[topic_partition.topic].append((topic_partition.partition, offset))
        fields = {
            "group_id": group_id,
            "generation_id_or_member_epoch": SIMPLE_COMMIT_GENERATION_ID,
            "member_id": SIMPLE_COMMIT_MEMBER_ID,
            "group_instance_id": None,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": index,
                            "committed_offset": offset.offset,
                            "committed_leader_epoch": offset.leader_epoch,
                            "committed_metadata": offset.metadata,
                        }
                        for index, offset in partitions
                    ],
                }
                for topic, partitions in by_topic.items()
            ],
        }

        async def attempt(connection: BrokerConnection) -> None:
            response = await connection.request(Request(ApiKey.OFFSET_COMMIT, fields))
            for topic in response.topics:
                for partition in topic.partitions:
                    code = partition.error_code
                    if code in ACTIVE_MEMBER_CODES:
                        raise errors.for_code(code)(
                            f"group {group_id!r} has active members; its offsets can only "
                            "be changed while it is empty (stop its consumers first)"
                        )
                    topic_partition = TopicPartition(topic.name, int(partition.partition_index))
                    _raise_for(code, None, f"offset of group {group_id!r} in {topic_partition}")

        await self.coordinators.call(group_id, attempt)

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, errors.KafkaError | None]:
        """Delete groups and their committed offsets; only empty groups can be deleted.

        Returns each group's outcome, in the order asked: ``None`` when deleted, else the
        broker's refusal (``GroupIdNotFound``, ``NonEmptyGroup``, ...) naming the group.
        Unlike the topic methods this does not raise on the first refusal: groups are
        deleted independently and some may go while others stay.
        """
        wanted = list(dict.fromkeys(group_ids))
        outcomes: dict[str, errors.KafkaError | None] = {}
        await run_all(self._delete_group(group_id, outcomes) for group_id in wanted)
        return {group_id: outcomes[group_id] for group_id in wanted}

    async def _delete_group(
        self, group_id: str, outcomes: dict[str, errors.KafkaError | None]
    ) -> None:
        async def attempt(connection: BrokerConnection) -> None:
            response = await connection.request(
                Request(ApiKey.DELETE_GROUPS, {"groups_names": [group_id]})
            )
            for result in response.results:
                if result.group_id == group_id:
                    raise_for_group(result.error_code, group_id)
                    return
            raise errors.UnknownServerError(
                f"DeleteGroups answer from broker at {connection.address} "
                f"does not mention group {group_id!r}"
            )

        try:
            await self.coordinators.call(group_id, attempt)
        except errors.KafkaError as e:
            outcomes[group_id] = e
        else:
            outcomes[group_id] = None

    async def delete_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> None:
        """Delete the group's committed offsets of ``partitions`` (OffsetDelete).

        Allowed for an empty group, and for a consumer group with members only for topics
        none of them subscribes to (else ``GroupSubscribedToTopic``). Raises the first
        refusal.
        """
        wanted = list(partitions)
        if not wanted:
            return
        fields = {
            "group_id": group_id,
            "topics": [
                {"name": topic, "partitions": [{"partition_index": index} for index in indexes]}
                for topic, indexes in _partitions_by_topic(wanted).items()
            ],
        }

        async def attempt(connection: BrokerConnection) -> None:
            response = await connection.request(Request(ApiKey.OFFSET_DELETE, fields))
            raise_for_group(response.error_code, group_id)
            for topic in response.topics:
                for partition in topic.partitions:
                    code = partition.error_code
                    if code == ErrorCode.group_subscribed_to_topic:
                        raise errors.for_code(code)(
                            f"active members of group {group_id!r} subscribe to topic "
                            f"{topic.name!r}; its offsets can be deleted once they stop"
                        )
                    topic_partition = TopicPartition(topic.name, int(partition.partition_index))
                    _raise_for(
                        code, None, f"committed offset of group {group_id!r} in {topic_partition}"
                    )

        await self.coordinators.call(group_id, attempt)


def _group_description(described: Any) -> GroupDescription:
    """A DescribeGroups answer for one group, with consumer assignments decoded."""
    is_consumer_group = described.protocol_type == CONSUMER_PROTOCOL_TYPE
    members = []
    for member in described.members:
        assignment: dict[str, list[int]] = {}
        if is_consumer_group:
            try:
                assignment = decode_consumer_assignment(member.member_assignment)
            except MalformedAssignmentError as e:
                raise MalformedAssignmentError(
                    f"group {described.group_id!r}, member {member.member_id!r}: {e}"
                ) from None
        members.append(
            MemberDescription(
                member_id=member.member_id,
                group_instance_id=getattr(member, "group_instance_id", None),
                client_id=member.client_id,
                client_host=member.client_host,
                assignment=assignment,
            )
        )
    return GroupDescription(
        group_id=described.group_id,
        state=described.group_state,
        protocol_type=described.protocol_type,
        protocol=described.protocol_data,
        members=members,
    )
