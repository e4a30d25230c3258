"""The broker process, wired together: metadata store, replica manager, topic manager,
producer ids, network server, and the background tasks (flusher, retention).

Start-up::

    lock data dir ─▶ check meta.properties (node id) ─▶ read .clean-shutdown
      ─▶ open metadata store ─▶ check/write meta.properties (cluster id)
      ─▶ open local partition logs (recover them if the marker was missing)
      ─▶ remove .clean-shutdown ─▶ bind the port ─▶ background tasks
      ─▶ load the group coordinators ─▶ accept clients

Shutdown (SIGTERM/SIGINT) runs the same steps backwards and ends by fsyncing every log
and writing the ``.clean-shutdown`` marker, so the next start skips recovery.

A fatal storage error (a failed fsync, a disk that turned full or read-only under the
flusher, a log that cannot be closed) takes the other way out: the broker stops
listening and ends with :class:`BrokerFatalError`, without closing (fsyncing,
checkpointing) the logs and without the marker, so the next start recovers every log.
A second fsync must not be trusted after a failed one: the kernel reports a writeback
error once and may already have dropped the dirty pages, so it would succeed over lost
data (as Kafka, which halts the broker at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import signal
import socket
from collections.abc import Coroutine
from pathlib import Path
from typing import IO, Any

from sluice.broker.allocator import tune_allocator
from sluice.broker.coordinator_log import PartitionCoordinatorLog
from sluice.broker.dispatcher import Dispatcher
from sluice.broker.produce_checks import ProduceChecks
from sluice.broker.producer_ids import ProducerIdManager
from sluice.broker.purgatory import Purgatory
from sluice.broker.replica_manager import ReplicaManager, raise_open_files_limit
from sluice.broker.server import ConnectionInfo, Response, Server
from sluice.broker.topics import TopicManager
from sluice.cluster.embedded import FILE_NAME as METADATA_FILE_NAME
from sluice.cluster.embedded import EmbeddedMetadataStore
from sluice.cluster.model import BrokerInfo
from sluice.common.clock import SYSTEM_CLOCK, Clock
from sluice.common.config import BrokerConfig, BrokerConfigError
from sluice.common.errors import KafkaStorageError
from sluice.group.config import OFFSETS_COMMIT_TIMEOUT_MS, OFFSETS_TOPIC, GroupConfig
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
from sluice.broker import meta_properties  # isort: skip

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
CHECKPOINT_INTERVAL_MS = 5_000
"""Longest time a partition's recovery point and high watermark stay unwritten after a
flush (Kafka's log.flush.offset.checkpoint.interval.ms is 60 s)."""


class DataDirInUse(Exception):
    pass


class BrokerFatalError(Exception):
    """The broker cannot go on, or cannot start, because of its storage. The message is
    one line: what failed, on which file or directory, and what to do. The broker
    leaves no clean-shutdown marker behind it."""


def _os_error_of(error: BaseException) -> OSError | None:
    """The OSError behind ``error`` (itself, or down its chain of causes)."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__
    return cause


def _describe_os_error(error: BaseException) -> str:
    """``error`` as one line: the OS's words, and the file when the error names one."""
    cause = _os_error_of(error)
    if cause is not None and cause.strerror:
        where = f" ({cause.filename})" if cause.filename else ""
        return f"{cause.strerror}{where}"
    return str(error).removeprefix("KAFKA_STORAGE_ERROR: ")


def _what_to_do(error: BaseException) -> str:
    """The advice that ends a fatal storage message, chosen by the OS error number."""
    cause = _os_error_of(error)
    number = cause.errno if cause is not None else None
    if number in (errno.ENOSPC, errno.EDQUOT):
        return "free space on that filesystem, then start the broker again"
    if number == errno.EROFS:
        return (
            "make the filesystem writable (it may have been remounted read-only after "
            "a disk error: check the kernel log), then start the broker again"
        )
    if number in (errno.EACCES, errno.EPERM):
        return "give the broker's user write access to the data directory"
    return "check the disk and the kernel log (dmesg) before starting the broker again"


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
        self.server = Server(
            config.host,
            config.port,
            self._handle,
            connections_max_idle_ms=config.connections_max_idle_ms,
            max_connections=config.max_connections,
            max_connections_per_ip=config.max_connections_per_ip,
        )
        self._dispatcher: Dispatcher | None = None
        self.fatal_error: BrokerFatalError | None = None
        """Set by :meth:`fail`: the broker is stopping without the clean-shutdown marker."""
        self.produce_checks = ProduceChecks()
        """Threads for the records checks of large produced batches."""

    async def _handle(self, frame: bytes, connection: ConnectionInfo) -> Response:
        assert self._dispatcher is not None, "requests arrive only after start()"
        return await self._dispatcher.handle(frame, connection)

    def _lock_data_dir(self) -> None:
        if self.data_dir.exists() and not self.data_dir.is_dir():
            raise BrokerFatalError(
                f"the data directory {self.data_dir} is a file, not a directory: "
                "pass --data-dir a directory (it is created if missing)"
            )
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise BrokerFatalError(
                f"cannot create the data directory {self.data_dir}: a file is in its path; "
                "pass --data-dir a directory (it is created if missing)"
            ) from None
        try:
            self._lock_file = open(self.data_dir / LOCK_FILE, "wb")  # noqa: SIM115
        except OSError as e:
            raise BrokerFatalError(
                f"cannot open the data directory {self.data_dir}: {_describe_os_error(e)}; "
                f"{_what_to_do(e)}"
            ) from None
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirInUse(
                f"data directory {self.data_dir} is used by another running broker; "
                "stop it or pass a different --data-dir"
            ) from None

    async def start(self) -> None:
        self.replicas.open_files_limit = raise_open_files_limit()
        self._lock_data_dir()
        stored_identity = meta_properties.read(self.data_dir)
        if stored_identity is not None:
            meta_properties.check_node_id(self.data_dir, stored_identity, self.config.node_id)
        try:
            self._open_storage(stored_identity)
        except (KafkaStorageError, OSError) as e:
            raise BrokerFatalError(
                f"cannot open the data directory {self.data_dir}: {_describe_os_error(e)}; "
                f"{_what_to_do(e)}"
            ) from None
        try:
            await self._start_services()
        except BaseException:
            self._close_storage_after_failed_start()
            raise

    def _close_storage_after_failed_start(self) -> None:
        """Nothing was served: close the logs and leave the marker, so that the next
        start (say, on a free port) need not recover. A storage error here leaves no
        marker, which only costs that recovery."""
        try:
            self.replicas.close_all()
            self.store.close()
            write_clean_shutdown_marker(self.data_dir)
        except (KafkaStorageError, OSError) as e:
            log.warning("closing the logs after a failed start: %s", _describe_os_error(e))
        self._release_lock()

    def _open_storage(self, stored_identity: meta_properties.MetaProperties | None) -> None:
        """Open the metadata store and every local log; remove the marker once done."""
        new_data_dir = not (self.data_dir / METADATA_FILE_NAME).exists()
        clean = clean_shutdown_marker_exists(self.data_dir)
        if new_data_dir:
            log.info("new data directory %s", self.data_dir)
        elif not clean:
            log.info("no clean-shutdown marker: recovering partition logs")
        self.store = EmbeddedMetadataStore(self.data_dir)
        if stored_identity is None:
            meta_properties.write(
                self.data_dir,
                meta_properties.MetaProperties(self.config.node_id, self.store.cluster_id()),
            )
        else:
            meta_properties.check_cluster_id(
                self.data_dir, stored_identity, self.store.cluster_id()
            )
        advertised_port = self.config.advertised_port or self.config.port
        self.node = BrokerInfo(self.config.node_id, self._advertised_host, advertised_port)
        self.store.register_broker(self.node)
        self.topics = TopicManager(self.store, self.replicas, self.config)
        self.topics.open_files_limit = self.replicas.open_files_limit
        self.topics.open_local_replicas(recover=not clean)
        remove_clean_shutdown_marker(self.data_dir)
        self._ensure_offsets_topic()
        self.producer_ids = ProducerIdManager(self.store)

    async def _start_services(self) -> None:
        try:
            group_config = GroupConfig.from_properties(self.config.group_properties)
        except ValueError as e:
            raise BrokerConfigError(str(e)) from None
        offsets_topic = self.topics.require(OFFSETS_TOPIC)
        self.groups = GroupCoordinatorRuntime(
            PartitionCoordinatorLog(
                OFFSETS_TOPIC,
                self.replicas,
                self.purgatory,
                self.clock,
                offsets_topic.partition_count,
                OFFSETS_COMMIT_TIMEOUT_MS,
            ),
            group_config,
            self.clock,
        )
        self._dispatcher = Dispatcher(self)
        # Bind now (a port in use fails here); accept clients once the group
        # coordinators are loaded (run).
        await self.server.start(start_serving=False)
        if self.config.port == 0 and not self.config.advertised_port:  # any free port
            self.node = BrokerInfo(self.config.node_id, self._advertised_host, self.server.port)
            self.store.register_broker(self.node)

    async def _start_serving(self) -> None:
        await self.server.start_serving()
        log.info(
            "sluice broker %d ready on %s:%d (data in %s, %d partition(s))",
            self.config.node_id,
            self.config.host,
            self.server.port,
            self.data_dir,
            len(self.replicas),
        )

    @property
    def _advertised_host(self) -> str:
        """advertised.listeners (or advertised.host), else the listening host; a
        listener with no host is advertised under this machine's name, as in Kafka."""
        if self.config.advertised_host:
            return self.config.advertised_host
        listener = self.config.listeners
        if listener is not None and not listener.host:
            return socket.getfqdn()
        return self.config.host

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

    def fail(self, message: str) -> None:
        """Stop because of a fatal storage error: no more fsyncs, no checkpoints, no
        clean-shutdown marker. The first failure is the one reported."""
        if self.fatal_error is None:
            self.fatal_error = BrokerFatalError(message)
        self.request_stop()

    def check_storage_error(self, error: BaseException, topic_partition: object) -> None:
        """A request met a storage error: an I/O error (EIO, from a write or an fsync
        before an acknowledgement) means the disk may have lost written data, so the
        broker stops (:meth:`fail`); other errors (full, read-only) are the request's."""
        cause = _os_error_of(error)
        if cause is not None and cause.errno == errno.EIO:
            self.fail(
                f"writing partition {topic_partition} in {self.data_dir} failed: "
                f"{_describe_os_error(error)}; the broker stops without the clean-shutdown "
                f"marker and the next start recovers the logs; {_what_to_do(error)}"
            )

    async def run(self) -> None:
        """Serve until :meth:`request_stop`, then shut down cleanly; after :meth:`fail`,
        stop without the marker and raise :class:`BrokerFatalError`."""
        try:
            async with asyncio.TaskGroup() as tasks:
                background = [
                    tasks.create_task(
                        self._stop_on_storage_error("the log flusher", self._flush_periodically())
                    ),
                    tasks.create_task(
                        self._stop_on_storage_error(
                            "retention", self._apply_retention_periodically()
                        )
                    ),
                    tasks.create_task(
                        self._stop_on_storage_error("the log cleaner", self._clean_periodically())
                    ),
                ]
                # Load before serving: loading runs on the event loop in slices, so a
                # client served meanwhile waits a slice between two responses, and
                # groups of partitions not loaded yet got NOT_COORDINATOR although
                # FindCoordinator named this broker. librdkafka (2.10+) re-bootstraps
                # after a restart: Metadata and FindCoordinator pipelined on a
                # bootstrap connection that it drops as soon as the Metadata answer
                # arrives; a FindCoordinator answer a slice later is lost, and an
                # admin call waiting on it hangs until its timeout. Clients that
                # connect while we load are refused and retry.
                await self.groups.start(tasks, self._led_offsets_partitions())
                await self._start_serving()
                await self._stopping.wait()
                self.groups.stop()
                for task in background:
                    task.cancel()
        finally:
            await self.shutdown()

    async def _stop_on_storage_error(self, name: str, loop: Coroutine[Any, Any, None]) -> None:
        """Run a background loop; a storage error in it is fatal (see :meth:`fail`)."""
        try:
            await loop
        except (KafkaStorageError, OSError) as e:
            self.fail(
                f"{name} could not write to {self.data_dir}: {_describe_os_error(e)}; "
                f"{_what_to_do(e)}"
            )

    async def shutdown(self) -> None:
        await self.server.stop()
        await self.topics.close()
        self.produce_checks.close()
        if self.fatal_error is None:
            self._close_logs()
        self.store.close()
        if self.fatal_error is not None:
            # The logs stay as they are: no fsync that could now succeed over lost pages,
            # no checkpoint, no marker. Process exit closes their files.
            self._release_lock()
            log.debug("sluice broker %d stopped on a fatal error", self.config.node_id)
            raise self.fatal_error
        try:
            write_clean_shutdown_marker(self.data_dir)
        except OSError as e:
            self._release_lock()
            raise BrokerFatalError(
                f"cannot write the clean-shutdown marker in {self.data_dir}: "
                f"{_describe_os_error(e)}; the next start recovers the logs; {_what_to_do(e)}"
            ) from None
        self._release_lock()
        log.info("sluice broker %d stopped cleanly", self.config.node_id)

    def _close_logs(self) -> None:
        """Close (fsync, checkpoint) every log; the first failure is fatal and the logs
        after it are left for recovery."""
        for partition in list(self.replicas):
            try:
                partition.log.close()
            except (KafkaStorageError, OSError) as e:
                self.fail(
                    f"closing partition {partition.topic_partition} in "
                    f"{partition.log.directory} failed: {_describe_os_error(e)}; the next "
                    f"start recovers the logs; {_what_to_do(e)}"
                )
                return
        self.replicas.close_all()

    def _release_lock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

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
        stops the broker (:meth:`fail`), as in Kafka: the kernel may have dropped the
        dirty pages, so carrying on could acknowledge data that is gone."""
        now_ms = self.clock.monotonic_ms()
        for partition in self.replicas.dirty_partitions():
            if self.fatal_error is not None:
                return
            if now_ms - partition.last_flush_ms < partition.log.config.flush_ms:
                continue
            partition.dirty = False
            partition.last_flush_ms = now_ms
            pending = partition.log.begin_flush()
            try:
                await asyncio.to_thread(pending.sync)
            except KafkaStorageError as e:
                self.fail(
                    f"fsync of partition {partition.topic_partition} in "
                    f"{partition.log.directory} failed: {_describe_os_error(e)}; data "
                    "acknowledged since the last fsync may be lost, so the broker stops "
                    "without the clean-shutdown marker and the next start recovers the logs; "
                    f"{_what_to_do(e)}"
                )
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
        except KafkaStorageError as e:
            log.warning(
                "cleaning %s failed; will try again: %s",
                partition_log.directory.name,
                _describe_os_error(e),
            )
            plan.discard()
            return False
        swapped = partition_log.swap_cleaned(plan)
        if swapped:
            log.info("compacted %s: %s", partition_log.directory.name, stats)
        return swapped


async def serve(config: BrokerConfig) -> None:
    """Run a broker until SIGTERM or SIGINT."""
    tune_allocator()
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
