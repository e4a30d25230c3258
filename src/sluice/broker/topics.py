"""Topic administration on the broker: create, delete, grow, reconfigure, auto-create.

Each operation is decided by the controller functions, written through the metadata
store (conditional on the version read), and applied to local replicas by the store's
change listener, the same path a ZooKeeper watch will take in a cluster.

Creation from requests (CreateTopics, auto-creation by Metadata and Produce) never
blocks the event loop, however many topics and partitions it makes::

    handler ─ begin_create ─▶ queue ─▶ creation task, one batch at a time:
      (checks, placement,          │  worker thread: empty partition logs for every topic
       partition limit)            │    of the batch, then one fsync of the data directory
                                   │  worker thread: ONE metadata write for the batch
                                   │  event loop: host the logs, publish the topics
      ◀── await the topic's future ┘  (a failed step removes what the batch made and
                                       answers KAFKA_STORAGE_ERROR for its topics)

Requests that arrive while a batch runs join the next one. A topic is answered only once
it is durable and hosted, so it exists when the response that created it is read. A
name being created is reserved: CreateTopics for it gets TOPIC_ALREADY_EXISTS,
auto-creation waits for the same creation.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sluice.broker.replica_manager import ReplicaManager, partitions_allowed_by_open_files
from sluice.cluster import controller
from sluice.cluster.model import TopicId, TopicMetadata
from sluice.cluster.store import MetadataStore, NoSuchTopic, TopicExists
from sluice.common import errors
from sluice.common.config import BrokerConfig, parse_topic_configs
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition, topic_name_problem
from sluice.storage import PartitionLog

log = logging.getLogger(__name__)

INTERNAL_TOPIC_PREFIX = "__"

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
"""Kafka's internal topics (``Topic.isInternal``): the broker writes them itself, so
clients may not produce to them, add partitions to them or delete them."""


def is_internal_topic(name: str) -> bool:
    return name in INTERNAL_TOPICS


@dataclass
class _Creation:
    topic: TopicMetadata
    done: asyncio.Future[TopicMetadata]


class TopicManager:
    def __init__(
        self, store: MetadataStore, replicas: ReplicaManager, config: BrokerConfig
    ) -> None:
        self._store = store
        self._replicas = replicas
        self._config = config
        self._topics: dict[str, TopicMetadata] = store.topics()
        self._by_id: tuple[dict[str, TopicMetadata], dict[TopicId, TopicMetadata]] = ({}, {})
        self._hosted_partitions = sum(self._hosted_here(t) for t in self._topics.values())
        """Partitions of published topics hosted here (recounted on metadata changes)."""
        self._creating: dict[str, _Creation] = {}
        """Topics decided and not yet published, by name (reserved)."""
        self._creating_partitions = 0
        """Partitions hosted here of the topics in ``_creating``."""
        self._queue: list[_Creation] = []
        self._runner: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = threading.get_ident()
        self.open_files_limit: int | None = None
        """The process's open-file limit, when the broker knows it: partitions past what
        it allows are refused like those past max.broker.partitions."""
        store.add_listener(self._on_metadata_change)

    def _on_metadata_change(self) -> None:
        if threading.get_ident() == self._loop_thread:
            self._apply_metadata()
        else:
            # A write done on a worker thread (or a ZooKeeper watch): logs are touched
            # on the event loop only.
            assert self._loop is not None, "metadata written off the loop before any creation"
            self._loop.call_soon_threadsafe(self._apply_metadata)

    def _apply_metadata(self) -> None:
        topics = self._store.topics()
        for name in set(self._topics) - set(topics):
            self._replicas.remove_topic(name)
        published: dict[str, TopicMetadata] = {}
        for name, topic in topics.items():
            if name in self._creating:
                continue  # its creation hosts and publishes it
            self._replicas.apply_topic(topic, recover=False)
            published[name] = topic
        self._topics = published
        self._hosted_partitions = sum(self._hosted_here(t) for t in published.values())

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

    # -- creation -------------------------------------------------------------------

    def _decide(
        self,
        name: str,
        partition_count: int,
        replication_factor: int,
        configs: dict[str, str | None],
        assignments: Sequence[tuple[int, Sequence[int]]] = (),
    ) -> TopicMetadata:
        """Check and place a new topic; with ``assignments`` ((partition index, replicas),
        as a client gave them) its replicas are those, and the counts must be -1."""
        problem = topic_name_problem(name)
        if problem is not None:
            raise errors.InvalidTopicException(problem)
        if name in self._topics or name in self._creating:
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
        else:
            if partition_count == -1:
                partition_count = self._config.num_partitions
            if replication_factor == -1:
                replication_factor = self._config.default_replication_factor
            topic = controller.new_topic(
                name, partition_count, replication_factor, checked, self._store.live_brokers()
            )
        if not name.startswith(INTERNAL_TOPIC_PREFIX):
            # Internal topics (made by the broker itself) are counted, never refused.
            self._check_partition_limit(name, self._hosted_here(topic))
        return topic

    def _hosted_here(self, topic: TopicMetadata) -> int:
        node_id = self._config.node_id
        return sum(1 for state in topic.partitions.values() if node_id in state.replicas)

    def _check_partition_limit(self, name: str, adding: int) -> None:
        """Refuse (POLICY_VIOLATION) partitions past max.broker.partitions or past what
        the open-file limit allows, with a message naming the limit and how to raise it."""
        total = self._hosted_partitions + self._creating_partitions + adding
        limit = self._config.max_broker_partitions
        if total > limit:
            raise errors.PolicyViolation(
                f"topic {name!r}: {adding} more partition(s) would make this broker host "
                f"{total}, past max.broker.partitions={limit}; raise it (sluice serve -o "
                f"max.broker.partitions=N) or delete topics"
            )
        if self.open_files_limit is not None:
            allowed = partitions_allowed_by_open_files(self.open_files_limit)
            if total > allowed:
                raise errors.PolicyViolation(
                    f"topic {name!r}: {adding} more partition(s) would make this broker "
                    f"host {total}, past the {allowed} its open-file limit "
                    f"({self.open_files_limit}) allows; raise the limit (ulimit -n, or "
                    f"LimitNOFILE= for a service) and restart the broker"
                )

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
        """Create a topic now, blocking (start-up and tools; requests use
        :meth:`begin_create`)."""
        topic = self._decide(name, partition_count, replication_factor, configs, assignments)
        if validate_only:
            return topic
        try:
            stored = self._store.create_topic(topic)
        except TopicExists:
            raise errors.TopicAlreadyExists(f"topic {name!r} already exists") from None
        except OSError as e:
            raise errors.KafkaStorageError(f"cannot store topic {name!r}: {e}") from e
        log.info("created topic %s with %d partition(s)", name, stored.partition_count)
        return stored

    def begin_create(
        self,
        name: str,
        partition_count: int,
        replication_factor: int,
        configs: dict[str, str | None],
        *,
        validate_only: bool = False,
        assignments: Sequence[tuple[int, Sequence[int]]] = (),
    ) -> asyncio.Future[TopicMetadata] | None:
        """Check and place a new topic now (raising its KafkaError), then create it in
        the background: the future gives the stored topic once it is durable and hosted,
        or raises KafkaError (KAFKA_STORAGE_ERROR). None when ``validate_only``. Await it
        through ``asyncio.shield``: other requests may wait for it too."""
        topic = self._decide(name, partition_count, replication_factor, configs, assignments)
        if validate_only:
            return None
        loop = asyncio.get_running_loop()
        self._loop = loop
        creation = _Creation(topic, loop.create_future())
        self._creating[name] = creation
        self._creating_partitions += self._hosted_here(topic)
        self._queue.append(creation)
        if self._runner is None or self._runner.done():
            self._runner = loop.create_task(self._run_creations(), name="topic creation")
        return creation.done

    async def ensure_all(
        self, names: Iterable[str]
    ) -> dict[str, TopicMetadata | KafkaError | None]:
        """Each named topic, auto-created with the broker's defaults when allowed (not
        for internal names); None where it does not exist and may not be created, the
        KafkaError where creating it failed. Many new names are one creation batch."""
        results: dict[str, TopicMetadata | KafkaError | None] = {}
        waiting: dict[str, asyncio.Future[TopicMetadata]] = {}
        for name in dict.fromkeys(names):
            topic = self._topics.get(name)
            creation = self._creating.get(name)
            if topic is not None:
                results[name] = topic
            elif creation is not None:
                waiting[name] = creation.done
            elif not self._config.auto_create_topics_enable or name.startswith(
                INTERNAL_TOPIC_PREFIX
            ):
                results[name] = None
            else:
                try:
                    future = self.begin_create(name, -1, -1, {})
                    assert future is not None
                    waiting[name] = future
                except KafkaError as e:
                    results[name] = e
        for name, future in waiting.items():
            try:
                results[name] = await asyncio.shield(future)
            except KafkaError as e:
                results[name] = e
        return results

    async def _run_creations(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                await self._create_batch(batch)
            except Exception as e:  # a bug: every waiter sees it, the broker goes on
                log.exception("creating %d topic(s) failed", len(batch))
                for creation in batch:
                    if self._creating.pop(creation.topic.name, None) is not None:
                        self._creating_partitions -= self._hosted_here(creation.topic)
                    if not creation.done.done():
                        creation.done.set_exception(e)

    async def _create_batch(self, batch: list[_Creation]) -> None:
        made = await asyncio.to_thread(self._make_logs, [c.topic for c in batch])
        ready: list[_Creation] = []
        failed: list[_Creation] = []
        for creation in batch:
            outcome = made[creation.topic.name]
            if isinstance(outcome, KafkaError):
                self._fail(creation, outcome)
                failed.append(creation)
            else:
                ready.append(creation)
        if failed:
            self._log_failures(failed, made[failed[0].topic.name])
        if not ready:
            return
        try:
            stored = await asyncio.to_thread(self._store_topics, [c.topic for c in ready])
        except KafkaError as e:
            logs = [pair for c in ready for pair in made[c.topic.name]]  # type: ignore[union-attr]
            await asyncio.to_thread(self._replicas.discard_logs, logs)
            for creation in ready:
                self._fail(creation, e)
            self._log_failures(ready, e)
            return
        for topic in stored:
            outcome = made[topic.name]
            assert not isinstance(outcome, KafkaError)
            self._replicas.install(topic, outcome)
        for creation in ready:
            del self._creating[creation.topic.name]
            self._creating_partitions -= self._hosted_here(creation.topic)
        self._apply_metadata()
        for creation, topic in zip(ready, stored, strict=True):
            creation.done.set_result(topic)
        log.info(
            "created %d topic(s) with %d partition(s): %s",
            len(stored),
            sum(t.partition_count for t in stored),
            ", ".join(t.name for t in stored[:5]) + (", …" if len(stored) > 5 else ""),
        )

    @staticmethod
    def _log_failures(failed: list[_Creation], first_error: object) -> None:
        """One warning per batch, not per topic (a full disk fails thousands at once)."""
        assert isinstance(first_error, KafkaError)
        names = ", ".join(c.topic.name for c in failed[:5]) + (", …" if len(failed) > 5 else "")
        log.warning("cannot create %d topic(s) (%s): %s", len(failed), names, first_error.message)

    def _fail(self, creation: _Creation, error: KafkaError) -> None:
        del self._creating[creation.topic.name]
        self._creating_partitions -= self._hosted_here(creation.topic)
        creation.done.set_exception(error)

    def _make_logs(
        self, topics: list[TopicMetadata]
    ) -> dict[str, list[tuple[TopicPartition, PartitionLog]] | KafkaError]:
        """Worker thread: the empty logs of each topic, then one data-directory fsync."""
        made: dict[str, list[tuple[TopicPartition, PartitionLog]] | KafkaError] = {}
        for topic in topics:
            try:
                made[topic.name] = self._replicas.create_logs(topic)
            except KafkaError as e:
                made[topic.name] = e
        try:
            self._replicas.sync_data_dir()
        except KafkaError as e:
            for name, outcome in made.items():
                if not isinstance(outcome, KafkaError):
                    self._replicas.discard_logs(outcome)
                    made[name] = e
        return made

    def _store_topics(self, topics: list[TopicMetadata]) -> list[TopicMetadata]:
        """Worker thread: one metadata write for the batch."""
        try:
            return self._store.create_topics(topics)
        except OSError as e:
            raise errors.KafkaStorageError(f"cannot write the topic metadata: {e}") from e

    async def close(self) -> None:
        """Wait for creations in flight to finish (shutdown)."""
        if self._runner is not None:
            await asyncio.shield(self._runner)

    def delete(self, name: str) -> None:
        if name in self._creating:
            raise errors.UnknownTopicOrPartition(f"topic {name!r} is still being created")
        try:
            self._store.delete_topic(name)
        except NoSuchTopic:
            raise errors.UnknownTopicOrPartition(f"topic {name!r} does not exist") from None
        except OSError as e:
            raise errors.KafkaStorageError(f"cannot delete topic {name!r}: {e}") from e
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
        self._check_partition_limit(name, self._hosted_here(grown) - self._hosted_here(topic))
        if not validate_only:
            try:
                self._store.update_topic(grown)
            except OSError as e:
                raise errors.KafkaStorageError(f"cannot store topic {name!r}: {e}") from e

    def set_configs(
        self, name: str, configs: dict[str, str], *, validate_only: bool = False
    ) -> None:
        """Replace the topic's config overrides with ``configs`` (already checked)."""
        topic = self.require(name)
        if validate_only:
            return
        try:
            self._store.update_topic(
                TopicMetadata(topic.name, topic.topic_id, topic.partitions, configs, topic.version)
            )
        except OSError as e:
            raise errors.KafkaStorageError(f"cannot store topic {name!r}: {e}") from e
