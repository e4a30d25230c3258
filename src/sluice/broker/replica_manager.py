"""The partitions this broker hosts, kept in step with the cluster metadata.

Partition directories are ``<data dir>/<topic>-<partition>/``. When a topic appears in
the metadata and this broker is one of its replicas, its logs are opened (or created);
when it disappears, they are closed and removed.

New topics take a faster path (:meth:`ReplicaManager.create_logs`, on a worker thread):
their empty logs are made before the metadata names them, with one fsync of the data
directory for the whole batch, and handed over with :meth:`ReplicaManager.install` once
the metadata write succeeded. A batch that fails removes what it made.

The open-file budget lives here too: :func:`raise_open_files_limit` lifts the soft
RLIMIT_NOFILE to the hard limit at start, and :func:`partitions_allowed_by_open_files`
says how many partitions fit in it (each keeps its active segment's ``.log`` open).
"""

from __future__ import annotations

import logging
import resource
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

from sluice.broker.partition import Partition
from sluice.broker.purgatory import Purgatory
from sluice.cluster.model import TopicMetadata
from sluice.common import errors
from sluice.common.clock import Clock
from sluice.common.config import TopicConfig
from sluice.common.ids import TopicPartition
from sluice.common.limits import (
    INACTIVE_SEGMENTS_OPEN_FILES_PERCENT,
    INACTIVE_SEGMENTS_OPEN_MAX,
    PARTITIONS_OPEN_FILES_PERCENT,
)
from sluice.storage import PartitionLog
from sluice.storage.checkpoint import fsync_directory
from sluice.storage.segment import OPEN_SEGMENT_FILES

log = logging.getLogger(__name__)

OPEN_FILES_PER_INACTIVE_SEGMENT = 3
"""An open inactive segment: its ``.log`` and the two index mappings (each mapping holds
a duplicated descriptor)."""


