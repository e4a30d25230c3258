"""The broker process, wired together: metadata store, replica manager, topic manager,
producer ids, network server, and the background tasks (flusher, retention).

Start-up::

    lock data dir ─▶ read & remove .clean-shutdown ─▶ open metadata store
      ─▶ open local partition logs (recover them if the marker was missing)
      ─▶ listen ─▶ background tasks

Shutdown (SIGTERM/SIGINT) runs the same steps backwards and ends by fsyncing every log
and writing the ``.clean-shutdown`` marker, so the next start skips recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import signal
from pathlib import Path
from typing import IO

from sluice.broker.dispatcher import Dispatcher
from sluice.broker.offsets_log import OFFSETS_TOPIC, PartitionOffsetsLog
from sluice.broker.produce_checks import ProduceChecks
from sluice.broker.producer_ids import ProducerIdManager
from sluice.broker.purgatory import Purgatory
from sluice.broker.replica_manager import ReplicaManager
from sluice.broker.server import ConnectionInfo, Response, Server
from sluice.broker.topics import TopicManager
from sluice.cluster.embedded import EmbeddedMetadataStore
from sluice.cluster.model import BrokerInfo
from sluice.common.clock import SYSTEM_CLOCK, Clock
from sluice.common.config import BrokerConfig, BrokerConfigError
from sluice.common.errors import KafkaStorageError
from sluice.group.config import GroupConfig
from sluice.group.runtime import GroupCoordinatorRuntime
from sluice.storage import (
    PartitionLog,
    clean_shutdown_marker_exists,
    cleaner,
    remove_clean_shutdown_marker,
    write_clean_shutdown_marker,
)

# Handlers register themselves with the dispatcher when imported.
from sluice.broker import handlers  # noqa: F401  isort: skip

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
CHECKPOINT_INTERVAL_MS = 5_000
"""Longest time a partition's recovery point and high watermark stay unwritten after a
flush (Kafka's log.flush.offset.checkpoint.interval.ms is 60 s)."""


class DataDirInUse(Exception):
    pass


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.data_dir = Path(config.data_dir)
        self.purgatory = Purgatory()
        self._lock_file: IO[bytes] | None = None
        self._stopping = asyncio.Event()
        self.replicas = ReplicaManager(
            config.node_id, self.data_dir, clock, self.purgatory, config.topic_defaults
        )
        self.server = Server(config.host, config.port, self._handle)
        self._dispatcher: Dispatcher | None = None
        self.produce_checks = ProduceChecks()
        """Threads for the records checks of large produced batches."""

    async def _handle(self, frame: bytes, connection: ConnectionInfo) -> Response:
        assert self._dispatcher is not None, "requests arrive only after start()"
        return await self._dispatcher.handle(frame, connection)

    def _lock_data_dir(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.data_dir / LOCK_FILE, "wb")  # noqa: SIM115
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirInUse(
                f"data directory {self.data_dir} is used by another running broker; "
                "stop it or pass a different --data-dir"
            ) from None

    async def start(self) -> None:
        self._lock_data_dir()
        clean = clean_shutdown_marker_exists(self.data_dir)
        if not clean:
            log.info("no clean-shutdown marker: recovering partition logs")
        self.store = EmbeddedMetadataStore(self.data_dir)
        advertised = self.config.advertised_host or self.config.host
        self.node = BrokerInfo(self.config.node_id, advertised, self.config.port)
        self.store.register_broker(self.node)
        self.topics = TopicManager(self.store, self.replicas, self.config)
        self.topics.open_local_replicas(recover=not clean)
        remove_clean_shutdown_marker(self.data_dir)
        self._ensure_offsets_topic()
        self.producer_ids = ProducerIdManager(self.store)
        try:
            group_config = GroupConfig.from_properties(self.config.group_properties)
        except ValueError as e:
            raise BrokerConfigError(str(e)) from None
        offsets_topic = self.topics.require(OFFSETS_TOPIC)
        self.groups = GroupCoordinatorRuntime(
            PartitionOffsetsLog(
                self.replicas, self.purgatory, self.clock, offsets_topic.partition_count
            ),
            group_config,
            self.clock,
        )
        self._dispatcher = Dispatcher(self)
        await self.server.start()
        if self.config.port == 0:  # tests ask for any free port
            self.node = BrokerInfo(self.config.node_id, advertised, self.server.port)
            self.store.register_broker(self.node)
        log.info(
            "sluice broker %d ready on %s:%d (data in %s, %d partition(s))",
            self.config.node_id,
            self.config.host,
            self.server.port,
            self.data_dir,
            len(self.replicas),
        )

    def _ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` (compacted) on first start. Its partition count
        must never change afterwards: groups are placed by hashing onto it."""
        existing = self.topics.get(OFFSETS_TOPIC)
        if existing is not None:
            if existing.partition_count != self.config.offsets_topic_num_partitions:
                log.warning(
                    "%s has %d partitions; offsets.topic.num.partitions=%d is ignored",
                    OFFSETS_TOPIC,
                    existing.partition_count,
                    self.config.offsets_topic_num_partitions,
                )
            return
        self.topics.create(
            OFFSETS_TOPIC,
            self.config.offsets_topic_num_partitions,
            self.config.offsets_topic_replication_factor,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.config.offsets_topic_segment_bytes),
            },
        )

    def _led_offsets_partitions(self) -> list[int]:
        """The ``__consumer_offsets`` partitions this broker leads: it coordinates the
        groups that hash onto them."""
        return [
            partition.topic_partition.partition
            for partition in self.replicas
            if partition.topic_partition.topic == OFFSETS_TOPIC and partition.is_leader
        ]

    def request_stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Serve until :meth:`request_stop`, then shut down cleanly."""
        try:
            async with asyncio.TaskGroup() as tasks:
                background = [
                    tasks.create_task(self._flush_periodically()),
                    tasks.create_task(self._apply_retention_periodically()),
                    tasks.create_task(self._clean_periodically()),
                ]
                await self.groups.start(tasks, self._led_offsets_partitions())
                await self._stopping.wait()
                self.groups.stop()
                for task in background:
                    task.cancel()
        finally:
            await self.shutdown()

    async def shutdown(self) -> None:
        await self.server.stop()
        self.produce_checks.close()
        self.replicas.close_all()
        self.store.close()
        write_clean_shutdown_marker(self.data_dir)
        if self._lock_file is not None:
            self._lock_file.close()
        log.info("sluice broker %d stopped cleanly", self.config.node_id)

    async def _flush_periodically(self) -> None:
        interval_s = self.config.log_flush_scheduler_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            await self.flush_due()

    async def flush_due(self) -> None:
        """fsync every partition whose unflushed data is older than its flush.ms.

        The fdatasync runs in a worker thread on duplicated descriptors while appends go
        on; the recovery point then moves to what was synced. Checkpoint files (a few
        small fsyncs) are written at most every CHECKPOINT_INTERVAL_MS per partition: a
        stale recovery point only makes recovery rescan a little more. A failed fsync
        stops the broker, as in Kafka: the kernel may have dropped the dirty pages, so
        carrying on could acknowledge data that is gone."""
        now_ms = self.clock.monotonic_ms()
        for partition in self.replicas.dirty_partitions():
            if now_ms - partition.last_flush_ms < partition.log.config.flush_ms:
                continue
            partition.dirty = False
            partition.last_flush_ms = now_ms
            pending = partition.log.begin_flush()
            try:
                await asyncio.to_thread(pending.sync)
            except KafkaStorageError:
                log.critical(
                    "fsync of %s failed; stopping", partition.topic_partition, exc_info=True
                )
                self.request_stop()
                return
            write_checkpoints = now_ms - partition.last_checkpoint_ms >= CHECKPOINT_INTERVAL_MS
            if write_checkpoints:
                partition.last_checkpoint_ms = now_ms
            partition.log.complete_flush(pending, write_checkpoints=write_checkpoints)

    async def _apply_retention_periodically(self) -> None:
        interval_s = self.config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            now_ms = self.clock.wall_ms()
            for partition in self.replicas:
                deleted = partition.log.apply_retention(now_ms)
                if deleted:
                    log.info(
                        "retention deleted %d segment(s) of %s", deleted, partition.topic_partition
                    )
                partition.log.delete_expired_files(now_ms)

    async def _clean_periodically(self) -> None:
        interval_s = self.config.log_cleaner_backoff_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            for partition in self.replicas:
                if partition.log.config.compact and not partition.log.closed:
                    await self.clean(partition.log)

    async def clean(self, partition_log: PartitionLog) -> bool:
        """Compact one log if it is dirty enough: plan here, rewrite in a worker thread
        within the I/O budget, swap the cleaned segments in here. True if it swapped."""
        now_ms = self.clock.wall_ms()
        ratio = partition_log.config.min_cleanable_dirty_ratio
        if not cleaner.needs_cleaning(partition_log, now_ms, min_cleanable_dirty_ratio=ratio):
            return False
        plan = cleaner.prepare(partition_log, now_ms)
        if plan is None:
            return False
        # Cancelled at shutdown, the worker thread finishes its build on its own; the
        # .cleaned files it leaves are removed when the log is next opened.
        try:
            stats = await asyncio.to_thread(
                plan.build, self.config.log_cleaner_io_max_bytes_per_second
            )
        except KafkaStorageError:
            log.exception("cleaning %s failed; will try again", partition_log.directory.name)
            plan.discard()
            return False
        swapped = partition_log.swap_cleaned(plan)
        if swapped:
            log.info("compacted %s: %s", partition_log.directory.name, stats)
        return swapped


async def serve(config: BrokerConfig) -> None:
    """Run a broker until SIGTERM or SIGINT."""
    broker = Broker(config)
    await broker.start()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, broker.request_stop)
    try:
        await broker.run()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signum)
