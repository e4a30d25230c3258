"""The broker's background work on its partition logs: the flusher, retention, the
log cleaner, and the removal of deleted partitions, each a loop of its own::

    every log.flush.scheduler.interval.ms   flush_due: fsync logs older than flush.ms
    every log.retention.check.interval.ms   delete segments past retention
    every log.cleaner.backoff.ms            clean: compact the dirty compacted logs
    when one is due                         remove directories renamed for deletion
                                            (log.segment.delete.delay.ms after the
                                            deletion; at start, those left behind)

They work on hosted partitions only: a detached one (being deleted) is skipped, and the
fsync or cleaning in flight on it when it was detached ends without touching it again
(each runs inside ``Partition.lent_to_worker_thread``, which the deletion waits for). An
error on a partition being deleted is logged, never fatal.

A storage error that escapes a loop, or a failed fsync, is fatal
(:class:`sluice.broker.fatal.FatalStorageStop`): a second fsync must not be trusted
after a failed one, since the kernel reports a writeback error once and may already
have dropped the dirty pages, so it would succeed over lost data (as Kafka, which halts
the broker at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from sluice.broker.extensions.delays import park_again_before_retention
from sluice.broker.fatal import FatalStorageStop, describe_os_error, what_to_do
from sluice.broker.observability.metrics.storage import StorageMetrics
from sluice.broker.replication.partition import Partition
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.common.clock import Clock
from sluice.common.config import BrokerConfig
from sluice.common.errors import KafkaStorageError
from sluice.storage import PartitionLog, cleaner
from sluice.storage.cleaner import CleaningCancelled
from sluice.storage.partition_dirs import DeletedDirectory, deletion_dirs_in, remove_deletion_dir

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_MS = 5_000
"""Longest time a partition's recovery point and high watermark stay unwritten after a
flush (Kafka's log.flush.offset.checkpoint.interval.ms is 60 s)."""


class LogMaintenance:
    """The flusher, retention and cleaner loops over the logs of ``replicas``."""

    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        replicas: ReplicaManager,
        fatal: FatalStorageStop,
        metrics: StorageMetrics | None = None,
    ) -> None:
        self._metrics = metrics if metrics is not None else StorageMetrics()
        self._config = config
        self._clock = clock
        self._replicas = replicas
        self._fatal = fatal
        self._data_dir = Path(config.data_dir)
        self._tasks: list[asyncio.Task[None]] = []
        self._due_this_pass = 0
        """Compacted logs the running cleaner pass found dirty enough to clean."""

    def start(self, tasks: asyncio.TaskGroup) -> None:
        """Start the three loops in ``tasks``; :meth:`stop` cancels them."""
        self._tasks = [
            tasks.create_task(
                self._stop_on_storage_error("the log flusher", self._flush_periodically())
            ),
            tasks.create_task(
                self._stop_on_storage_error("retention", self._apply_retention_periodically())
            ),
            tasks.create_task(
                self._stop_on_storage_error("the log cleaner", self._clean_periodically())
            ),
            tasks.create_task(self._remove_deleted_partitions()),
        ]

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def _stop_on_storage_error(self, name: str, loop: Coroutine[Any, Any, None]) -> None:
        """Run a background loop; a storage error in it is fatal."""
        try:
            await loop
        except (KafkaStorageError, OSError) as e:
            self._fatal.fail(
                f"{name} could not write to {self._data_dir}: {describe_os_error(e)}; "
                f"{what_to_do(e)}"
            )

    async def _flush_periodically(self) -> None:
        interval_s = self._config.log_flush_scheduler_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            await self.flush_due()

    async def flush_due(self) -> None:
        """fsync every partition whose unflushed data is older than its flush.ms.

        The fdatasync runs in a worker thread on duplicated descriptors while appends go
        on; the recovery point then moves to what was synced. Checkpoint files (a few
        small fsyncs) are written at most every CHECKPOINT_INTERVAL_MS per partition: a
        stale recovery point only makes recovery rescan a little more. Their values are
        taken on the loop, after the sync, and the files written in a worker thread too
        (in order with the log's other checkpoint writes: ``CheckpointWriter``), so no
        fsync of the flusher stalls the loop. A failed fsync or checkpoint write stops
        the broker, as in Kafka: the kernel may have dropped the dirty pages, so
        carrying on could acknowledge data that is gone."""
        now_ms = self._clock.monotonic_ms()
        for partition in self._replicas.dirty_partitions():
            if self._fatal.error is not None:
                return
            if partition.detached:  # detached while an earlier partition was synced
                continue
            if now_ms - partition.last_flush_ms < partition.log.config.flush_ms:
                continue
            partition.dirty = False
            partition.last_flush_ms = now_ms
            with partition.lent_to_worker_thread():
                pending = partition.log.begin_flush()
                started = time.perf_counter()
                synced = await self._in_worker_thread(
                    partition,
                    pending.sync,
                    KafkaStorageError,
                    "fsync",
                    "fsync",
                    "data acknowledged since the last fsync may be lost, so the broker stops",
                )
                if not synced:
                    continue
                self._metrics.flush_duration.observe(time.perf_counter() - started)
                if _deleted_meanwhile(partition):  # the deletion owns the log: no checkpoints
                    continue
                write_checkpoints = now_ms - partition.last_checkpoint_ms >= CHECKPOINT_INTERVAL_MS
                if write_checkpoints:
                    partition.last_checkpoint_ms = now_ms
                checkpoints = partition.log.complete_flush(
                    pending, write_checkpoints=write_checkpoints
                )
                if checkpoints is None:
                    continue
                await self._in_worker_thread(
                    partition,
                    checkpoints.run,
                    OSError,
                    "checkpoint",
                    "writing the checkpoints (write, fsync, rename)",
                    "the broker stops",
                )

    async def _in_worker_thread(
        self,
        partition: Partition,
        work: Callable[[], object],
        failure: type[Exception],
        short_name: str,
        what: str,
        consequence: str,
    ) -> bool:
        """Run the flusher's ``work`` for ``partition`` in a worker thread. False when it
        raised ``failure``: only logged if the partition was deleted meanwhile (the
        deletion owns its files), otherwise fatal (``fatal.fail``: the loop of
        :meth:`flush_due` stops at its next partition)."""
        try:
            await asyncio.to_thread(work)
        except failure as e:
            if _deleted_meanwhile(partition):
                log.warning(
                    "%s of %s, deleted meanwhile, failed: %s",
                    short_name,
                    partition.topic_partition,
                    describe_os_error(e),
                )
                return False
            self._fatal.fail(
                f"{what} of partition {partition.topic_partition} in "
                f"{partition.log.directory} failed: {describe_os_error(e)}; {consequence} "
                "without the clean-shutdown marker and the next start recovers the logs; "
                f"{what_to_do(e)}"
            )
            return False
        return True

    async def _apply_retention_periodically(self) -> None:
        interval_s = self._config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            now_ms = self._clock.wall_ms()
            for partition in self._replicas:
                if partition.detached:
                    continue
                moved = park_again_before_retention(partition, now_ms)
                if moved:
                    log.info(
                        "parked %d delayed record(s) of %s again before retention",
                        moved,
                        partition.topic_partition,
                    )
                # On the loop: a directory fsync and a checkpoint when segments went, at
                # most once a partition each log.retention.check.interval.ms (5 min).
                deleted = partition.log.apply_retention(now_ms)
                if deleted:
                    log.info(
                        "retention deleted %d segment(s) of %s", deleted, partition.topic_partition
                    )
                partition.log.delete_expired_files(now_ms)

    async def _clean_periodically(self) -> None:
        interval_s = self._config.log_cleaner_backoff_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            self._due_this_pass = 0
            for partition in self._replicas:
                if (
                    partition.log.config.compact
                    and not partition.detached
                    and not partition.log.closed
                ):
                    with partition.lent_to_worker_thread():
                        await self.clean(partition.log)
            self._metrics.cleaner_partitions_due = self._due_this_pass

    async def _remove_deleted_partitions(self) -> None:
        """Remove each directory renamed for deletion once its time comes, in a worker
        thread; first those a previous run left behind (they are never partitions). A
        directory that cannot be removed is logged and left for the next start."""
        leftovers = await asyncio.to_thread(deletion_dirs_in, self._data_dir)
        if leftovers:
            log.info("removing %d deleted partition directories left behind", len(leftovers))
        self._replicas.schedule_removal(leftovers, self._clock.monotonic_ms())
        while True:
            self._replicas.deleted_dirs_changed.clear()
            now_ms = self._clock.monotonic_ms()
            due = self._replicas.take_due_removals(now_ms)
            if due:
                await asyncio.to_thread(_remove_all, due)
                continue
            next_ms = self._replicas.next_removal_ms()
            timeout_s = None if next_ms is None else max(0, next_ms - now_ms) / 1000
            # asyncio.timeout, not wait_for, which on Python 3.11 can lose a cancellation
            # that comes as the event is set: then this loop never ends (cpython#86296).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._replicas.deleted_dirs_changed.wait()

    async def clean(self, partition_log: PartitionLog) -> bool:
        """Compact one log if it is dirty enough: plan here, rewrite in a worker thread
        within the I/O budget, swap the cleaned segments in here. True if it swapped."""
        now_ms = self._clock.wall_ms()
        ratio = partition_log.config.min_cleanable_dirty_ratio
        if not cleaner.needs_cleaning(partition_log, now_ms, min_cleanable_dirty_ratio=ratio):
            return False
        self._due_this_pass += 1
        plan = cleaner.prepare(partition_log, now_ms)
        if plan is None:
            return False
        # Cancelled at shutdown, the worker thread finishes its build on its own; the
        # .cleaned files it leaves are removed when the log is next opened.
        try:
            stats = await asyncio.to_thread(
                plan.build, self._config.log_cleaner_io_max_bytes_per_second
            )
        except CleaningCancelled:
            log.info("cleaning %s stopped: it is being deleted", partition_log.directory.name)
            plan.discard()
            return False
        except KafkaStorageError as e:
            log.warning(
                "cleaning %s failed; will try again: %s",
                partition_log.directory.name,
                describe_os_error(e),
            )
            plan.discard()
            return False
        swapped = partition_log.swap_cleaned(plan)
        if swapped:
            self._metrics.cleaned(
                stats.bytes_read,
                stats.bytes_written,
                stats.records_removed + stats.tombstones_removed + stats.markers_removed,
                self._clock.wall_ms() / 1000,
            )
            log.info("compacted %s: %s", partition_log.directory.name, stats)
        return swapped


def _deleted_meanwhile(partition: Partition) -> bool:
    """Whether ``partition`` was detached while the loop awaited a worker thread."""
    return partition.detached


def _remove_all(directories: list[DeletedDirectory]) -> None:
    """Worker thread: remove directories renamed for deletion (never raises)."""
    for directory in directories:
        remove_deletion_dir(directory)
