"""Topic administration on the broker: create, delete, grow, reconfigure, auto-create.

Each operation is decided here (placement by :mod:`sluice.cluster.placement`), written
through the metadata store (conditional on the version read), and answered once the
broker has applied the metadata that holds it (:mod:`sluice.broker.replication.metadata_applier`):
the same path whichever broker of a cluster made the change. A write that loses to a
concurrent change of the same topic (StaleVersion) is decided again from the newer
metadata, a bounded number of times. Reads (:meth:`TopicManager.get` and the like)
answer from the image the broker applied last.

Creation from requests (CreateTopics, auto-creation by Metadata and Produce) never
blocks the event loop, however many topics and partitions it makes::

    handler ─ begin_create ─▶ queue ─▶ creation task, one batch at a time:
      (checks, placement,          │  worker thread: empty partition logs for every topic
       partition limit)            │    of the batch, then one fsync of the data directory
                                   │    (kept aside until the metadata names them)
                                   │  ONE metadata write for the batch (off the loop)
                                   │  wait until the broker applied the new metadata,
                                   │    which installs the logs made in advance
      ◀── await the topic's future ┘  (a failed step removes what the batch made and
                                       answers KAFKA_STORAGE_ERROR for its topics)

Requests that arrive while a batch runs join the next one. A topic is answered only once
it is durable and hosted, so it exists when the response that created it is read. A
name being created is reserved: CreateTopics for it gets TOPIC_ALREADY_EXISTS,
auto-creation waits for the same creation. In a cluster another broker may create the
same name at the same moment: the store refuses the second write (TopicExists), and an
auto-creation then waits for the other broker's topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from random import Random

from sluice.broker.extensions.views import (
    VIEW_FILTER,
    VIEW_SOURCE,
    View,
    check_view_configs,
    new_view,
    view_of,
    with_source_partitions,
)
from sluice.broker.replication.metadata_applier import MetadataApplier
from sluice.broker.replication.replica_manager import (
    ReplicaManager,
    partitions_allowed_by_open_files,
)
from sluice.cluster import placement
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import TopicId, TopicMetadata
from sluice.cluster.store import (
    MetadataStore,
    NoSuchTopic,
    StaleVersion,
    TopicExists,
)
from sluice.common import errors
from sluice.common.config import BrokerConfig, parse_topic_configs
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition, topic_name_problem
from sluice.group.config import OFFSETS_TOPIC
from sluice.share.config import SHARE_STATE_TOPIC
from sluice.storage import PartitionLog
from sluice.txn.config import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

INTERNAL_TOPIC_PREFIX = "__"

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
"""Kafka's internal topics (``Topic.isInternal``): the broker writes them itself, so
clients may not produce to them, add partitions to them or delete them."""


STALE_WRITE_ATTEMPTS_MAX = 5
"""How many times a topic change is decided again after losing to a concurrent change
of the same topic, before the request gets a retriable error."""

METADATA_APPLIED_TIMEOUT_MS = 30_000
"""How long a change waits for the broker to apply the metadata that holds it (in a
cluster, until ZooKeeper's watch brings it back) before a retriable error."""


def is_internal_topic(name: str) -> bool:
    return name in INTERNAL_TOPICS


@dataclass
class _Creation:
    topic: TopicMetadata
    done: asyncio.Future[TopicMetadata]


class TopicManager:
    def __init__(
        self,
        store: MetadataStore,
        replicas: ReplicaManager,
        applier: MetadataApplier,
        config: BrokerConfig,
        random: Random | None = None,
    ) -> None:
        self._store = store
        self._replicas = replicas
        self._applier = applier
        self._config = config
        self._random = random or Random()
        self._prepare_logs = config.zookeeper_connect is None
        """Make a new topic's logs before its metadata is written, so a full disk fails
        the request and leaves no topic behind: on a single node only. In a cluster
        another broker may create the same name at the same moment, and the directories
        made here would be those of its topic; there the broker's metadata task makes
        the logs of every new topic, whoever created it."""
        self._creating: dict[str, _Creation] = {}
        """Topics decided and not yet published, by name (reserved)."""
        self._creating_partitions = 0
        """Partitions hosted here of the topics in ``_creating``."""
        self._queue: list[_Creation] = []
        self._runner: asyncio.Task[None] | None = None
        self.open_files_limit: int | None = None
        """The process's open-file limit, when the broker knows it: partitions past what
        it allows are refused like those past max.broker.partitions."""

    @property
    def image(self) -> MetadataImage:
        """The metadata this broker applied last."""
        return self._applier.image

    def all(self) -> Mapping[str, TopicMetadata]:
        """Every topic, as requests see it (views with their source's partitions)."""
        topics = self._applier.image.topics
        return {name: self._as_seen(topic, topics) for name, topic in topics.items()}

    def get(self, name: str) -> TopicMetadata | None:
        """The topic ``name`` as requests see it: a view (:mod:`sluice.broker.extensions.views`)
        has the partitions, leaders and epochs of its source."""
        topics = self._applier.image.topics
        topic = topics.get(name)
        return None if topic is None else self._as_seen(topic, topics)

    def by_id(self, topic_id: TopicId) -> TopicMetadata | None:
        """The topic with this id (requests of Fetch v13+, Produce v13, Metadata v12+ and
        DeleteTopics v6 may name topics by id), as :meth:`get` gives it."""
        topic = self._applier.image.topic_by_id(topic_id)
        return None if topic is None else self._as_seen(topic, self._applier.image.topics)

    @staticmethod
    def _as_seen(topic: TopicMetadata, topics: Mapping[str, TopicMetadata]) -> TopicMetadata:
        source = topic.configs.get(VIEW_SOURCE)
        if not source:
            return topic
        return with_source_partitions(topic, topics.get(source))

    def view(self, name: str) -> View | None:
        """The view ``name`` is, or None for an ordinary (or unknown) topic."""
        topic = self._applier.image.topics.get(name)
        return None if topic is None else view_of(topic)

    def resolve(self, topic_partition: TopicPartition) -> tuple[TopicPartition, View | None]:
        """Where a partition's records live: its own log, or its view's source's."""
        view = self.view(topic_partition.topic)
        if view is None:
            return topic_partition, None
        return TopicPartition(view.source, topic_partition.partition), view

    def require(self, name: str) -> TopicMetadata:
        topic = self.get(name)
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
        if name in self.image.topics or name in self._creating:
            raise errors.TopicAlreadyExists(f"topic {name!r} already exists")
        checked = parse_topic_configs(configs)
        if checked.get(VIEW_SOURCE):
            return new_view(name, partition_count, checked, self.image.topics)
        if checked.get(VIEW_FILTER):
            raise errors.InvalidConfig(f"{VIEW_FILTER} is for views: give {VIEW_SOURCE} too")
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
            topic = placement.assigned_topic(name, assignments, checked, self.image.live_brokers())
        else:
            if partition_count == -1:
                partition_count = self._config.num_partitions
            if replication_factor == -1:
                replication_factor = self._config.default_replication_factor
            topic = placement.new_topic(
                name,
                partition_count,
                replication_factor,
                checked,
                self.image.live_brokers(),
                self._random,
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
        total = len(self._replicas) + self._creating_partitions + adding
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

    def validate_create(
        self,
        name: str,
        partition_count: int,
        replication_factor: int,
        configs: dict[str, str | None],
        *,
        assignments: Sequence[tuple[int, Sequence[int]]] = (),
    ) -> TopicMetadata:
        """The topic as CreateTopics would make it, without making it (validate_only)."""
        return self._decide(name, partition_count, replication_factor, configs, assignments)

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
        creation = _Creation(topic, loop.create_future())
        # Waiters that gave up (a closed connection) leave nobody to read a failure;
        # each waiter still sees it through its own shield.
        creation.done.add_done_callback(lambda done: done.cancelled() or done.exception())
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
            topic = self.get(name)
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
            except errors.TopicAlreadyExists:
                # Another broker of the cluster created it at the same moment.
                results[name] = await self._wait_for_topic(name)
            except KafkaError as e:
                results[name] = e
        return results

    async def ensure_offsets_topic(self) -> TopicMetadata:
        """``__consumer_offsets`` (compacted), created with the broker's offsets.topic.*
        settings if it does not exist yet; another broker creating it at the same moment
        is waited for."""
        return await self._ensure_internal_topic(
            OFFSETS_TOPIC,
            self._config.offsets_topic_num_partitions,
            self._config.offsets_topic_replication_factor,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(self._config.offsets_topic_segment_bytes),
            },
        )

    async def ensure_transaction_state_topic(self) -> TopicMetadata:
        """``__transaction_state`` (compacted), created with the broker's
        transaction.state.log.* settings if it does not exist yet."""
        replication_factor = self._config.transaction_state_log_replication_factor
        return await self._ensure_internal_topic(
            TRANSACTION_STATE_TOPIC,
            self._config.transaction_state_log_num_partitions,
            replication_factor,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(self._config.transaction_state_log_segment_bytes),
                "min.insync.replicas": str(
                    min(
                        self._config.transaction_state_log_min_isr,
                        self._replicas_for(replication_factor),
                    )
                ),
            },
        )

    async def ensure_share_state_topic(self) -> TopicMetadata:
        """``__share_group_state`` (compacted), created with the broker's
        share.coordinator.state.topic.* settings if it does not exist yet (on the first
        share-partition state read or written)."""
        replication_factor = self._config.share_coordinator_state_topic_replication_factor
        return await self._ensure_internal_topic(
            SHARE_STATE_TOPIC,
            self._config.share_coordinator_state_topic_num_partitions,
            replication_factor,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(self._config.share_coordinator_state_topic_segment_bytes),
                "min.insync.replicas": str(
                    min(
                        self._config.share_coordinator_state_topic_min_isr,
                        self._replicas_for(replication_factor),
                    )
                ),
            },
        )

    async def ensure_schema_registry_topic(self) -> TopicMetadata:
        """The Schema Registry's topic (``schema.registry.topic``, ``_schemas``):
        compacted, one partition, ``schema.registry.topic.replication.factor`` replicas
        (one per live broker when fewer), created on the registry's first call if it
        does not exist yet, as Confluent's registry creates it at its start."""
        return await self._ensure_internal_topic(
            self._config.schema_registry_topic,
            1,
            self._config.schema_registry_topic_replication_factor,
            {"cleanup.policy": "compact"},
        )

    def _replicas_for(self, replication_factor: int) -> int:
        """Kafka refuses to create an internal topic until enough brokers are up; here
        a smaller cluster gets one replica per live broker."""
        return min(replication_factor, max(len(self.image.live_brokers()), 1))

    async def _ensure_internal_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str | None],
    ) -> TopicMetadata:
        existing = self.get(name)
        if existing is not None:
            return existing
        creation = self._creating.get(name)
        if creation is None:
            future = self.begin_create(
                name, partitions, self._replicas_for(replication_factor), configs
            )
            assert future is not None
        else:
            future = creation.done
        try:
            return await asyncio.shield(future)
        except errors.TopicAlreadyExists:
            found = await self._wait_for_topic(name)
            if isinstance(found, KafkaError):
                raise found from None
            return found

    async def _wait_for_topic(self, name: str) -> TopicMetadata | KafkaError:
        try:
            image = await self._applier.wait_for(
                lambda image: name in image.topics, METADATA_APPLIED_TIMEOUT_MS / 1000
            )
        except TimeoutError:
            return errors.RequestTimedOut(f"topic {name!r} was created elsewhere; not seen yet")
        return image.topics[name]

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
        if not self._prepare_logs:
            await self._store_created(batch)
            return
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
        for creation in ready:
            outcome = made[creation.topic.name]
            assert not isinstance(outcome, KafkaError)
            self._replicas.prepare(creation.topic.topic_id, outcome)
        await self._store_created(ready)

    async def _store_created(self, ready: list[_Creation]) -> None:
        """One metadata write for the batch, then wait until its topics are applied
        here. When another broker took a name of the batch meanwhile, the topics are
        written one by one, so only that one fails."""
        try:
            stored = await self._store.create_topics([c.topic for c in ready])
        except TopicExists:
            if len(ready) > 1:
                for creation in ready:
                    await self._store_created([creation])
                return
            name = ready[0].topic.name
            await self._fail_created(
                ready, errors.TopicAlreadyExists(f"topic {name!r} already exists")
            )
            return
        except OSError as e:
            error = errors.KafkaStorageError(f"cannot write the topic metadata: {e}")
            await self._fail_created(ready, error)
            self._log_failures(ready, error)
            return
        await self._publish_created(ready, stored)

    async def _publish_created(self, group: list[_Creation], stored: list[TopicMetadata]) -> None:
        """Wait until the broker applied the metadata holding the new topics (which
        installs their logs), then answer their creators."""
        ids = {t.name: t.topic_id for t in stored}

        def applied(image: MetadataImage) -> bool:
            return all(
                (topic := image.topics.get(name)) is not None and topic.topic_id == topic_id
                for name, topic_id in ids.items()
            )

        try:
            image = await self._applier.wait_for(applied, METADATA_APPLIED_TIMEOUT_MS / 1000)
        except TimeoutError:
            image = None
        for creation in group:
            self._release(creation)
            if image is None:
                creation.done.set_exception(
                    errors.RequestTimedOut(
                        f"topic {creation.topic.name!r} is stored but not yet applied here"
                    )
                )
            else:
                creation.done.set_result(image.topics[creation.topic.name])
        log.info(
            "created %d topic(s) with %d partition(s): %s",
            len(stored),
            sum(t.partition_count for t in stored),
            ", ".join(t.name for t in stored[:5]) + (", …" if len(stored) > 5 else ""),
        )

    async def _fail_created(self, group: list[_Creation], error: KafkaError) -> None:
        """The metadata write failed: remove the logs made for the group."""
        logs = [pair for c in group for pair in self._replicas.discard_prepared(c.topic.topic_id)]
        await asyncio.to_thread(self._replicas.discard_logs, logs)
        for creation in group:
            self._fail(creation, error)

    @staticmethod
    def _log_failures(failed: list[_Creation], first_error: object) -> None:
        """One warning per batch, not per topic (a full disk fails thousands at once)."""
        assert isinstance(first_error, KafkaError)
        names = ", ".join(c.topic.name for c in failed[:5]) + (", …" if len(failed) > 5 else "")
        log.warning("cannot create %d topic(s) (%s): %s", len(failed), names, first_error.message)

    def _release(self, creation: _Creation) -> None:
        del self._creating[creation.topic.name]
        self._creating_partitions -= self._hosted_here(creation.topic)

    def _fail(self, creation: _Creation, error: KafkaError) -> None:
        self._release(creation)
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

    async def close(self) -> None:
        """Stop creating (shutdown): the metadata task has stopped, so a creation in
        flight could never see its topic applied. One already stored is picked up by the
        next start."""
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner

    async def delete(self, name: str) -> None:
        """Delete a topic; returns once this broker applied the deletion."""
        if name in self._creating:
            raise errors.UnknownTopicOrPartition(f"topic {name!r} is still being created")
        topic = self.require(name)
        views = sorted(
            view_name
            for view_name, other in self.image.topics.items()
            if other.configs.get(VIEW_SOURCE) == name
        )
        if views:
            raise errors.PolicyViolation(
                f"topic {name!r} is the source of view(s) {', '.join(views)}: delete them first"
            )
        try:
            await self._store.delete_topic(name)
        except NoSuchTopic:
            raise errors.UnknownTopicOrPartition(f"topic {name!r} does not exist") from None
        except OSError as e:
            raise errors.KafkaStorageError(f"cannot delete topic {name!r}: {e}") from e
        log.info("deleted topic %s", name)
        await self._wait_applied(
            lambda image: getattr(image.topics.get(name), "topic_id", None) != topic.topic_id
        )

    async def add_partitions(
        self,
        name: str,
        new_count: int,
        *,
        validate_only: bool = False,
        assignments: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """Grow a topic; ``assignments`` names the replicas of each added partition."""

        async def attempt(topic: TopicMetadata) -> TopicMetadata | None:
            view = view_of(topic)
            if view is not None:
                raise errors.InvalidPartitions(
                    f"{name!r} is a view: it has the partitions of {view.source!r}; add "
                    f"partitions there"
                )
            brokers = self.image.live_brokers()
            if assignments is None:
                grown = placement.with_partitions(topic, new_count, brokers, self._random)
            else:
                grown = placement.with_assigned_partitions(topic, new_count, assignments, brokers)
            self._check_partition_limit(name, self._hosted_here(grown) - self._hosted_here(topic))
            if validate_only:
                return None
            added = {i: s for i, s in grown.partitions.items() if i not in topic.partitions}
            return await self._store.add_partitions(name, added, topic.version)

        await self._change(name, attempt)

    async def set_configs(
        self,
        name: str,
        overrides: Callable[[TopicMetadata], dict[str, str]],
        *,
        validate_only: bool = False,
    ) -> None:
        """Replace the topic's config overrides with ``overrides(topic)`` (already
        checked), decided from the topic as it is stored."""

        async def attempt(topic: TopicMetadata) -> TopicMetadata | None:
            configs = overrides(topic)
            check_view_configs(topic, configs)
            if validate_only:
                return None
            return await self._store.set_topic_configs(name, configs, topic.version)

        await self._change(name, attempt)

    async def _change(
        self, name: str, attempt: Callable[[TopicMetadata], Awaitable[TopicMetadata | None]]
    ) -> None:
        """Run ``attempt`` on the topic as applied here; when its conditional write loses
        to a concurrent change, wait for the newer topic and decide again. Returns once
        the written topic is applied here."""
        for _ in range(STALE_WRITE_ATTEMPTS_MAX):
            topic = self.require(name)
            try:
                stored = await attempt(topic)
            except StaleVersion:
                await self._wait_for_version(name, topic.version + 1)
                continue
            except NoSuchTopic:
                raise errors.UnknownTopicOrPartition(f"topic {name!r} does not exist") from None
            except OSError as e:
                raise errors.KafkaStorageError(f"cannot store topic {name!r}: {e}") from e
            if stored is not None:
                await self._wait_for_version(name, stored.version)
            return
        raise errors.RequestTimedOut(
            f"topic {name!r} kept changing under {STALE_WRITE_ATTEMPTS_MAX} attempts to "
            "change it; try again"
        )

    async def _wait_for_version(self, name: str, version: int) -> None:
        """Wait until the applied topic record reaches ``version`` (or is gone)."""

        def reached(image: MetadataImage) -> bool:
            topic = image.topics.get(name)
            return topic is None or topic.version >= version

        await self._wait_applied(reached)

    async def wait_applied(self, condition: Callable[[MetadataImage], bool]) -> None:
        """Wait until this broker has applied an image for which ``condition`` holds
        (a change the caller stored); RequestTimedOut past the usual bound."""
        await self._wait_applied(condition)

    async def _wait_applied(self, condition: Callable[[MetadataImage], bool]) -> None:
        try:
            await self._applier.wait_for(condition, METADATA_APPLIED_TIMEOUT_MS / 1000)
        except TimeoutError:
            raise errors.RequestTimedOut(
                "the change is stored but this broker has not seen it yet"
            ) from None
