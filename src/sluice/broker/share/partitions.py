"""The share-partitions led here: for each share group reading a partition this broker
leads, its in-flight records (:class:`sluice.share.partition.SharePartition`), their
persisted state and their locks.

A share-partition is loaded on the first ShareFetch that names it: its state is read
from the share coordinator (:class:`sluice.share.state.SharePersister`), or, for a group
new to the partition, initialized at the log end (``share.auto.offset.reset=latest``,
the default) or the log start (``earliest``). It lives as long as this broker leads the
partition in the same leader epoch; a new epoch (or a write the coordinator refused)
drops it and the next fetch loads it again.

Every change a consumer must be able to rely on is persisted before it is answered: an
acknowledgement is answered once a state holding it is committed in
``__share_group_state``, so after a failover no accepted record is handed out again and
none is lost. Acquiring is not persisted (KIP-932): a new leader hands out again what was
acquired and not acknowledged. Writes of one share-partition are in order and coalesced:
a write carries everything changed before it started, and acknowledgements that arrive
meanwhile share the next one.

Locks end at their deadline in one timer task (:meth:`SharePartitions.run`); what they
free, and records released or rejected, wake ShareFetch requests waiting in the
purgatory under :func:`share_key`. Records archived with a dead-letter topic configured
are written there first (:mod:`sluice.broker.share.dead_letters`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from sluice.broker.replication.partition import Partition
from sluice.broker.replication.purgatory import Purgatory
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.broker.share.dead_letters import DeadLetterTarget, DeadLetterWriter
from sluice.cluster.store import MetadataStore
from sluice.common import errors
from sluice.common.clock import Clock
from sluice.common.config import BrokerConfig
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.records.batch import iter_batches
from sluice.share.partition import (
    Acquired,
    Archived,
    LogBatch,
    SharePartition,
    SharePartitionConfig,
)
from sluice.share.state import SharePersister, ShareStateKey

log = logging.getLogger(__name__)

READ_BYTES_MAX = 1024 * 1024
"""Bytes read from the log per step of an acquisition or a read-back."""
IDLE_MS = 10_000
"""A share-partition nobody fetched from for this long, holding no lock, is forgotten
(its state is all persisted): the next fetch loads it again, so a start offset reset
by AlterShareGroupOffsets on another broker takes effect here (the reset needs an empty
group, whose members' sessions ended longer ago than this)."""


def share_key(group_id: str, topic_partition: TopicPartition) -> Hashable:
    """The purgatory key under which ShareFetch waits for records to be released."""
    return ("share", group_id, topic_partition)


@dataclass(frozen=True)
class ShareGroupSettings:
    """A group's share settings: its overrides, else the broker's."""

    lock_duration_ms: int
    delivery_count_limit: int
    max_record_locks: int
    auto_offset_reset: str
    read_committed: bool
    dead_letters: DeadLetterTarget | None


@dataclass(eq=False)
class HostedSharePartition:
    """A share-partition led here, with what persisting it needs."""

    key: ShareStateKey
    topic_partition: TopicPartition
    share: SharePartition
    leader_epoch: int
    settings: ShareGroupSettings
    changes: int = 0
    """Bumped at every change to persist; ``persisted`` is the last one written."""
    persisted: int = 0
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    dropped: bool = False
    last_used_ms: int = 0


@dataclass(frozen=True)
class FetchedRecords:
    acquired: list[Acquired]
    records: bytes
    """Whole batches holding the acquired offsets (and maybe others: not the member's)."""


class SharePartitions:
    def __init__(
        self,
        config: BrokerConfig,
        store: MetadataStore,
        replicas: ReplicaManager,
        persister: SharePersister,
        purgatory: Purgatory,
        dead_letters: DeadLetterWriter,
        clock: Clock,
    ) -> None:
        self._config = config
        self._store = store
        self._replicas = replicas
        self._persister = persister
        self._purgatory = purgatory
        self._dead_letters = dead_letters
        self._clock = clock
        self._hosted: dict[ShareStateKey, HostedSharePartition] = {}
        """By group, topic id and partition (a topic created again is another topic)."""
        self._loading: dict[ShareStateKey, asyncio.Future[HostedSharePartition]] = {}
        self._wake = asyncio.Event()
        self._timer_target_ms: int | None = None
        """When the lock timer wakes next (None: it sleeps until woken)."""

    # ================================================================ settings

    def all_loaded(self) -> list[HostedSharePartition]:
        """The share-partitions loaded here, for metrics (do not modify them)."""
        return list(self._hosted.values())

    def settings(self, group_id: str) -> ShareGroupSettings:
        """The group's settings as this broker's metadata image has them now (no I/O).
        Every ShareFetch and ShareAcknowledge reads them first, so a config change
        applies to the next one once the image holds it (as in Kafka, whose brokers keep
        group configs in memory from the metadata log); the share-partitions it names
        take them from there."""
        overrides = self._store.image().group_overrides(group_id)
        topic = overrides.get("errors.deadletterqueue.topic.name") or ""
        prefix = self._config.share_dead_letter_topic_prefix
        if topic and not topic.startswith(prefix):
            log.warning(
                "share group %s: dead-letter topic %r ignored: it must start with %r "
                "(errors.deadletterqueue.topic.name.prefix)",
                group_id,
                topic,
                prefix,
            )
            topic = ""
        settings = ShareGroupSettings(
            lock_duration_ms=int(
                overrides.get(
                    "share.record.lock.duration.ms", self._config.share_record_lock_duration_ms
                )
            ),
            delivery_count_limit=int(
                overrides.get("share.delivery.count.limit", self._config.share_delivery_count_limit)
            ),
            max_record_locks=int(
                overrides.get(
                    "share.partition.max.record.locks",
                    self._config.share_partition_max_record_locks,
                )
            ),
            auto_offset_reset=overrides.get("share.auto.offset.reset", "latest"),
            read_committed=overrides.get("share.isolation.level") == "read_committed",
            dead_letters=DeadLetterTarget(
                topic, overrides.get("errors.deadletterqueue.copy.record.enable") == "true"
            )
            if topic
            else None,
        )
        return settings

    # ================================================================ hosting

    def _leader(self, topic_partition: TopicPartition) -> Partition:
        partition = self._replicas.get(topic_partition)
        partition.check_leader()
        return partition

    async def hosted(
        self, group_id: str, topic_partition: TopicPartition, topic_id: uuid.UUID
    ) -> HostedSharePartition:
        """The share-partition, loaded if it is not yet. Raises NOT_LEADER_OR_FOLLOWER
        and the like when this broker does not lead the partition, and the persister's
        errors when the state cannot be read."""
        partition = self._leader(topic_partition)
        slot = ShareStateKey(group_id, topic_id, topic_partition.partition)
        hosted = self._hosted.get(slot)
        if hosted is not None and hosted.leader_epoch == partition.leader_epoch:
            hosted.last_used_ms = self._clock.wall_ms()
            settings = self.settings(group_id)
            if settings != hosted.settings:
                hosted.settings = settings
                hosted.share.config = self._share_config(settings)
            return hosted
        if hosted is not None:
            self._drop(hosted)
        loading = self._loading.get(slot)
        if loading is None:
            loading = asyncio.get_running_loop().create_future()
            self._loading[slot] = loading
            try:
                hosted = await self._load(group_id, topic_partition, topic_id, partition)
            except BaseException as e:
                loading.set_exception(e)
                loading.exception()  # retrieved: the waiters (if any) raise it too
                raise
            finally:
                del self._loading[slot]
            loading.set_result(hosted)
            hosted.last_used_ms = self._clock.wall_ms()
            self._hosted[slot] = hosted
            return hosted
        return await asyncio.shield(loading)

    async def _load(
        self,
        group_id: str,
        topic_partition: TopicPartition,
        topic_id: uuid.UUID,
        partition: Partition,
    ) -> HostedSharePartition:
        key = ShareStateKey(group_id, topic_id, topic_partition.partition)
        settings = self.settings(group_id)
        epoch = partition.leader_epoch
        state = await self._persister.read(key, epoch)
        if state is None:
            start = (
                partition.log.log_start_offset
                if settings.auto_offset_reset == "earliest"
                else partition.high_watermark
            )
            state = await self._persister.initialize(key, start)
        share = SharePartition(state, self._share_config(settings))
        share.skip_to(partition.log.log_start_offset)
        log.info(
            "share group %s: %s led here at epoch %d, from offset %d",
            group_id,
            topic_partition,
            epoch,
            share.start_offset,
        )
        return HostedSharePartition(key, topic_partition, share, epoch, settings)

    def forget(self, key: ShareStateKey) -> None:
        """Drop the share-partition if it is loaded here: its state was replaced
        (AlterShareGroupOffsets, DeleteShareGroupOffsets), the next fetch loads it."""
        hosted = self._hosted.get(key)
        if hosted is not None:
            self._drop(hosted)

    def _share_config(self, settings: ShareGroupSettings) -> SharePartitionConfig:
        return SharePartitionConfig(
            max_record_locks=settings.max_record_locks,
            delivery_count_limit=settings.delivery_count_limit,
            lock_duration_ms=settings.lock_duration_ms,
        )

    def _drop(self, hosted: HostedSharePartition) -> None:
        log.info(
            "share group %s: %s dropped (%d record(s) acquired)",
            hosted.key.group_id,
            hosted.topic_partition,
            hosted.share.acquired_count(),
        )
        hosted.dropped = True
        if self._hosted.get(hosted.key) is hosted:
            del self._hosted[hosted.key]
        self._purgatory.notify(share_key(hosted.key.group_id, hosted.topic_partition))

    def loaded(self, key: ShareStateKey) -> HostedSharePartition | None:
        """The share-partition if it is loaded (diagnostics, releasing a closed session)."""
        return self._hosted.get(key)

    # ================================================================ fetching

    def has_work(self, key: ShareStateKey) -> bool:
        """A fetch for the share-partition would acquire something now."""
        hosted = self._hosted.get(key)
        if hosted is None:
            return True  # not loaded yet: loading tells
        partition = self._replicas.find(hosted.topic_partition)
        if partition is None or not partition.is_leader:
            return True  # answered with an error at once
        share = hosted.share
        return share.has_available() or (
            share.room > 0 and share.end_offset < self._readable_end(hosted, partition)
        )

    @staticmethod
    def _readable_end(hosted: HostedSharePartition, partition: Partition) -> int:
        if hosted.settings.read_committed:
            return partition.log.last_stable_offset
        return partition.high_watermark

    async def acquire(
        self,
        hosted: HostedSharePartition,
        member_id: str,
        max_records: int,
        max_bytes: int,
        *,
        whole_batches: bool = True,
    ) -> FetchedRecords:
        """Hand ``member_id`` records of the share-partition: first those waiting to be
        delivered again, then new ones from the log; whole producer batches unless
        ``whole_batches`` is False (the acquire modes of :mod:`sluice.share.partition`)."""
        partition = self._leader(hosted.topic_partition)
        now_ms = self._clock.wall_ms()
        share = hosted.share
        share.skip_to(partition.log.log_start_offset)
        acquired = share.acquire_available(
            member_id, now_ms, max_records, whole_batches=whole_batches
        )
        remaining = max_records - sum(a.last_offset - a.first_offset + 1 for a in acquired)
        upper = self._readable_end(hosted, partition)
        if remaining > 0 and share.room > 0 and share.end_offset < upper:
            batches = self._log_batches(hosted, partition, share.end_offset, upper, max_bytes)
            acquired += share.acquire_new(
                member_id, now_ms, batches, remaining, whole_batches=whole_batches
            )
        if acquired:
            deadline = share.next_deadline_ms()
            target = self._timer_target_ms
            if deadline is not None and (target is None or deadline < target):
                self._wake.set()  # a lock ends before the timer would look
        return FetchedRecords(acquired, self._read_back(partition, acquired, upper))

    def _log_batches(
        self,
        hosted: HostedSharePartition,
        partition: Partition,
        start: int,
        upper: int,
        max_bytes: int,
    ) -> list[LogBatch]:
        read = partition.log.read(start, max(min(max_bytes, READ_BYTES_MAX), 1), max_offset=upper)
        aborted = (
            partition.log.aborted_transactions(start, upper)
            if hosted.settings.read_committed
            else []
        )
        batches: list[LogBatch] = []
        for piece in read.slices:
            data = piece.read()
            for _, header in iter_batches(data):
                deliverable = not header.is_control
                if deliverable and aborted and header.is_transactional:
                    deliverable = not any(
                        a.producer_id == header.producer_id
                        and a.first_offset <= header.base_offset <= a.last_offset
                        for a in aborted
                    )
                batches.append(LogBatch(header.base_offset, header.last_offset, deliverable))
        return batches

    @staticmethod
    def _read_back(partition: Partition, acquired: Sequence[Acquired], upper: int) -> bytes:
        """The whole batches holding the acquired offsets, in offset order, each once."""
        pieces: dict[int, bytes] = {}
        for taken in acquired:
            offset = taken.first_offset
            while offset <= taken.last_offset:
                read = partition.log.read(offset, READ_BYTES_MAX, max_offset=upper)
                data = b"".join(piece.read() for piece in read.slices)
                progressed = False
                for position, header in iter_batches(data):
                    if header.base_offset > taken.last_offset:
                        break
                    if header.last_offset >= offset:
                        pieces.setdefault(
                            header.base_offset, data[position : position + header.size_bytes]
                        )
                        offset, progressed = header.last_offset + 1, True
                if not progressed:
                    break
        return b"".join(pieces[base] for base in sorted(pieces))

    # ============================================================ acknowledging

    async def acknowledge(
        self,
        hosted: HostedSharePartition,
        member_id: str,
        batches: Iterable[tuple[int, int, Sequence[int]]],
    ) -> ErrorCode:
        """Apply acknowledgement batches (first offset, last offset, types) and return
        once they are persisted; the first error of a batch, else NONE."""
        now_ms = self._clock.wall_ms()
        result = ErrorCode.none
        archived: list[Archived] = []
        for first, last, types in batches:
            error, gone = hosted.share.acknowledge(member_id, first, last, types, now_ms)
            archived += gone
            if error is not ErrorCode.none and result is ErrorCode.none:
                result = error
        try:
            await self._finish(hosted, archived)
        except KafkaError as e:
            return e.code
        return result

    async def release(self, hosted: HostedSharePartition, member_id: str) -> None:
        """The member's session ended: what it holds of the share-partition waits again."""
        archived = hosted.share.release_member(member_id)
        with contextlib.suppress(KafkaError):
            await self._finish(hosted, archived)

    async def _finish(self, hosted: HostedSharePartition, archived: list[Archived]) -> None:
        """Dead-letter what was archived, persist, and wake waiting fetches. On failure
        the share-partition is dropped (the next fetch loads the persisted state, where
        the archived records are still unfinished) and the KafkaError raised."""
        try:
            if archived and hosted.settings.dead_letters is not None:
                await self._dead_letters.write(
                    hosted.settings.dead_letters,
                    hosted.topic_partition,
                    hosted.key.group_id,
                    archived,
                )
            await self._persist(hosted)
        except KafkaError as e:
            log.warning(
                "share group %s, %s: %s; loading its state again",
                hosted.key.group_id,
                hosted.topic_partition,
                e,
            )
            self._drop(hosted)
            raise
        self._purgatory.notify(share_key(hosted.key.group_id, hosted.topic_partition))

    async def _persist(self, hosted: HostedSharePartition) -> None:
        hosted.changes += 1
        wanted = hosted.changes
        async with hosted.write_lock:
            if hosted.persisted >= wanted:
                return  # a write that started after this change carried it
            if hosted.dropped:
                raise errors.NotLeaderOrFollower(f"{hosted.topic_partition}: state reloading")
            writing = hosted.changes
            await self._persister.write(hosted.key, hosted.share.snapshot(hosted.leader_epoch))
            hosted.persisted = writing

    # ================================================================== locks

    async def run(self, tasks: asyncio.TaskGroup) -> None:
        """End locks at their deadline, for ever (a task of the broker); what that frees
        is persisted (and dead-lettered) in a task of ``tasks`` each."""
        while True:
            self._wake.clear()
            now_ms = self._clock.wall_ms()
            earliest: int | None = None
            for hosted in list(self._hosted.values()):
                if self._is_idle(hosted, now_ms):
                    self._drop(hosted)
                    continue
                deadline = hosted.share.next_deadline_ms()
                if deadline is not None and deadline <= now_ms:
                    archived = hosted.share.expire_locks(now_ms)
                    tasks.create_task(self._finish_quietly(hosted, archived))
                    deadline = hosted.share.next_deadline_ms()
                if deadline is not None and (earliest is None or deadline < earliest):
                    earliest = deadline
            if self._hosted:
                idle_check = now_ms + IDLE_MS
                earliest = idle_check if earliest is None else min(earliest, idle_check)
            self._timer_target_ms = earliest
            timeout_s = None if earliest is None else max(earliest - now_ms, 1) / 1000
            # asyncio.timeout, not wait_for, which on Python 3.11 can lose a cancellation
            # that comes as the event is set: then this loop never ends (cpython#86296).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._wake.wait()

    @staticmethod
    def _is_idle(hosted: HostedSharePartition, now_ms: int) -> bool:
        return (
            now_ms - hosted.last_used_ms >= IDLE_MS
            and hosted.share.acquired_count() == 0
            and not hosted.write_lock.locked()
        )

    async def _finish_quietly(self, hosted: HostedSharePartition, archived: list[Archived]) -> None:
        with contextlib.suppress(KafkaError):
            await self._finish(hosted, archived)

    def unload_not_led(self) -> None:
        """Forget share-partitions of partitions no longer led here, or of topics deleted
        (after a metadata change): their locks die with them, their state is the
        persisted one."""
        image = self._store.image()
        for hosted in list(self._hosted.values()):
            partition = self._replicas.find(hosted.topic_partition)
            topic = image.topic_by_id(hosted.key.topic_id)
            if (
                topic is None
                or topic.name != hosted.topic_partition.topic
                or partition is None
                or not partition.is_leader
                or partition.leader_epoch != hosted.leader_epoch
            ):
                self._drop(hosted)
