"""Administration: topics, configs and offsets, over the Kafka admin APIs.

Each method sends one kind of request to the broker that must answer it (the controller
for topic creation and deletion, partition leaders for offsets, any broker for configs)
and turns per-resource error codes into the matching
:class:`~sluice.common.errors.KafkaError`, with the resource named in the message.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from sluice.client.cluster import Cluster, TopicMetadata, run_all
from sluice.client.messages import Request
from sluice.common import errors
from sluice.common.errors import ErrorCode
from sluice.common.ids import NodeId, TopicPartition
from sluice.protocol.versions import ApiKey

ADMIN_TIMEOUT_MS_DEFAULT = 30_000
"""How long the broker may take to create or delete topics before answering."""

RESOURCE_TYPE_TOPIC = 2
RESOURCE_TYPE_BROKER = 4

NO_OFFSET = -1
"""ListOffsets' answer when no record matches (e.g. a timestamp after the last record)."""


class OffsetSpec(IntEnum):
    """Which offset ListOffsets asks for; any value >= 0 is a timestamp in ms."""

    LATEST = -1
    """The log end offset (the high watermark for consumers): where the next record goes."""
    EARLIEST = -2
    """The log start offset: the oldest record still stored."""


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

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

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

    def _request_timeout_s(self, timeout_ms: int) -> float:
        """Wait for the answer a little longer than the broker is allowed to take."""
        return max(self.cluster.request_timeout_s, timeout_ms / 1000 + 5.0)

    # ── configs ────────────────────────────────────────────────────────────────────

    async def describe_topic_configs(self, topic: str) -> dict[str, ConfigEntry]:
        """Every config of ``topic`` with its value and source, by name."""
        return await self.describe_configs(RESOURCE_TYPE_TOPIC, topic)

    async def describe_configs(self, resource_type: int, name: str) -> dict[str, ConfigEntry]:
        """Every config of one resource (topic, or broker by its id as a string)."""
        connection = await self.cluster.any_connection()
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
        """IncrementalAlterConfigs on one resource; raises the broker's error if any."""
        connection = await self.cluster.any_connection()
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

    @staticmethod
    def _resource(resource_type: int, name: str) -> str:
        if resource_type == RESOURCE_TYPE_TOPIC:
            return f"topic {name!r}"
        if resource_type == RESOURCE_TYPE_BROKER:
            return f"broker {name}"
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
