"""Topic administration on the broker: create, delete, grow, reconfigure, auto-create.

Each operation is decided by the controller functions, written through the metadata
store (conditional on the version read), and applied to local replicas by the store's
change listener, the same path a ZooKeeper watch will take in a cluster.
"""

from __future__ import annotations

import logging

from sluice.broker.replica_manager import ReplicaManager
from sluice.cluster import controller
from sluice.cluster.model import TopicMetadata
from sluice.cluster.store import MetadataStore, NoSuchTopic, TopicExists
from sluice.common import errors
from sluice.common.config import BrokerConfig, parse_topic_configs
from sluice.common.ids import topic_name_problem

log = logging.getLogger(__name__)

INTERNAL_TOPIC_PREFIX = "__"

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
"""Kafka's internal topics (``Topic.isInternal``): the broker writes them itself, so
clients may not produce to them, add partitions to them or delete them."""


def is_internal_topic(name: str) -> bool:
    return name in INTERNAL_TOPICS


class TopicManager:
    def __init__(
        self, store: MetadataStore, replicas: ReplicaManager, config: BrokerConfig
    ) -> None:
        self._store = store
        self._replicas = replicas
        self._config = config
        self._topics: dict[str, TopicMetadata] = store.topics()
        store.add_listener(self._on_metadata_change)

    def _on_metadata_change(self) -> None:
        topics = self._store.topics()
        for name in set(self._topics) - set(topics):
            self._replicas.remove_topic(name)
        for topic in topics.values():
            self._replicas.apply_topic(topic, recover=False)
        self._topics = topics

    def open_local_replicas(self, *, recover: bool) -> None:
        for topic in self._topics.values():
            self._replicas.apply_topic(topic, recover=recover)

    def all(self) -> dict[str, TopicMetadata]:
        return self._topics

    def get(self, name: str) -> TopicMetadata | None:
        return self._topics.get(name)

    def require(self, name: str) -> TopicMetadata:
        topic = self._topics.get(name)
        if topic is None:
            raise errors.UnknownTopicOrPartition(f"topic {name!r} does not exist")
        return topic

    def create(
        self,
        name: str,
        partition_count: int,
        replication_factor: int,
        configs: dict[str, str | None],
        *,
        validate_only: bool = False,
    ) -> TopicMetadata:
        problem = topic_name_problem(name)
        if problem is not None:
            raise errors.InvalidTopicException(problem)
        if name in self._topics:
            raise errors.TopicAlreadyExists(f"topic {name!r} already exists")
        if partition_count == -1:
            partition_count = self._config.num_partitions
        if replication_factor == -1:
            replication_factor = self._config.default_replication_factor
        checked = parse_topic_configs(configs)
        topic = controller.new_topic(
            name, partition_count, replication_factor, checked, self._store.live_brokers()
        )
        if validate_only:
            return topic
        try:
            stored = self._store.create_topic(topic)
        except TopicExists:
            raise errors.TopicAlreadyExists(f"topic {name!r} already exists") from None
        log.info("created topic %s with %d partition(s)", name, partition_count)
        return stored

    def ensure(self, name: str) -> TopicMetadata | None:
        """The topic, auto-created with broker defaults when allowed; None otherwise."""
        topic = self._topics.get(name)
        if topic is not None or not self._config.auto_create_topics_enable:
            return topic
        if name.startswith(INTERNAL_TOPIC_PREFIX):
            return None
        return self.create(name, -1, -1, {})

    def delete(self, name: str) -> None:
        try:
            self._store.delete_topic(name)
        except NoSuchTopic:
            raise errors.UnknownTopicOrPartition(f"topic {name!r} does not exist") from None
        log.info("deleted topic %s", name)

    def add_partitions(self, name: str, new_count: int, *, validate_only: bool = False) -> None:
        topic = self.require(name)
        grown = controller.with_partitions(topic, new_count, self._store.live_brokers())
        if not validate_only:
            self._store.update_topic(grown)

    def set_configs(
        self, name: str, configs: dict[str, str], *, validate_only: bool = False
    ) -> None:
        """Replace the topic's config overrides with ``configs`` (already checked)."""
        topic = self.require(name)
        if validate_only:
            return
        self._store.update_topic(
            TopicMetadata(topic.name, topic.topic_id, topic.partitions, configs, topic.version)
        )
