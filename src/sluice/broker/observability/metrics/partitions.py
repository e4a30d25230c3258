"""Scrape-time metrics of the partitions hosted here and of the cluster's health as
this broker's metadata sees it.

Per partition (``topic``, ``partition`` labels, the partitions whose logs are here):
offsets, size, segments, whether it is led here, its replicas and in-sync replicas.
Cluster health: under-replicated and under-min-ISR partitions (counted by their leader,
so summing over brokers counts each once), offline partitions (no live leader: every
broker reports the same number, take the max), ISR shrinks and expands written by the
leaders here, leadership changes here, the controller's elections, and which broker is
the controller.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sluice.broker.replication.isr import IsrChanges
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.cluster.controller import Controller
from sluice.cluster.image import MetadataImage

_PARTITION_GAUGES = (
    ("sluice_partition_log_end_offset", "Offset of the next record appended"),
    ("sluice_partition_log_start_offset", "First offset still in the log"),
    ("sluice_partition_high_watermark", "Offset below which records are committed"),
    ("sluice_partition_size_bytes", "Bytes of the partition's segments"),
    ("sluice_partition_segments", "Segments of the partition's log"),
    ("sluice_partition_leader", "1 if this broker leads the partition, else 0"),
    ("sluice_partition_replicas", "Replicas assigned to the partition"),
    ("sluice_partition_in_sync_replicas", "Replicas in the partition's ISR"),
)


class PartitionCollector(Collector):
    def __init__(
        self,
        replicas: ReplicaManager,
        image: Callable[[], MetadataImage],
        controller: Callable[[], Controller | None],
        isr_changes: Callable[[], IsrChanges | None],
    ) -> None:
        self._replicas = replicas
        self._image = image
        self._controller = controller
        self._isr_changes = isr_changes

    def collect(self) -> Iterator[Metric]:
        yield from self._partitions()
        yield from self._health()

    def _partitions(self) -> Iterator[Metric]:
        families = [
            GaugeMetricFamily(name, documentation, labels=["topic", "partition"])
            for name, documentation in _PARTITION_GAUGES
        ]
        for partition in sorted(self._replicas, key=lambda p: p.topic_partition):
            partition_log = partition.log
            if partition_log.closed:
                continue
            state = partition.state
            labels = [partition.topic_partition.topic, str(partition.topic_partition.partition)]
            values = (
                partition_log.log_end_offset,
                partition_log.log_start_offset,
                partition_log.high_watermark,
                partition_log.size_bytes(),
                len(partition_log.segments),
                1 if partition.is_leader else 0,
                len(state.replicas),
                len(state.isr),
            )
            for family, value in zip(families, values, strict=True):
                family.add_metric(labels, value)
        yield from families

    def _health(self) -> Iterator[Metric]:
        under_replicated = under_min_isr = 0
        for partition in self._replicas:
            if not partition.is_leader or partition.log.closed:
                continue
            isr = len(partition.state.isr)
            if isr < len(partition.state.replicas):
                under_replicated += 1
            if isr < partition.log.config.min_insync_replicas:
                under_min_isr += 1
        image = self._image()
        yield GaugeMetricFamily(
            "sluice_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replicas",
            value=under_replicated,
        )
        yield GaugeMetricFamily(
            "sluice_under_min_isr_partitions",
            "Partitions led here whose ISR is smaller than min.insync.replicas",
            value=under_min_isr,
        )
        yield GaugeMetricFamily(
            "sluice_offline_partitions",
            "Partitions of the cluster without a live leader, as this broker's metadata sees them",
            value=len(image.offline_partitions()),
        )
        yield GaugeMetricFamily(
            "sluice_brokers_live", "Brokers registered in the cluster", value=len(image.brokers)
        )
        controller = self._controller()
        yield GaugeMetricFamily(
            "sluice_controller_active",
            "1 on the broker acting as controller, else 0",
            value=1 if controller is not None and controller.epoch is not None else 0,
        )
        yield CounterMetricFamily(
            "sluice_leader_elections",
            "Partitions whose leader the controller changed while it ran here",
            value=0 if controller is None else controller.leader_elections,
        )
        yield CounterMetricFamily(
            "sluice_leadership_changes",
            "Times a partition hosted here became led here or stopped being led here",
            value=self._replicas.leadership_changes,
        )
        isr_changes = self._isr_changes()
        yield CounterMetricFamily(
            "sluice_isr_shrinks",
            "ISR changes written by leaders here that removed replicas",
            value=0 if isr_changes is None else isr_changes.shrinks,
        )
        yield CounterMetricFamily(
            "sluice_isr_expands",
            "ISR changes written by leaders here that added replicas",
            value=0 if isr_changes is None else isr_changes.expands,
        )