def raise_open_files_limit() -> int:
    """Lift the soft RLIMIT_NOFILE to the hard limit, size the open-segment bound to
    fit, log what was got, and return the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, e)
    limit = soft if soft != resource.RLIM_INFINITY else 2**20
    segments = max(
        1,
        min(
            INACTIVE_SEGMENTS_OPEN_MAX,
            limit * INACTIVE_SEGMENTS_OPEN_FILES_PERCENT // 100 // OPEN_FILES_PER_INACTIVE_SEGMENT,
        ),
    )
    OPEN_SEGMENT_FILES.capacity = segments
    log.info(
        "open-file limit %d (hard %s): up to %d partitions and %d open inactive segments",
        limit,
        "unlimited" if hard == resource.RLIM_INFINITY else hard,
        partitions_allowed_by_open_files(limit),
        segments,
    )
    return limit


def partitions_allowed_by_open_files(limit: int) -> int:
    """Partitions that fit in an open-file limit (PARTITIONS_OPEN_FILES_PERCENT of it)."""
    return limit * PARTITIONS_OPEN_FILES_PERCENT // 100


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        data_dir: Path,
        clock: Clock,
        purgatory: Purgatory,
        topic_defaults: dict[str, str],
    ) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.clock = clock
        self.purgatory = purgatory
        self.topic_defaults = topic_defaults
        self._partitions: dict[TopicPartition, Partition] = {}
        self._topic_versions: dict[str, int] = {}
        self.open_files_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        """Set by the broker after :func:`raise_open_files_limit`."""

    def __iter__(self) -> Iterator[Partition]:
        return iter(list(self._partitions.values()))

    def __len__(self) -> int:
        return len(self._partitions)

    def topic_config(self, topic: TopicMetadata) -> TopicConfig:
        return TopicConfig.from_entries(topic.configs, self.topic_defaults)

    def get(self, topic_partition: TopicPartition) -> Partition:
        partition = self._partitions.get(topic_partition)
        if partition is None:
            raise errors.UnknownTopicOrPartition(f"this broker does not host {topic_partition}")
        return partition

    def find(self, topic_partition: TopicPartition) -> Partition | None:
        return self._partitions.get(topic_partition)

    def partition_dir(self, topic_partition: TopicPartition) -> Path:
        return self.data_dir / f"{topic_partition.topic}-{topic_partition.partition}"

    def apply_topic(self, topic: TopicMetadata, *, recover: bool) -> None:
        """Open, update or stop hosting the partitions of ``topic`` as its record says."""
        if self._topic_versions.get(topic.name) == topic.version:
            return
        config = self.topic_config(topic)
        created = False
        for index, state in topic.partitions.items():
            topic_partition = TopicPartition(topic.name, index)
            partition = self._partitions.get(topic_partition)
            hosted = self.node_id in state.replicas
            if partition is None and hosted:
                directory = self.partition_dir(topic_partition)
                if directory.exists():
                    partition_log = PartitionLog.open(
                        directory, config, self.clock, recover=recover
                    )
                else:  # a new partition (CreatePartitions): nothing to fsync one by one
                    partition_log = PartitionLog.create(directory, config, self.clock)
                    created = True
                self._partitions[topic_partition] = Partition(
                    topic_partition, partition_log, state, self.node_id, self.purgatory
                )
            elif partition is not None and hosted:
                if partition.log.config != config:
                    partition.log.update_config(config)
                if partition.state != state:
                    partition.update_state(state)
            elif partition is not None:
                self._close_and_delete(topic_partition)
        if created:
            self.sync_data_dir()
        self._topic_versions[topic.name] = topic.version

    def create_logs(self, topic: TopicMetadata) -> list[tuple[TopicPartition, PartitionLog]]:
        """Make the empty logs of a new topic's partitions that this broker hosts. Safe
        on a worker thread: it touches only those directories (a leftover directory of
        the same name, from a creation that never committed, is removed first). On
        failure, removes what it made and raises KafkaStorageError. The caller fsyncs
        the data directory (:meth:`sync_data_dir`) before the topic is made known."""
        config = self.topic_config(topic)
        made: list[tuple[TopicPartition, PartitionLog]] = []
        try:
            for index, state in sorted(topic.partitions.items()):
                if self.node_id not in state.replicas:
                    continue
                topic_partition = TopicPartition(topic.name, index)
                assert topic_partition not in self._partitions, f"{topic_partition} exists"
                directory = self.partition_dir(topic_partition)
                if directory.exists():
                    log.warning("removing %s, left by a creation that did not finish", directory)
                    shutil.rmtree(directory)
                made.append((topic_partition, PartitionLog.create(directory, config, self.clock)))
        except (OSError, errors.KafkaError) as e:
            self.discard_logs(made)
            for index in topic.partitions:
                shutil.rmtree(
                    self.partition_dir(TopicPartition(topic.name, index)), ignore_errors=True
                )
            if isinstance(e, errors.KafkaError):
                raise
            raise errors.KafkaStorageError(f"cannot create topic {topic.name!r}: {e}") from e
        return made

    def sync_data_dir(self) -> None:
        """fsync the data directory, making new partition directories durable (one
        fsync for every partition created since). Raises KafkaStorageError."""
        try:
            fsync_directory(self.data_dir)
        except OSError as e:
            raise errors.KafkaStorageError(f"cannot fsync {self.data_dir}: {e}") from e

    @staticmethod
    def discard_logs(logs: Sequence[tuple[TopicPartition, PartitionLog]]) -> None:
        """Close and remove logs made by :meth:`create_logs` that will not be used.
        Safe on a worker thread; never raises."""
        for _, partition_log in logs:
            try:
                partition_log.close()
            except errors.KafkaError as e:
                log.warning("closing %s: %s", partition_log.directory, e)
            shutil.rmtree(partition_log.directory, ignore_errors=True)

    def install(
        self, topic: TopicMetadata, logs: Sequence[tuple[TopicPartition, PartitionLog]]
    ) -> None:
        """Host the logs :meth:`create_logs` made, now that ``topic`` (as stored) names
        them. On the event loop."""
        by_partition = dict(logs)
        for index, state in topic.partitions.items():
            topic_partition = TopicPartition(topic.name, index)
            partition_log = by_partition.get(topic_partition)
            if partition_log is not None:
                self._partitions[topic_partition] = Partition(
                    topic_partition, partition_log, state, self.node_id, self.purgatory
                )
        self._topic_versions[topic.name] = topic.version

    def remove_topic(self, name: str) -> None:
        for topic_partition in [tp for tp in self._partitions if tp.topic == name]:
            self._close_and_delete(topic_partition)
        self._topic_versions.pop(name, None)

    def _close_and_delete(self, topic_partition: TopicPartition) -> None:
        partition = self._partitions.pop(topic_partition)
        partition.log.close()
        shutil.rmtree(partition.log.directory, ignore_errors=True)
        self.purgatory.notify(topic_partition)
        log.info("deleted partition %s", topic_partition)

    def dirty_partitions(self) -> list[Partition]:
        return [p for p in self._partitions.values() if p.dirty]

    def close_all(self) -> None:
        for partition in self._partitions.values():
            partition.log.close()
        self._partitions.clear()
        self._topic_versions.clear()
