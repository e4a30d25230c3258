"""Topic administration on the broker: create, delete, grow, reconfigure, auto-create.

Each operation is decided by the controller functions, written through the metadata
store (conditional on the version read), and applied to local replicas by the store's
change listener, the same path a ZooKeeper watch will take in a cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sluice.broker.replica_manager import ReplicaManager
from sluice.cluster import controller
from sluice.cluster.model import TopicId, TopicMetadata
from sluice.cluster.store import MetadataStore, NoSuchTopic, TopicExists
from sluice.common import errors
from sluice.common.config import BrokerConfig, parse_topic_configs
from sluice.common.ids import topic_name_problem

log = logging.getLogger(__name__)

INTERNAL_TOPIC_PREFIX = "__"


class TopicManager:
    def __init__(
        self, store: MetadataStore, replicas: ReplicaManager, config: BrokerConfig
    ) -> None:
        self._store = store
        self._replicas = replicas
        self._config = config
        self._topics: dict[str, TopicMetadata] = store.topics()
        self._by_id: tuple[dict[str, TopicMetadata], dict[TopicId, TopicMetadata]] = ({}, {})
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

    def by_id(self, topic_id: TopicId) -> TopicMetadata | None:
        """The topic with this id (requests of Fetch v13+, Produce v13, Metadata v12+ and
        DeleteTopics v6 may name topics by id). The id index is rebuilt when the topics
        changed since it was made: on a miss, or a hit that is no longer current."""
        topics, index = self._by_id
        topic = index.get(topic_id) if topics is self._topics else None
        if topic is not None and self._topics.get(topic.name) is topic:
            return topic
        index = {t.topic_id: t for t in self._topics.values()}
        self._by_id = self._topics, index
        return index.get(topic_id)

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
        assignments: Sequence[tuple[int, Sequence[int]]] = (),
    ) -> TopicMetadata:
        """Create a topic; with ``assignments`` ((partition index, replicas), as a
        client gave them) its replicas are those, and the counts must be -1."""
        problem = topic_name_problem(name)
        if problem is not None:
            raise errors.InvalidTopicException(problem)
        if name in self._topics:
            raise errors.TopicAlreadyExists(f"topic {name!r} already exists")
        checked = parse_topic_configs(configs)
        if assignments:
            # Kafka's order: the replication factor is checked first.
            if replication_factor != -1:
                raise errors.InvalidRequest(
                    "A manual partition assignment was specified, but replication factor "
                    "was not set to -1."
                )
            if partition_count != -1:
                raise errors.InvalidRequest(
                    "A manual partition assignment was specified, but numPartitions was "
                    "not set to -1."
                )
            topic = controller.assigned_topic(
                name, assignments, checked, self._store.live_brokers()
            )
            partition_count = topic.partition_count
        else:
            if partition_count == -1:
                partition_count = self._config.num_partitions
            if replication_factor == -1:
                replication_factor = self._config.default_replication_factor
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

    def add_partitions(
        self,
        name: str,
        new_count: int,
        *,
        validate_only: bool = False,
        assignments: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """Grow a topic; ``assignments`` names the replicas of each added partition."""
        topic = self.require(name)
        brokers = self._store.live_brokers()
        if assignments is None:
            grown = controller.with_partitions(topic, new_count, brokers)
        else:
            grown = controller.with_assigned_partitions(topic, new_count, assignments, brokers)
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
