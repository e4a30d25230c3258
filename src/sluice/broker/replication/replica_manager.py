"""The partitions this broker hosts, kept in step with the cluster metadata.

Partition directories are ``<data dir>/<topic>-<partition>/``, each with a
``partition.metadata`` file naming the topic's id, so a directory left by a deleted topic
is never taken for a new topic of the same name. The broker's metadata task
(:mod:`sluice.broker.replication.metadata_applier`) drives what is hosted: logs are opened
or created in a worker thread (:meth:`ReplicaManager.open_logs`) and installed on the event loop.

A partition that goes away (its topic deleted, or its replica moved off this broker) is
deleted as Kafka deletes it::

    event loop     detach: requests no longer find it; the flusher, retention and the
                   cleaner skip it; a cleaning in flight is cancelled
                   wait until the jobs it lent to worker threads came back (one fsync,
                   one cancelled cleaning)
    worker thread  close it without writing (its segments' log files stay open, for
                   reads in flight to finish); rename the directory to
                   ``<topic>-<partition>.<id>-delete`` (``storage.partition_dirs``);
                   fsync the data directory
    event loop     the name is free: a new topic of that name may be made at once
    later          after log.segment.delete.delay.ms (``broker.log_maintenance``): its
                   files are closed and the renamed directory removed (a directory
                   left by a broker that stopped is removed at its next start)

A failure on the way is logged and never stops the broker: the data is being deleted.

Topics created by this broker take a faster path (:meth:`ReplicaManager.create_logs`,
on a worker thread): their empty logs are made before the metadata names them, with one
fsync of the data directory for the whole batch, kept aside (:meth:`prepare`) and
installed when the metadata naming them is applied. A batch that fails removes what it
made.

The open-file budget lives here too: :func:`raise_open_files_limit` lifts the soft
RLIMIT_NOFILE to the hard limit at start, and :func:`partitions_allowed_by_open_files`
says how many partitions fit in it (each keeps its active segment's ``.log`` open).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from sluice.broker.replication.leadership_log import LeadershipLog
from sluice.broker.replication.partition import IsrChangeSink, Partition
from sluice.broker.replication.purgatory import Purgatory
from sluice.cluster.model import BrokerInfo, TopicId, TopicMetadata
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
from sluice.storage.checkpoint import (
    fsync_directory,
    read_partition_topic_id,
    write_partition_topic_id,
)
from sluice.storage.partition_dirs import DeletedDirectory, close_quietly, rename_for_deletion
from sluice.storage.segment import OPEN_SEGMENT_FILES

log = logging.getLogger(__name__)

NOT_REGISTERED = 2**63 - 1
"""The broker epoch of a broker not registered yet: later than every write of a store
that orders writes and registrations (ZooKeeper's zxids), so that until the broker
registers, its partitions lead no state such a store wrote (each is about a previous
run). A store that does not order them (one node's file) is not concerned."""

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
    log.debug(
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
        self._prepared: dict[TopicPartition, tuple[TopicId, PartitionLog]] = {}
        """Logs made for topics being created here, not yet in the applied metadata."""
        self.partition_exists: Callable[[TopicPartition], bool] = lambda _: False
        """Whether the cluster metadata has a partition (set by the broker once its
        metadata is loaded)."""
        self.isr_changes: IsrChangeSink | None = None
        """Where leaders send ISR changes (set by the broker in a cluster)."""
        self.broker_epoch = NOT_REGISTERED
        """This broker's registration epoch (:meth:`registered`): partitions lead no
        state written before it."""
        self.open_files_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        """Set by the broker after :func:`raise_open_files_limit`."""
        self.leadership_changes = 0
        """Times a partition hosted here became led here or stopped being (a metric)."""
        self.leadership_log = LeadershipLog(node_id)
        """The same changes, said in one line per applied metadata (:meth:`say_leadership`)."""
        self._deleted_dirs: list[tuple[int, DeletedDirectory]] = []
        """Directories renamed for deletion, each with the monotonic time it may go."""
        self.deleted_dirs_changed = asyncio.Event()
        """Set when a directory is scheduled for removal (the remover waits on it)."""

    def __iter__(self) -> Iterator[Partition]:
        return iter(list(self._partitions.values()))

    def __len__(self) -> int:
        return len(self._partitions)

    def topic_config(self, topic: TopicMetadata) -> TopicConfig:
        return TopicConfig.from_entries(topic.configs, self.topic_defaults)

    def get(self, topic_partition: TopicPartition) -> Partition:
        """The hosted partition; NOT_LEADER_OR_FOLLOWER when the cluster has it elsewhere
        (clients look the leader up again), UNKNOWN_TOPIC_OR_PARTITION when it has not."""
        partition = self._partitions.get(topic_partition)
        if partition is None:
            if self.partition_exists(topic_partition):
                raise errors.NotLeaderOrFollower(
                    f"{topic_partition} is not hosted by broker {self.node_id}"
                )
            raise errors.UnknownTopicOrPartition(f"this broker does not host {topic_partition}")
        return partition

    def find(self, topic_partition: TopicPartition) -> Partition | None:
        return self._partitions.get(topic_partition)

    def partition_dir(self, topic_partition: TopicPartition) -> Path:
        return self.data_dir / f"{topic_partition.topic}-{topic_partition.partition}"

    def open_logs_of(
        self, wanted: Sequence[tuple[TopicMetadata, Sequence[int]]], *, recover: bool
    ) -> list[tuple[TopicMetadata, list[tuple[TopicPartition, PartitionLog]]]]:
        """Worker thread: :meth:`open_logs` for several topics, with one fsync of the
        data directory for all the partitions created."""
        opened: list[tuple[TopicMetadata, list[tuple[TopicPartition, PartitionLog]]]] = []
        try:
            for topic, indexes in wanted:
                opened.append((topic, self.open_logs(topic, indexes, recover=recover, sync=False)))
            self.sync_data_dir()
        except errors.KafkaError:
            for _, logs in opened:
                for _, partition_log in logs:
                    partition_log.close()
            raise
        return opened

    def open_logs(
        self, topic: TopicMetadata, indexes: Sequence[int], *, recover: bool, sync: bool = True
    ) -> list[tuple[TopicPartition, PartitionLog]]:
        """Worker thread: the logs of these partitions of ``topic``, opened (and
        recovered when ``recover``) where their directory holds this topic, created
        otherwise. A directory left by a deleted topic of the same name (its
        ``partition.metadata`` names another topic id: the topic was deleted and made
        again while this broker was away) is removed first. Raises KafkaStorageError,
        closing what it opened. ``sync``: fsync the data directory if a partition was
        created (else the caller does)."""
        config = self.topic_config(topic)
        opened: list[tuple[TopicPartition, PartitionLog]] = []
        created = False
        try:
            for index in indexes:
                topic_partition = TopicPartition(topic.name, index)
                directory = self.partition_dir(topic_partition)
                stored_id = read_partition_topic_id(directory)
                if directory.exists() and stored_id not in (None, topic.topic_id):
                    log.warning(
                        "removing %s: it holds topic id %s, a deleted topic of that name",
                        directory,
                        stored_id,
                    )
                    shutil.rmtree(directory)
                if directory.exists():
                    partition_log = PartitionLog.open(
                        directory, config, self.clock, recover=recover
                    )
                    if stored_id is None:
                        write_partition_topic_id(directory, topic.topic_id)
                else:
                    partition_log = PartitionLog.create(directory, config, self.clock)
                    write_partition_topic_id(directory, topic.topic_id)
                    created = True
                opened.append((topic_partition, partition_log))
            if created and sync:
                self.sync_data_dir()
        except (OSError, errors.KafkaError) as e:
            for _, partition_log in opened:
                partition_log.close()
            if isinstance(e, errors.KafkaError):
                raise
            raise errors.KafkaStorageError(f"cannot open topic {topic.name!r}: {e}") from e
        return opened

    def update(self, topic: TopicMetadata, index: int) -> None:
        """Take the partition's state and its topic's config as ``topic`` now has them
        (on the event loop; the partition is hosted here)."""
        partition = self._partitions[TopicPartition(topic.name, index)]
        config = self.topic_config(topic)
        if partition.log.config != config:
            partition.log.update_config(config)
        state = topic.partitions[index]
        if partition.state != state:
            was_leader = partition.is_leader
            partition.update_state(state)
            if partition.is_leader != was_leader:
                self._leadership_changed(partition)

    def prepare(
        self, topic_id: TopicId, logs: Sequence[tuple[TopicPartition, PartitionLog]]
    ) -> None:
        """Keep the logs :meth:`create_logs` made for a topic being created, until the
        metadata naming it is applied (:meth:`take_prepared`) or the creation fails
        (:meth:`discard_prepared`)."""
        for topic_partition, partition_log in logs:
            self._prepared[topic_partition] = (topic_id, partition_log)

    def take_prepared(
        self, topic: TopicMetadata, index: int
    ) -> tuple[TopicPartition, PartitionLog] | None:
        """The log made in advance for this partition of this very topic, if any."""
        topic_partition = TopicPartition(topic.name, index)
        prepared = self._prepared.get(topic_partition)
        if prepared is None or prepared[0] != topic.topic_id:
            return None
        del self._prepared[topic_partition]
        return topic_partition, prepared[1]

    def discard_prepared(self, topic_id: TopicId) -> list[tuple[TopicPartition, PartitionLog]]:
        """Forget the logs prepared for ``topic_id`` and return them, for
        :meth:`discard_logs` in a worker thread."""
        taken = [(tp, pl) for tp, (tid, pl) in self._prepared.items() if tid == topic_id]
        for topic_partition, _ in taken:
            del self._prepared[topic_partition]
        return taken

    def detach(self, topic_partition: TopicPartition) -> Partition | None:
        """Stop hosting a partition (on the event loop): requests no longer find it and
        waiting ones are woken. The caller deletes its log (:meth:`delete_detached`)."""
        partition = self._partitions.pop(topic_partition, None)
        if partition is not None:
            partition.detached = True  # acks=all waits on it end (NOT_LEADER_OR_FOLLOWER)
            self.purgatory.notify(topic_partition)
        return partition

    def detach_topic(self, name: str) -> list[Partition]:
        return [
            partition
            for topic_partition in [tp for tp in self._partitions if tp.topic == name]
            if (partition := self.detach(topic_partition)) is not None
        ]

    async def delete_detached(
        self,
        partitions: Sequence[Partition],
        abandoned: Sequence[tuple[TopicPartition, PartitionLog]] = (),
    ) -> None:
        """On the event loop, after :meth:`detach`: delete these partitions' logs (and
        ``abandoned`` ones, prepared for a topic deleted before it was applied), as the
        module docstring says. Returns once their directory names are free; never
        raises."""
        for partition in partitions:
            plan = partition.log.cleaning_plan
            if plan is not None:
                plan.cancel()
        for partition in partitions:
            await partition.wait_until_returned()
        logs = [(p.topic_partition, p.log) for p in partitions] + list(abandoned)
        renamed = await asyncio.to_thread(self._close_and_rename, logs)
        self.schedule_removal(renamed, self.clock.monotonic_ms() + self._file_delete_delay_ms())

    def _close_and_rename(
        self, logs: Sequence[tuple[TopicPartition, PartitionLog]]
    ) -> list[DeletedDirectory]:
        """Worker thread, sole owner of ``logs``: close them without writing, rename
        their directories for deletion, fsync the data directory. A directory that
        cannot be renamed is removed at once, so its name is free either way."""
        renamed: list[DeletedDirectory] = []
        for topic_partition, partition_log in logs:
            open_files = partition_log.close_for_deletion()
            try:
                path = rename_for_deletion(partition_log.directory, topic_partition)
            except OSError as e:
                log.warning(
                    "cannot rename %s for deletion, removing it now: %s",
                    partition_log.directory,
                    e,
                )
                close_quietly(open_files)
                shutil.rmtree(partition_log.directory, ignore_errors=True)
                continue
            renamed.append(DeletedDirectory(path, open_files))
            log.info("deleted partition %s (its directory now %s)", topic_partition, path.name)
        if renamed:
            try:
                fsync_directory(self.data_dir)
            except OSError as e:
                log.warning(
                    "cannot fsync %s after renaming deleted partitions: %s", self.data_dir, e
                )
        return renamed

    def _file_delete_delay_ms(self) -> int:
        """How long a deleted partition's files stay: the broker's
        log.segment.delete.delay.ms (Kafka uses the broker's, not the topic's)."""
        return TopicConfig.from_entries({}, self.topic_defaults).file_delete_delay_ms

    def schedule_removal(self, directories: Sequence[DeletedDirectory], due_ms: int) -> None:
        """Remove these directories renamed for deletion at monotonic ``due_ms``."""
        if directories:
            self._deleted_dirs += [(due_ms, directory) for directory in directories]
            self.deleted_dirs_changed.set()

    def take_due_removals(self, now_ms: int) -> list[DeletedDirectory]:
        """The directories renamed for deletion whose time came, forgotten here."""
        due = [directory for due_ms, directory in self._deleted_dirs if due_ms <= now_ms]
        self._deleted_dirs = [(d, p) for d, p in self._deleted_dirs if d > now_ms]
        return due

    def next_removal_ms(self) -> int | None:
        """When the next directory renamed for deletion may go (monotonic), if any."""
        return min((due_ms for due_ms, _ in self._deleted_dirs), default=None)

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
                write_partition_topic_id(directory, topic.topic_id)
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
        """Host these logs of ``topic`` with the partition states it has now (on the
        event loop)."""
        by_partition = dict(logs)
        for index, state in topic.partitions.items():
            topic_partition = TopicPartition(topic.name, index)
            partition_log = by_partition.get(topic_partition)
            if partition_log is not None:
                partition = self._partitions[topic_partition] = Partition(
                    topic_partition,
                    partition_log,
                    state,
                    self.node_id,
                    self.purgatory,
                    self.clock,
                    self.isr_changes,
                    self.broker_epoch,
                )
                if state.leader == self.node_id:
                    self.leadership_changes += 1
                if partition.is_leader:
                    self.leadership_log.note(topic_partition, leads=True)

    def registered(self, epoch: int) -> None:
        """This broker registered with broker epoch ``epoch``, at start or again after
        its session was lost: no hosted partition leads a state written before it."""
        if epoch == self.broker_epoch:
            return
        self.broker_epoch = epoch
        for partition in self._partitions.values():
            was_leader = partition.is_leader
            partition.registered(epoch)
            if partition.is_leader != was_leader:
                self._leadership_changed(partition)

    def _leadership_changed(self, partition: Partition) -> None:
        self.leadership_changes += 1
        self.leadership_log.note(partition.topic_partition, leads=partition.is_leader)

    def say_leadership(self) -> None:
        """Log the leadership changes since the last call, in one line."""
        led = sum(1 for partition in self._partitions.values() if partition.is_leader)
        self.leadership_log.say(led, len(self._partitions))

    def registration_seen(self, registration: BrokerInfo | None) -> None:
        """This broker's registration in a metadata image: one newer than the broker's
        epoch (the store registered it again after a lost session) is taken. Before the
        broker's own first registration, an image's is its previous run's (a session
        that has not expired yet): not taken."""
        if registration is None or self.broker_epoch == NOT_REGISTERED:
            return
        if registration.epoch > self.broker_epoch:
            log.warning(
                "broker %d registered again (broker epoch %d, was %d): partition states "
                "written before are not led here",
                self.node_id,
                registration.epoch,
                self.broker_epoch,
            )
            self.registered(registration.epoch)

    def dirty_partitions(self) -> list[Partition]:
        return [p for p in self._partitions.values() if p.dirty]

    def close_all(self) -> None:
        for partition in self._partitions.values():
            partition.log.close()
        self._partitions.clear()
        for _, partition_log in self._prepared.values():
            partition_log.close()
        self._prepared.clear()
