"""The partitions this broker hosts, kept in step with the cluster metadata.

Partition directories are ``<data dir>/<topic>-<partition>/``. When a topic appears in
the metadata and this broker is one of its replicas, its logs are opened (or created);
when it disappears, they are closed and removed.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

from sluice.broker.partition import Partition
from sluice.broker.purgatory import Purgatory
from sluice.cluster.model import TopicMetadata
from sluice.common import errors
from sluice.common.clock import Clock
from sluice.common.config import TopicConfig
from sluice.common.ids import TopicPartition
from sluice.storage import PartitionLog

log = logging.getLogger(__name__)


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
        for index, state in topic.partitions.items():
            topic_partition = TopicPartition(topic.name, index)
            partition = self._partitions.get(topic_partition)
            hosted = self.node_id in state.replicas
            if partition is None and hosted:
                partition_log = PartitionLog.open(
                    self.partition_dir(topic_partition), config, self.clock, recover=recover
                )
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
