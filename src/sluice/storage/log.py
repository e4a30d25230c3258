"""The log of one partition: ordered segments, offsets, checkpoints, recovery, retention.

One directory per partition (e.g. ``data/orders-0/``)::

    00000000000000000000.log         ┐
    00000000000000000000.index       │ inactive segment (read only)
    00000000000000000000.timeindex   ┘
    00000000000000052311.log         ┐
    00000000000000052311.index       │ active segment: appends go here
    00000000000000052311.timeindex   ┘
    00000000000000052311.txnindex    aborted transactions whose ABORT marker is here
    00000000000000052311.snapshot    producer state below offset 52311 (written at roll)
    leader-epoch-checkpoint          (epoch, start offset) pairs
    partition.checkpoint             log start offset, high watermark, recovery point
    00000000000000000000.log.deleted a deleted segment, unlinked after file.delete.delay.ms

Offsets, always ``log start offset <= high watermark <= log end offset``::

      log start     recovery point   last stable   high watermark   log end offset (LEO)
          │               │             │             │                 │
    ──────┼───────────────┼─────────────┼─────────────┼─────────────────┼─────►
          │◄─ read_committed ──────────►│             │ not yet committed next offset
          │◄─ readable (read_uncommitted) ───────────►│                   assigned
          │◄─ fsynced ───►│

* The log start offset moves up with DeleteRecords and retention (whole segments).
* The high watermark is set by the replication layer; consumers read below it.
* The last stable offset (LSO) is the high watermark, or the first offset of the oldest
  transaction not yet decided (open, or closed by a marker not yet below the high
  watermark) when that is lower; read_committed consumers read below it, and learn the
  aborted transactions in what they read from the segments' ``.txnindex`` files.
* The recovery point: everything below it was fsynced by :meth:`PartitionLog.flush`.
  After an unclean shutdown only the segments at and after it are rescanned
  (``segment.LogSegment.recover``), and always the active one.

Writes are synchronous, go to the OS with ``pwrite`` (visible to readers and to
``sendfile`` at once) and are fsynced on :meth:`PartitionLog.flush`, or before the
acknowledgement when ``flush.ms=0`` / ``flush.messages=1``. Nothing here is thread-safe:
one event loop owns each log, except :class:`PendingFlush.sync`, which a worker thread
runs on duplicated descriptors, and the :class:`FsyncGuard` it shares with the log.

A failed fsync is reported once per open file description, and a duplicated descriptor
shares its description: when a worker's fsync of a flush fails, the appending thread's
next fsync of the same file may succeed although the pages the failure lost are gone.
So every fsync of a log's files runs under its :class:`FsyncGuard`, and once one has
failed no later fsync of that log counts as a success (an acknowledgement that waits for
an fsync is never given behind a possible hole).
"""

from __future__ import annotations

import bisect
import functools
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, ParamSpec, TypeVar

from sluice.common import errors
from sluice.common.clock import SYSTEM_CLOCK, Clock
from sluice.common.config import TopicConfig
from sluice.common.limits import SEGMENTS_PER_READ_MAX
from sluice.protocol.records.batch import (
    BatchHeader,
    TimestampType,
    crc_is_valid,
    iter_batches,
    parse_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from sluice.protocol.records.builder import (
    ControlRecordType,
    build_control_batch,
    decode_batch,
    decode_control_record,
)
from sluice.protocol.records.delayed import Delivery, is_parked_key
from sluice.storage.checkpoint import (
    TEMP_SUFFIX,
    encode_offsets_checkpoint,
    fsync_directory,
    read_offsets_checkpoint,
)
from sluice.storage.checkpoint_writer import CheckpointJob, CheckpointWriter
from sluice.storage.cleaner import (
    CleaningPlan,
    finish_interrupted_swap,
    truncate_cleaner_checkpoint,
)
from sluice.storage.delays import PartitionDelays, may_matter
from sluice.storage.index import RELATIVE_OFFSET_MAX
from sluice.storage.leader_epoch import LeaderEpochCache
from sluice.storage.producer_state import CompletedTransaction, ProducerStateManager
from sluice.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    FileSlice,
    LogSegment,
    parse_segment_file_name,
)
from sluice.storage.tag_summary import TagSummaries
from sluice.storage.transaction_index import TRANSACTION_INDEX_SUFFIX, AbortedTransaction

logger = logging.getLogger(__name__)

PARTITION_CHECKPOINT_NAME = "partition.checkpoint"
CLEAN_SHUTDOWN_MARKER_NAME = ".clean-shutdown"
"""Written in the data directory by the broker after it closed every log."""

FencedLeaderEpoch = errors.for_code(errors.ErrorCode.fenced_leader_epoch)

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _storage_errors(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Turn an OSError from the disk into KafkaStorageError (an operating error the
    broker answers with, not a bug)."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except OSError as e:
            raise errors.KafkaStorageError(f"{method.__qualname__}: {e}") from e

    return wrapper


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an appended (or recognised duplicate) batch went."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    """The broker's timestamp when the topic uses LogAppendTime, else -1."""
    log_start_offset: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """A record found by a ListOffsets lookup: its timestamp, offset and the leader
    epoch of its batch (-1 when the batch has none)."""

    timestamp_ms: int
    offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Whole batches as file ranges, in offset order (possibly over several segments)."""

    slices: list[FileSlice]
    size_bytes: int

    def read_bytes(self) -> bytes:
        """The batches in memory (for tools, tests, TLS connections that cannot
        sendfile)."""
        return b"".join(piece.read() for piece in self.slices)


def clean_shutdown_marker_exists(data_directory: Path) -> bool:
    return (data_directory / CLEAN_SHUTDOWN_MARKER_NAME).exists()


def write_clean_shutdown_marker(data_directory: Path) -> None:
    """Call after every log was closed: the next start may skip recovery."""
    marker = data_directory / CLEAN_SHUTDOWN_MARKER_NAME
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory(data_directory)


def remove_clean_shutdown_marker(data_directory: Path) -> None:
    """Call after every log was opened: a crash from now on must recover."""
    marker = data_directory / CLEAN_SHUTDOWN_MARKER_NAME
    if marker.exists():
        marker.unlink()
        fsync_directory(data_directory)


class FsyncGuard:
    """Orders the fsyncs of one partition's files across threads and remembers a failure
    (see the module docstring): the appending thread and a flush's worker thread each
    fsync under :attr:`lock`, and an fsync that fails sets :attr:`failed` before the lock
    is let go."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.failed: OSError | None = None

    def run(self, fsync: Callable[[], None]) -> None:
        """Run ``fsync`` under the lock; raise OSError if it fails or one already has."""
        with self.lock:
            if self.failed is not None:
                raise OSError(self.failed.errno, f"an earlier fsync failed: {self.failed}")
            try:
                fsync()
            except OSError as e:
                self.failed = e
                raise


@dataclass
class PendingFlush:
    """Descriptors to fdatasync (and a directory to fsync) for one partition's flush;
    see :meth:`PartitionLog.begin_flush`. Safe to :meth:`sync` on any thread."""

    descriptors: list[int]
    directory: Path | None
    log_end_offset: int
    checkpoint: Callable[[], None] | None = None
    """Moves the delay index's write-ahead log into its database (an fsync of its own),
    here rather than on the appending thread."""
    guard: FsyncGuard | None = None
    """The log's guard, shared with the appending thread's fsyncs."""

    def sync(self) -> None:
        guard = self.guard if self.guard is not None else FsyncGuard()
        try:
            for descriptor in self.descriptors:
                guard.run(functools.partial(os.fdatasync, descriptor))
            if self.directory is not None:
                guard.run(functools.partial(fsync_directory, self.directory))
            if self.checkpoint is not None:
                self.checkpoint()
        except OSError as e:
            raise errors.KafkaStorageError(f"fsync failed: {e}") from e
        finally:
            for descriptor in self.descriptors:
                os.close(descriptor)
            self.descriptors = []


class PartitionLog:
    """The segmented append-only log of one partition. Use :meth:`open`."""

    def __init__(self, directory: Path, config: TopicConfig, clock: Clock) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self._segments: list[LogSegment] = []
        self._base_offsets: list[int] = []
        self._log_end_offset = 0
        self._log_start_offset = 0
        self._high_watermark = 0
        self._recovery_point = 0
        self._checkpointed: tuple[int, int, int] | None = None
        """(log start offset, high watermark, recovery point) last handed to
        :attr:`checkpoint_writer`; None when unknown (then the next checkpoint writes)."""
        self.checkpoint_writer = CheckpointWriter()
        """Writes ``partition.checkpoint`` and ``leader-epoch-checkpoint``, in order: at
        once for the rare writes, on the flusher's worker thread for the periodic ones."""
        self._unflushed_messages = 0
        self._fsync_guard = FsyncGuard()
        self._directory_dirty = False
        self._directory_unsynced = False
        """Made by :meth:`create` and never fsynced: the first write dirties it (an
        empty log loses nothing if its directory entries are lost)."""
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._closed = False
        self._truncations = 0
        self.cleaning_plan: CleaningPlan | None = None
        """The log cleaner's plan in flight (``cleaner.prepare`` sets it; the swap or the
        plan's ``discard`` clears it): one at a time."""
        self.leader_epoch_cache = LeaderEpochCache(directory, lambda: self._log_end_offset)
        self.producer_state = ProducerStateManager(directory)
        self._undecided: list[CompletedTransaction] = []
        """Transactions closed by a marker at or past the high watermark: the marker may
        still be lost with this leader, so they still hold the last stable offset."""
        self.delays = PartitionDelays(directory)
        """The parked records of delayed delivery (an index only once some came)."""
        self.tag_summaries: TagSummaries | None = None
        """Per-batch tag summaries for views of this partition's topic, once a view's
        fetch turned them on (:meth:`enable_tag_summaries`)."""

    # -- opening and recovery -------------------------------------------------------

    @classmethod
    @_storage_errors
    def open(
        cls,
        directory: Path,
        config: TopicConfig,
        clock: Clock = SYSTEM_CLOCK,
        *,
        recover: bool = True,
    ) -> PartitionLog:
        """Open the partition log in ``directory``, creating it if needed.

        ``recover=True`` (no clean-shutdown marker): rescan, CRC-check and truncate
        every segment from the one holding the recovery point on, and always the active
        one. ``recover=False``: trust the files (indexes are still sanity-checked)."""
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(directory, config, clock)
        now_ms = clock.wall_ms()
        log._remove_leftovers()

        offsets: dict[str, int] = {}
        on_disk: tuple[int, int, int] | None = None
        """The checkpoint's values as read (zeros when absent): rewritten only if they
        change, so opening thousands of unchanged partitions costs no fsync."""
        try:
            offsets = read_offsets_checkpoint(directory / PARTITION_CHECKPOINT_NAME) or {}
            on_disk = (
                offsets.get("log_start_offset", 0),
                offsets.get("high_watermark", 0),
                offsets.get("recovery_point", 0),
            )
        except errors.KafkaStorageError as e:
            logger.warning(
                "%s: ignoring the partition checkpoint, recovering all: %s", directory, e
            )
            recover = True
        recovery_point = offsets.get("recovery_point", 0)

        base_offsets = log._segment_base_offsets()
        if not base_offsets:
            base_offsets = [max(offsets.get("log_start_offset", 0), 0)]
            log._create_segment(base_offsets[0], now_ms)
            log._directory_dirty = True
            first_to_recover = 1
        else:
            first_to_recover = len(base_offsets)
            if recover:
                first_to_recover = max(bisect.bisect_right(base_offsets, recovery_point) - 1, 0)
                first_to_recover = min(first_to_recover, len(base_offsets) - 1)
            for i, base_offset in enumerate(base_offsets):
                segment = LogSegment.open(
                    directory,
                    base_offset,
                    index_interval_bytes=config.index_interval_bytes,
                    index_capacity_bytes=config.segment_index_bytes,
                    active=i == len(base_offsets) - 1,
                    trusted=i < first_to_recover,
                    now_ms=now_ms,
                )
                if segment.needs_recovery:
                    first_to_recover = min(first_to_recover, i)
                log._append_segment(segment)

        rebuild_epochs = False
        try:
            log.leader_epoch_cache = LeaderEpochCache.load(directory, lambda: log._log_end_offset)
        except errors.KafkaStorageError as e:
            logger.warning("%s: rebuilding the leader-epoch cache from the log: %s", directory, e)
            rebuild_epochs = True
        if rebuild_epochs:
            for segment in log._segments[:first_to_recover]:
                for _, header in segment.iter_batches():
                    log.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        recovered = first_to_recover < len(log._segments)
        if recovered:
            log._recover_segments(first_to_recover)

        active = log._segments[-1]
        log._log_end_offset = active.next_offset
        active.age_from_first_batch(now_ms)
        log._log_start_offset = min(
            max(offsets.get("log_start_offset", 0), log._segments[0].base_offset),
            log._log_end_offset,
        )
        log._high_watermark = log._clamp(offsets.get("high_watermark", 0))
        log.leader_epoch_cache.truncate_from_end(log._log_end_offset)
        log.leader_epoch_cache.truncate_from_start(log._log_start_offset)
        log._load_producer_state()
        log.delays.open(log._batches_from, log._log_start_offset, log._log_end_offset)

        if recovered:
            for segment in log._segments:
                segment.flush()
            fsync_directory(directory)
            log._recovery_point = log._log_end_offset
        else:
            log._recovery_point = min(recovery_point, log._log_end_offset)
        log._checkpointed = on_disk
        log._write_checkpoint()
        return log

    @classmethod
    @_storage_errors
    def create(
        cls, directory: Path, config: TopicConfig, clock: Clock = SYSTEM_CLOCK
    ) -> PartitionLog:
        """A new, empty log in ``directory``, which must not exist yet. Writes the
        directory and one empty ``.log``, and nothing else: an empty log needs no
        checkpoint (an absent one means offsets 0), and the first flush fsyncs the
        directory. No fsync here, so creating thousands of partitions is cheap; whoever
        makes the partition known durably fsyncs the parent directory once for all of
        them. Touches nothing but ``directory``: safe on a worker thread."""
        directory.mkdir(parents=False, exist_ok=False)
        log = cls(directory, config, clock)
        segment = LogSegment.create(
            directory,
            0,
            index_interval_bytes=config.index_interval_bytes,
            index_capacity_bytes=config.segment_index_bytes,
            now_ms=clock.wall_ms(),
            new_directory=True,
        )
        log._append_segment(segment)
        log._directory_unsynced = True
        log._checkpointed = (0, 0, 0)
        return log

    def _remove_leftovers(self) -> None:
        """Delete what a crash may leave: checkpoint temp files, deleted segments whose
        delay had not passed, and indexes without a log. First roll back or complete a
        cleaner swap that was interrupted (``cleaner.finish_interrupted_swap``)."""
        finish_interrupted_swap(self.directory)
        names = set(os.listdir(self.directory))
        for name in names:
            orphan_index = any(
                (base := parse_segment_file_name(name, suffix)) is not None
                and f"{base:020d}{LOG_SUFFIX}" not in names
                for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TRANSACTION_INDEX_SUFFIX)
            )
            if name.endswith((TEMP_SUFFIX, DELETED_SUFFIX)) or orphan_index:
                (self.directory / name).unlink(missing_ok=True)

    def _segment_base_offsets(self) -> list[int]:
        bases = []
        for name in os.listdir(self.directory):
            base = parse_segment_file_name(name, LOG_SUFFIX)
            if base is not None:
                bases.append(base)
            elif name.endswith(LOG_SUFFIX):
                raise errors.KafkaStorageError(f"{self.directory / name}: not a segment name")
        return sorted(bases)

    def _recover_segments(self, first: int) -> None:
        """Recover segments ``first``.. in order. A segment that had to be truncated
        ends the log: later segments cannot follow a hole and are deleted."""
        i = first
        while i < len(self._segments):
            segment = self._segments[i]
            report = segment.recover(self._assign_epoch_of)
            if report.problem is not None:
                logger.warning(
                    "%s: recovery kept %d batches (%d bytes, offsets up to %d) and "
                    "truncated %d bytes: %s",
                    segment.log_path,
                    report.batches,
                    report.valid_bytes,
                    report.next_offset - 1,
                    report.truncated_bytes,
                    report.problem,
                )
            later = self._segments[i + 1 :]
            if later and report.problem is not None:
                logger.warning(
                    "%s: deleting %d later segments after a damaged one: %s",
                    self.directory,
                    len(later),
                    ", ".join(s.log_path.name for s in later),
                )
                for dropped in later:
                    dropped.rename_to_deleted()
                    dropped.delete_files()
                del self._segments[i + 1 :]
                del self._base_offsets[i + 1 :]
                segment.make_active()
                break
            if later and later[0].base_offset < report.next_offset:
                raise errors.KafkaStorageError(
                    f"{segment.log_path} holds offsets up to {report.next_offset - 1}, "
                    f"past the next segment's base offset {later[0].base_offset}"
                )
            i += 1

    def enable_tag_summaries(self) -> TagSummaries:
        """Summarize the tags of every batch appended from now on (for views' fetches;
        see :mod:`sluice.storage.tag_summary`). Rows of an earlier run are dropped: the
        log may have been truncated and written again meanwhile, unwatched."""
        if self.tag_summaries is None:
            self.tag_summaries = TagSummaries(self.directory)
            self.tag_summaries.forget(from_offset=0)
        return self.tag_summaries

    def _batches_from(self, start: int) -> Iterator[tuple[BatchHeader, Callable[[], bytes]]]:
        """Every batch from the one holding ``start`` to the log end, with a function
        reading its bytes."""
        first = max(bisect.bisect_right(self._base_offsets, start) - 1, 0)
        for segment in self._segments[first:]:
            found = segment.translate_offset(start)
            if found is None:
                continue
            for position, header in segment.iter_batches(found[0]):
                yield header, FileSlice(segment.file, position, header.size_bytes).read

    def _assign_epoch_of(self, header: BatchHeader) -> None:
        self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)

    def _load_producer_state(self) -> None:
        """Newest snapshot at or below the log end offset, then replay the batches after
        it: data batches from their headers, markers from their record. The aborted-
        transaction entries of markers after the snapshot are written again (every
        entry below a snapshot was fsynced before the snapshot was written)."""
        self.producer_state.delete_snapshots_after(self._log_end_offset)
        loaded = self.producer_state.load_latest_snapshot(self._log_end_offset)
        start = self._segments[0].base_offset if loaded is None else loaded
        self._undecided.clear()
        for i, segment in enumerate(self._segments):
            if i + 1 < len(self._segments) and self._base_offsets[i + 1] <= start:
                continue
            segment.txn_index.truncate_from(start)
            found = segment.translate_offset(start)
            if found is None:
                continue
            for position, header in segment.iter_batches(found[0]):
                if header.base_offset < start:
                    continue
                if header.is_control:
                    data = FileSlice(segment.file, position, header.size_bytes).read()
                    self._replay_marker(segment, data, header)
                else:
                    self.producer_state.replay(header)

    def _replay_marker(
        self, segment: LogSegment, data: bytes | memoryview, header: BatchHeader
    ) -> None:
        """A marker read back from the log or copied from the leader (or a parked batch
        of delayed delivery, which is data to the producer state)."""
        try:
            record = decode_batch(data).records[0]
            if is_parked_key(record.key):
                self.producer_state.replay(header)
                return
            marker, coordinator_epoch = decode_control_record(record.key, record.value)
        except (errors.KafkaError, IndexError) as e:
            logger.warning(
                "%s: control batch at offset %d is not a marker we read: %s",
                self.directory,
                header.base_offset,
                e,
            )
            return
        self._complete_transaction(
            segment,
            header.producer_id,
            header.producer_epoch,
            marker_offset=header.base_offset,
            committed=marker is ControlRecordType.COMMIT,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=header.max_timestamp,
        )

    def _complete_transaction(
        self,
        segment: LogSegment,
        producer_id: int,
        producer_epoch: int,
        *,
        marker_offset: int,
        committed: bool,
        coordinator_epoch: int,
        timestamp_ms: int,
    ) -> None:
        completed = self.producer_state.complete_transaction(
            producer_id,
            producer_epoch,
            marker_offset=marker_offset,
            committed=committed,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=timestamp_ms,
        )
        if completed is None:
            return
        if marker_offset >= self._high_watermark:
            self._undecided.append(completed)
        if not committed:
            open_first = self.producer_state.first_open_transaction_offset()
            segment.txn_index.append(
                AbortedTransaction(
                    producer_id,
                    completed.first_offset,
                    marker_offset,
                    marker_offset + 1 if open_first is None else open_first,
                )
            )

    # -- offsets --------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to assign."""
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def truncations(self) -> int:
        """How many times the log was truncated since it was opened (a cleaning plan
        made before a truncation is void)."""
        return self._truncations

    def _clamp(self, offset: int) -> int:
        return min(max(offset, self._log_start_offset), self._log_end_offset)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark (clamped to [log start, log end]); return it. It is
        checkpointed on the next flush."""
        self._high_watermark = self._clamp(offset)
        if self._undecided:
            self._undecided = [
                completed
                for completed in self._undecided
                if completed.last_offset >= self._high_watermark
            ]
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed consumers stop (module docstring)."""
        first_unstable = self.producer_state.first_open_transaction_offset()
        for completed in self._undecided:
            if first_unstable is None or completed.first_offset < first_unstable:
                first_unstable = completed.first_offset
        if first_unstable is None:
            return self._high_watermark
        return max(min(first_unstable, self._high_watermark), self._log_start_offset)

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTransaction]:
        """The aborted transactions with data in [start, upper), for a read_committed
        fetch (see ``transaction_index``)."""
        found: list[AbortedTransaction] = []
        first = max(bisect.bisect_right(self._base_offsets, start) - 1, 0)
        for segment in self._segments[first:]:
            if segment.txn_index.collect(start, upper, found):
                break
        return found

    def update_config(self, config: TopicConfig) -> None:
        """New topic config; index sizes apply to segments created from now on."""
        self.config = config

    @_storage_errors
    def begin_leader_epoch(self, epoch: int) -> None:
        """This replica leads from ``epoch`` on: the epoch starts at the log end offset
        (before anything is appended in it), so followers asking where their epoch ends
        get an answer at once. Written to the checkpoint now (one fsync per leader
        change)."""
        if self.leader_epoch_cache.assign(epoch, self._log_end_offset):
            self._write_epochs_now()

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch in this log (-1 when none)."""
        return self.leader_epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch; see ``LeaderEpochCache``."""
        return self.leader_epoch_cache.end_offset_for_epoch(epoch)

    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._segments)

    # -- segments -------------------------------------------------------------------

    def _append_segment(self, segment: LogSegment) -> None:
        assert not self._base_offsets or segment.base_offset > self._base_offsets[-1]
        self._segments.append(segment)
        self._base_offsets.append(segment.base_offset)

    def _create_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        segment = LogSegment.create(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            index_capacity_bytes=self.config.segment_index_bytes,
            now_ms=now_ms,
        )
        self._append_segment(segment)
        return segment

    def _roll(self, now_ms: int, base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``base_offset`` (default: the log end offset)."""
        old = self._segments[-1]
        new_base_offset = self._log_end_offset if base_offset is None else base_offset
        if old.size_bytes == 0 and old.base_offset == new_base_offset:
            return old
        assert new_base_offset >= self._log_end_offset
        old.make_inactive()
        segment = self._create_segment(new_base_offset, now_ms)
        self._directory_dirty = True
        # On this thread, without an fsync (a page-cache write, once a segment): later
        # truncations and deletions of snapshots here must find it in place.
        self.producer_state.take_snapshot(new_base_offset)
        if self.config.fsync_every_append:
            fsync_directory(self.directory)
            self._directory_dirty = False
        return segment

    @_storage_errors
    def roll(self) -> None:
        """Close the active segment to appends and start a new one (no-op when empty)."""
        self._roll(self.clock.wall_ms())

    def _segment_for(self, size_bytes: int, last_offset: int, now_ms: int) -> LogSegment:
        """The segment the next batch goes to, rolling first when it would not fit:
        segment.bytes exceeded, segment.ms passed, an index full, or relative offsets
        overflowing."""
        segment = self._segments[-1]
        if segment.size_bytes == 0:
            return segment
        if (
            segment.size_bytes + size_bytes > self.config.segment_bytes
            or now_ms - segment.created_ms > self.config.segment_ms
            or last_offset - segment.base_offset > RELATIVE_OFFSET_MAX
            or segment.index_is_full()
        ):
            return self._roll(now_ms)
        return segment

    def _schedule_delete(self, segment: LogSegment) -> None:
        """Rename the segment's files to ``.deleted`` and unlink them after
        file.delete.delay.ms (reads in flight keep the open file)."""
        segment.rename_to_deleted()
        self._directory_dirty = True
        if self.config.file_delete_delay_ms <= 0:
            segment.delete_files()
        else:
            due_ms = self.clock.monotonic_ms() + self.config.file_delete_delay_ms
            self._pending_deletes.append((due_ms, segment))

    @_storage_errors
    def delete_expired_files(self, now_ms: int | None = None) -> int:
        """Unlink deleted segments whose delay has passed (``now_ms``: the clock's
        monotonic milliseconds). Returns how many segments went."""
        now = self.clock.monotonic_ms() if now_ms is None else now_ms
        due = [segment for due_ms, segment in self._pending_deletes if due_ms <= now]
        self._pending_deletes = [item for item in self._pending_deletes if item[0] > now]
        for segment in due:
            segment.delete_files()
        return len(due)

    # -- append ---------------------------------------------------------------------

    @_storage_errors
    def append(
        self,
        batch: bytearray,
        *,
        leader_epoch: int,
        header: BatchHeader | None = None,
        now_ms: int | None = None,
        fired_origins: Sequence[int] | None = None,
        parked: Sequence[Delivery] | None = None,
    ) -> AppendResult:
        """Append one produced batch (already checked with ``validate_produced``, which
        gave its ``header``, parsed again here when not given).

        Checks the producer's epoch and sequence, assigns offsets from the log end,
        stamps the leader epoch (and the time, for LogAppendTime), writes it. A
        duplicate of a remembered batch is not written; its original offsets are
        returned with ``duplicate=True``. ``batch`` is modified in place.
        ``fired_origins``: for a fired batch of delayed delivery built here, the parked
        offsets it delivers; ``parked``: for a parked batch built here, each record's
        delivery."""
        assert not self._closed, "append to a closed log"
        if header is None:
            header = parse_header(batch)
        assert header.size_bytes == len(batch), "append takes exactly one whole batch"
        self._check_leader_epoch(leader_epoch)
        if header.producer_id >= 0:
            duplicate = self.producer_state.check(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.last_sequence,
                transactional=header.is_transactional,
            )
            if duplicate is not None:
                return AppendResult(
                    duplicate.first_offset,
                    duplicate.last_offset,
                    -1,
                    self._log_start_offset,
                    duplicate=True,
                )
        return self._write(
            batch, header, leader_epoch, now_ms, fired_origins=fired_origins, parked=parked
        )

    @_storage_errors
    def append_marker(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        leader_epoch: int,
        now_ms: int | None = None,
    ) -> AppendResult:
        """Write a transaction marker (COMMIT or ABORT) for the producer and close its
        open transaction here. Raises InvalidProducerEpoch for a marker of an older
        producer epoch, TransactionCoordinatorFenced for one from an older coordinator."""
        assert not self._closed, "append to a closed log"
        self._check_leader_epoch(leader_epoch)
        self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        now = self.clock.wall_ms() if now_ms is None else now_ms
        batch = bytearray(
            build_control_batch(
                ControlRecordType.COMMIT if committed else ControlRecordType.ABORT,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch,
                timestamp_ms=now,
            )
        )
        return self._write(
            batch, parse_header(batch), leader_epoch, now, (committed, coordinator_epoch)
        )

    def _check_leader_epoch(self, leader_epoch: int) -> None:
        if leader_epoch < self.leader_epoch_cache.latest_epoch:
            raise FencedLeaderEpoch(
                f"append in leader epoch {leader_epoch}, but epoch "
                f"{self.leader_epoch_cache.latest_epoch} already wrote to this log"
            )

    def _write(
        self,
        batch: bytearray,
        header: BatchHeader,
        leader_epoch: int,
        now_ms: int | None,
        marker: tuple[bool, int] | None = None,
        *,
        fired_origins: Sequence[int] | None = None,
        parked: Sequence[Delivery] | None = None,
    ) -> AppendResult:
        """Assign offsets, stamp, write and remember one checked batch; ``marker`` is
        (committed, coordinator epoch) for a transaction marker."""
        now = self.clock.wall_ms() if now_ms is None else now_ms
        base_offset = self._log_end_offset
        last_offset = base_offset + header.last_offset_delta
        set_base_offset(batch, base_offset)
        set_partition_leader_epoch(batch, leader_epoch)
        if self.config.message_timestamp_type == "LogAppendTime":
            set_log_append_time(batch, now)
            max_timestamp_ms = log_append_time_ms = now
        else:
            max_timestamp_ms = header.max_timestamp
            log_append_time_ms = -1
        segment = self._segment_for(len(batch), last_offset, now)
        segment.append(
            batch,
            base_offset=base_offset,
            next_offset=last_offset + 1,
            max_timestamp_ms=max_timestamp_ms,
        )
        self._log_end_offset = last_offset + 1
        # Not written here (an fsync per new epoch, on the appending thread: the first
        # produce to 1,000 new partitions paid 1,000 of them). Every flush writes the
        # leader-epoch checkpoint before the partition checkpoint, so the recovery point
        # on disk never passes an epoch start that is not on disk; recovery re-assigns
        # epochs from the batch headers after it.
        self.leader_epoch_cache.assign(leader_epoch, base_offset)
        if marker is not None:
            self._complete_transaction(
                segment,
                header.producer_id,
                header.producer_epoch,
                marker_offset=base_offset,
                committed=marker[0],
                coordinator_epoch=marker[1],
                timestamp_ms=max_timestamp_ms,
            )
        elif header.producer_id >= 0:
            self.producer_state.record(
                header.producer_id,
                header.producer_epoch,
                first_sequence=header.base_sequence,
                last_sequence=header.last_sequence,
                first_offset=base_offset,
                last_offset=last_offset,
                timestamp_ms=max_timestamp_ms,
                transactional=header.is_transactional,
            )
        if self.tag_summaries is not None or may_matter(header):
            self._index_written(
                parse_header(batch),  # with the offsets just assigned
                batch,
                marker=None if marker is None else marker[0],
                fired_origins=fired_origins,
                parked=parked,
            )
        self._after_write(segment, header.records_count)
        return AppendResult(base_offset, last_offset, log_append_time_ms, self._log_start_offset)

    def _index_written(
        self,
        header: BatchHeader,
        batch: bytes | bytearray | memoryview,
        *,
        marker: bool | None,
        fired_origins: Sequence[int] | None,
        parked: Sequence[Delivery] | None,
    ) -> None:
        """The side indexes of a batch just written (here, or copied from the leader):
        tag summaries, delays. Cheap for the batches they do not concern."""
        if self.tag_summaries is not None and not header.is_control:
            self.tag_summaries.appended(header, batch)
        if may_matter(header):
            self.delays.appended(
                header,
                batch,
                marker=marker,
                log_end=self._log_end_offset,
                fired_origins=fired_origins,
                parked=parked,
            )

    def _after_write(self, segment: LogSegment, records: int) -> None:
        fsync_every_append = self.config.fsync_every_append
        if self._directory_unsynced:
            self._directory_unsynced = False
            self._directory_dirty = True
            if fsync_every_append:
                self._fsync_guard.run(functools.partial(fsync_directory, self.directory))
                self._directory_dirty = False
        self._unflushed_messages += records
        if fsync_every_append:
            self._fsync_guard.run(segment.sync_data)
        elif self._unflushed_messages >= self.config.flush_messages:
            self.flush()

    @_storage_errors
    def append_as_follower(self, batches: bytes | bytearray | memoryview) -> None:
        """Append batches fetched from the leader, keeping their offsets, epochs and
        timestamps. A trailing partial batch is ignored. Raises CorruptMessage on a bad
        CRC and InvalidRecord when offsets do not move forward."""
        assert not self._closed, "append to a closed log"
        view = memoryview(batches)
        segment = self._segments[-1]
        records = 0
        for position, header in iter_batches(view):
            data = view[position : position + header.size_bytes]
            if not crc_is_valid(data, header):
                raise errors.CorruptMessage(f"batch at offset {header.base_offset}: bad CRC")
            if header.base_offset < self._log_end_offset or header.last_offset_delta < 0:
                raise errors.InvalidRecord(
                    f"batch with offsets {header.base_offset}..{header.last_offset} "
                    f"does not follow the log end offset {self._log_end_offset}"
                )
            now = self.clock.wall_ms()
            segment = self._segments[-1]
            if header.last_offset - segment.base_offset > RELATIVE_OFFSET_MAX:
                segment = self._roll(now, base_offset=header.base_offset)
            else:
                segment = self._segment_for(header.size_bytes, header.last_offset, now)
            segment.append(
                data,
                base_offset=header.base_offset,
                next_offset=header.next_offset,
                max_timestamp_ms=header.max_timestamp,
            )
            self._log_end_offset = header.next_offset
            self._assign_epoch_of(header)
            if header.is_control:
                self._replay_marker(segment, data, header)
            else:
                self.producer_state.replay(header)
            self._index_written(header, data, marker=None, fired_origins=None, parked=None)
            records += header.records_count
        # A new epoch is written with the next flush's checkpoints, as for the leader's
        # appends (see _write): not here, on the loop, once per partition at every
        # leader change, when followers catch up with the new leaders.
        if records:
            self._after_write(segment, records)

    # -- read -----------------------------------------------------------------------

    @_storage_errors
    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadResult:
        """Whole batches from the one holding ``offset``: at most ``max_bytes`` (but the
        first batch whole when ``min_one_batch``), never a batch reaching ``max_offset``
        (exclusive; the high watermark for consumers). May span segments, at most
        SEGMENTS_PER_READ_MAX (each slice holds its file open until sent). Raises
        OffsetOutOfRange outside [log start offset, log end offset], and
        NotLeaderOrFollower once the log is closed (a reader that held the partition
        across its deletion: its files' paths may name another topic's by now)."""
        if self._closed:
            raise errors.NotLeaderOrFollower(f"{self.directory.name} is no longer hosted here")
        if not self._log_start_offset <= offset <= self._log_end_offset:
            raise errors.OffsetOutOfRange(
                f"offset {offset} is outside [{self._log_start_offset}, {self._log_end_offset}]"
            )
        upper = (
            self._log_end_offset if max_offset is None else min(max_offset, self._log_end_offset)
        )
        slices: list[FileSlice] = []
        total = 0
        if offset >= upper:
            return ReadResult(slices, total)
        i = bisect.bisect_right(self._base_offsets, offset) - 1
        assert i >= 0, "the log start offset is inside the first segment"
        start_offset = offset
        while i < len(self._segments):
            segment = self._segments[i]
            found = segment.translate_offset(start_offset)
            if found is None:
                i += 1
                if i < len(self._segments):
                    start_offset = self._base_offsets[i]
                continue
            position, first = found
            if first.base_offset >= upper:
                break
            is_last = i + 1 == len(self._segments)
            # Never past the first damage in the segment: a torn or unparseable tail
            # is skipped, and the read goes on at the next segment's base offset.
            readable = segment.readable_bytes
            if upper >= (self._log_end_offset if is_last else self._base_offsets[i + 1]):
                end = readable
            else:
                limit = segment.translate_offset(upper)
                end = readable if limit is None else limit[0]
            if end <= position:
                break
            room = max_bytes - total
            if end - position <= room:
                slices.append(FileSlice(segment.file, position, end - position))
                total += end - position
                if end < readable or len(slices) >= SEGMENTS_PER_READ_MAX:
                    break
                i += 1
                if i < len(self._segments):
                    start_offset = self._base_offsets[i]
                continue
            cut = segment.batch_boundary_at_or_before(position, position + room) if room > 0 else 0
            if cut > position:
                slices.append(FileSlice(segment.file, position, cut - position))
                total += cut - position
            elif not slices and min_one_batch:
                slices.append(FileSlice(segment.file, position, first.size_bytes))
                total += first.size_bytes
            break
        return ReadResult(slices, total)

    @_storage_errors
    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after the log start whose
        timestamp is >= ``timestamp_ms`` (ListOffsets by time); None when every record
        is older. Finds the batch through the time index, then decodes that one batch
        for the exact record (in a LogAppendTime batch every record has the batch's
        time). The caller caps the answer at the high watermark for consumers."""
        for segment in self._segments:
            found = segment.find_batch_for_timestamp(timestamp_ms, self._log_start_offset)
            if found is None:
                continue
            position, header = found
            if header.timestamp_type == TimestampType.CREATE_TIME:
                data = os.pread(segment.file.fileno(), header.size_bytes, position)
                try:
                    records = decode_batch(data, verify_crc=False).records
                except errors.KafkaError as e:
                    logger.warning("%s: cannot decode batch at %d: %s", segment, position, e)
                    records = []
                for record in records:
                    if record.offset >= self._log_start_offset and (
                        record.timestamp_ms >= timestamp_ms
                    ):
                        return record.offset, record.timestamp_ms
            return max(header.base_offset, self._log_start_offset), header.max_timestamp
        return None

    @_storage_errors
    def max_timestamp_offset(self) -> TimestampAndOffset | None:
        """The record with the largest timestamp in the log (ListOffsets MAX_TIMESTAMP,
        KIP-734): its timestamp, its offset and its batch's leader epoch (-1 if none);
        None when no record has a timestamp. As in Kafka: the first segment holding the
        largest timestamp, the first batch there carrying it, the first record of that
        batch with that timestamp (in a LogAppendTime batch, its first record). Each
        segment keeps its max timestamp and that batch in memory, so this reads one
        batch, not the log. The caller hides the answer when it is at or above the high
        watermark."""
        best: LogSegment | None = None
        for segment in self._segments:
            if best is None or segment.max_timestamp_ms > best.max_timestamp_ms:
                best = segment
        if best is None:
            return None
        found = best.max_timestamp_batch()
        if found is None:
            return None
        position, header = found
        epoch = header.partition_leader_epoch if header.partition_leader_epoch >= 0 else -1
        if header.timestamp_type == TimestampType.CREATE_TIME:
            data = os.pread(best.file.fileno(), header.size_bytes, position)
            try:
                records = decode_batch(data, verify_crc=False).records
            except errors.KafkaError as e:
                logger.warning("%s: cannot decode batch at %d: %s", best, position, e)
                return None
            for record in records:
                if record.timestamp_ms == header.max_timestamp:
                    return TimestampAndOffset(record.timestamp_ms, record.offset, epoch)
            return None
        return TimestampAndOffset(header.max_timestamp, header.base_offset, epoch)

    # -- truncation and deletion ----------------------------------------------------

    @_storage_errors
    def truncate_to(self, offset: int) -> None:
        """Drop every offset >= ``offset`` (a follower diverged from its leader). A
        batch holding ``offset`` goes whole. Below the log start: the log is emptied and
        starts at ``offset``. At the log end, only leader epochs that start there (and
        so hold nothing) go: a follower truncating by epoch must not keep asking about
        an empty epoch its leader never had."""
        if offset >= self._log_end_offset:
            if offset == self._log_end_offset:
                self.leader_epoch_cache.truncate_from_end(offset)
                self._write_epochs_now()
            return
        if offset < self._log_start_offset or offset < self._base_offsets[0]:
            self.truncate_fully_and_start_at(offset)
            return
        logger.info("%s: truncating from %d to %d", self.directory, self._log_end_offset, offset)
        self._truncations += 1
        truncate_cleaner_checkpoint(self.directory, offset)
        while self._base_offsets[-1] > offset:
            self._schedule_delete(self._segments.pop())
            self._base_offsets.pop()
        segment = self._segments[-1]
        segment.make_active()
        segment.truncate_to(offset)
        segment.flush()
        if self._directory_dirty:
            fsync_directory(self.directory)
            self._directory_dirty = False
        self._log_end_offset = segment.next_offset
        self._high_watermark = min(self._high_watermark, self._log_end_offset)
        self._recovery_point = min(self._recovery_point, self._log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
        self._load_producer_state()
        self.delays.truncate(self._log_end_offset)
        if self.tag_summaries is not None:
            self.tag_summaries.forget(from_offset=self._log_end_offset)
        self._write_checkpoint()

    @_storage_errors
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset`` (log start = end)."""
        assert offset >= 0
        logger.info("%s: emptying the log; it restarts at offset %d", self.directory, offset)
        self._truncations += 1
        truncate_cleaner_checkpoint(self.directory, offset)
        while self._segments:
            self._schedule_delete(self._segments.pop())
            self._base_offsets.pop()
        fsync_directory(self.directory)
        self._create_segment(offset, self.clock.wall_ms())
        self._directory_dirty = True
        self._log_end_offset = self._log_start_offset = self._high_watermark = offset
        self._recovery_point = offset
        self.leader_epoch_cache.clear()
        self.producer_state.clear()
        self._undecided.clear()
        self.producer_state.delete_snapshots_after(-1)
        self.delays.truncate(0)
        if self.tag_summaries is not None:
            self.tag_summaries.forget(from_offset=0)
        self._write_checkpoint()

    @_storage_errors
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (-1: the high
        watermark), delete segments wholly below it, checkpoint it (on this thread: the
        answer waits until the new log start is durable). Returns the new log start
        offset. Raises OffsetOutOfRange beyond the high watermark."""
        if offset == -1:
            offset = self._high_watermark
        if not 0 <= offset <= self._high_watermark:
            raise errors.OffsetOutOfRange(
                f"cannot delete records before {offset}: the high watermark is "
                f"{self._high_watermark}"
            )
        if offset <= self._log_start_offset:
            return self._log_start_offset
        self._log_start_offset = offset
        while len(self._segments) > 1 and self._base_offsets[1] <= offset:
            self._delete_oldest_segment()
        self._after_log_start_moved()
        return self._log_start_offset

    def _delete_oldest_segment(self) -> None:
        assert len(self._segments) > 1, "the active segment is never deleted"
        self._schedule_delete(self._segments.pop(0))
        self._base_offsets.pop(0)

    def _after_log_start_moved(self) -> None:
        self._log_start_offset = max(self._log_start_offset, self._base_offsets[0])
        self.delays.drop_below(self._log_start_offset)
        if self.tag_summaries is not None:
            self.tag_summaries.forget(below=self._log_start_offset)
        self._high_watermark = self._clamp(self._high_watermark)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        self.producer_state.delete_snapshots_before(self._base_offsets[0])
        if self._directory_dirty:
            fsync_directory(self.directory)
            self._directory_dirty = False
        self._write_checkpoint()

    @_storage_errors
    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete the oldest whole segments past retention.ms (by their newest
        timestamp) or beyond retention.bytes. Never the active segment, never a segment
        holding offsets at or above the high watermark, never one holding a delayed
        record still to deliver (see :meth:`delayed_records_blocking_retention`). Only
        with cleanup.policy including delete. Returns how many segments were deleted."""
        count = self._segments_past_retention(self.clock.wall_ms() if now_ms is None else now_ms)
        first_unfinished = self.delays.first_unfinished_offset()
        deleted = 0
        while deleted < count and (
            first_unfinished is None or self._base_offsets[1] <= first_unfinished
        ):
            self._delete_oldest_segment()
            deleted += 1
        if deleted:
            logger.info("%s: retention deleted %d segments", self.directory, deleted)
            self._after_log_start_moved()
        return deleted

    def delayed_records_blocking_retention(self, now_ms: int) -> list[int]:
        """Offsets of parked records, ready to deliver, in segments retention would
        delete: the leader parks them again at the log end so that the segments can go
        (a parked record of an undecided transaction waits for its decision)."""
        count = self._segments_past_retention(now_ms)
        if count == 0 or self.delays.index is None:
            return []
        return self.delays.index.ready_offsets_below(self._base_offsets[count])

    def _segments_past_retention(self, now_ms: int) -> int:
        """How many of the oldest segments retention lets go, delayed records aside."""
        if not self.config.delete:
            return 0
        limit = len(self._segments) - 1  # never the active segment
        while limit > 0 and self._base_offsets[limit] > self._high_watermark:
            limit -= 1
        count = 0
        if self.config.retention_ms >= 0:
            while count < limit and now_ms - self._newest_timestamp_ms(self._segments[count]) > (
                self.config.retention_ms
            ):
                count += 1
        if self.config.retention_bytes >= 0:
            excess = self.size_bytes() - self.config.retention_bytes
            excess -= sum(segment.size_bytes for segment in self._segments[:count])
            while count < limit and excess >= self._segments[count].size_bytes:
                excess -= self._segments[count].size_bytes
                count += 1
        return count

    # -- compaction -----------------------------------------------------------------

    @_storage_errors
    def swap_cleaned(self, plan: CleaningPlan) -> bool:
        """Put the segments a built cleaning plan wrote in place of those they replace
        (on the appending thread, with its directory fsync: once a cleaning; see
        ``cleaner`` for the crash-safe protocol). Returns
        False, deleting the plan's files, when the log changed in a way that voids the
        plan (closed, truncated, a planned segment deleted) or the build failed."""
        problem = self._cleaning_plan_problem(plan)
        if problem is not None:
            logger.info("%s: abandoning a cleaning: %s", self.directory, problem)
            plan.discard()
            return False
        if plan.last_marker_removed >= 0:
            # A snapshot taken inside a transaction whose marker the plan removes would
            # reopen it on a replay from there (after a truncation): replays start past
            # the marker, or below all of that transaction's data (gone as well).
            self.producer_state.delete_snapshots_before(plan.last_marker_removed + 1)
        plan.commit()
        now_ms = self.clock.wall_ms()
        for cleaned in plan.outputs:
            first = next(i for i, s in enumerate(self._segments) if s is cleaned.replaces[0])
            for old in cleaned.replaces:
                self._schedule_delete(old)
            plan.install(cleaned)
            segment = LogSegment.open(
                self.directory,
                cleaned.base_offset,
                index_interval_bytes=self.config.index_interval_bytes,
                index_capacity_bytes=self.config.segment_index_bytes,
                active=False,
                trusted=True,
                now_ms=now_ms,
            )
            count = len(cleaned.replaces)
            if self.tag_summaries is not None:
                self.tag_summaries.forget_range(
                    cleaned.replaces[0].base_offset, cleaned.replaces[-1].next_offset
                )
            self._segments[first : first + count] = [segment]
            self._base_offsets[first : first + count] = [segment.base_offset]
        fsync_directory(self.directory)
        self._directory_dirty = False
        plan.finish()
        if plan.outputs:
            logger.info(
                "%s: cleaned below offset %d: %d segments written, %s",
                self.directory,
                plan.map_end_offset,
                len(plan.outputs),
                plan.stats,
            )
        return True

    def _cleaning_plan_problem(self, plan: CleaningPlan) -> str | None:
        """Why ``plan`` cannot be swapped into this log now, or None."""
        if plan.log is not self:
            return "the plan is for another log"
        if self._closed:
            return "the log is closed"
        if not plan.built:
            return "the plan was not built"
        if plan.truncations != self._truncations:
            return "the log was truncated"
        positions = {id(segment): i for i, segment in enumerate(self._segments)}
        for cleaned in plan.outputs:
            found = [positions.get(id(segment)) for segment in cleaned.replaces]
            if None in found or any(segment.deleted for segment in cleaned.replaces):
                return "a segment it replaces was deleted"
            first = found[0]
            assert first is not None
            if found != list(range(first, first + len(found))):
                return "the segments it replaces are no longer consecutive"
            if first + len(found) >= len(self._segments):
                return "a segment it replaces is active"
        return None

    @staticmethod
    def _newest_timestamp_ms(segment: LogSegment) -> int:
        """The segment's max timestamp, or its file's mtime when no batch has one."""
        newest = segment.max_timestamp_ms
        if newest >= 0:
            return newest
        return os.fstat(segment.file.fileno()).st_mtime_ns // 1_000_000

    # -- durability -----------------------------------------------------------------

    def _take_checkpoints(self) -> list[tuple[Path, bytes]]:
        """The checkpoint files that changed since the last taken, encoded now: the
        leader-epoch checkpoint first (a recovery point on disk must never pass an epoch
        start that is not), then the partition checkpoint. From here they count as
        written; the caller hands them to :attr:`checkpoint_writer`."""
        files: list[tuple[Path, bytes]] = []
        epochs = self.leader_epoch_cache.take_checkpoint()
        if epochs is not None:
            files.append(epochs)
        values = (self._log_start_offset, self._high_watermark, self._recovery_point)
        if values != self._checkpointed:
            offsets = {
                "log_start_offset": values[0],
                "high_watermark": values[1],
                "recovery_point": values[2],
            }
            files.append(
                (self.directory / PARTITION_CHECKPOINT_NAME, encode_offsets_checkpoint(offsets))
            )
            self._checkpointed = values
        return files

    def _write_now(self, files: list[tuple[Path, bytes]]) -> None:
        """Write ``files`` on this thread, after any checkpoint still queued. When that
        fails, the log forgets what its files hold, so the next checkpoint writes again."""
        if not files:
            return
        try:
            self.checkpoint_writer.write_now(files)
        except OSError:
            self._checkpointed = None
            self.leader_epoch_cache.mark_changed()
            raise

    def _write_checkpoint(self) -> None:
        """Write the checkpoints that changed, now (the rare writes: open, truncation,
        the log start moved, close); the flusher's go through :meth:`complete_flush`."""
        self._write_now(self._take_checkpoints())

    def _write_epochs_now(self) -> None:
        """Write the leader-epoch checkpoint now if it changed (a new leader epoch)."""
        epochs = self.leader_epoch_cache.take_checkpoint()
        if epochs is not None:
            self._write_now([epochs])

    @_storage_errors
    def flush(self) -> None:
        """fsync unflushed segments, move the recovery point to the log end, write the
        checkpoints that changed. Cheap when nothing changed."""
        if self._closed:
            return
        for segment in self._segments:
            if segment.needs_sync:
                self._fsync_guard.run(segment.flush)
        if self._directory_dirty:
            self._fsync_guard.run(functools.partial(fsync_directory, self.directory))
            self._directory_dirty = False
        self._recovery_point = self._log_end_offset
        self._unflushed_messages = 0
        self.delays.applied(self._log_end_offset, purge_below=self._high_watermark)
        self._write_checkpoint()

    def begin_flush(self) -> PendingFlush:
        """The first half of a flush that fsyncs off the appending thread.

        On the thread that appends: note the log end offset, duplicate the descriptors
        of segments with unflushed data and open the index files of rolled segments not
        synced yet (``LogSegment.needs_sync``). :meth:`PendingFlush.sync` may then
        run in a worker thread while appends go on (it touches only those duplicates),
        and :meth:`complete_flush`, back on the appending thread, moves the recovery
        point to the noted offset, never past what was synced."""
        descriptors: list[int] = []
        try:
            for segment in self._segments:
                descriptors.extend(segment.take_unflushed_descriptors())
        except OSError:
            for descriptor in descriptors:
                os.close(descriptor)
            raise
        directory = self.directory if self._directory_dirty else None
        self._directory_dirty = False
        self._unflushed_messages = 0
        index = self.delays.index
        return PendingFlush(
            descriptors,
            directory,
            self._log_end_offset,
            None if index is None else index.checkpoint,
            self._fsync_guard,
        )

    @_storage_errors
    def complete_flush(
        self, pending: PendingFlush, *, write_checkpoints: bool = True
    ) -> CheckpointJob | None:
        """The second half of :meth:`begin_flush`, after ``pending.sync()`` succeeded:
        the recovery point moves to what was synced. With ``write_checkpoints`` the
        checkpoints that changed are snapshotted here and returned as a job queued on
        :attr:`checkpoint_writer`, for the caller to run on a worker thread (its two
        fsyncs a file stay off the loop); None when nothing changed. A job never run is
        written by the next checkpoint written at once (or :meth:`close`). Without
        ``write_checkpoints`` the recovery point moves in memory only."""
        if self._closed:
            return None
        synced_to = min(pending.log_end_offset, self._log_end_offset)
        self._recovery_point = max(self._recovery_point, synced_to)
        if not write_checkpoints:
            return None
        self.delays.applied(self._log_end_offset, purge_below=self._high_watermark)
        files = self._take_checkpoints()
        return self.checkpoint_writer.submit(files) if files else None

    @_storage_errors
    def close(self) -> None:
        """Flush, snapshot the producer state, trim indexes, close every file, unlink
        segments waiting for deletion."""
        if self._closed:
            return
        self.flush()
        if self._log_end_offset > self._base_offsets[0] or self.producer_state.producers:
            self.producer_state.take_snapshot(self._log_end_offset)
        self.producer_state.delete_snapshots_before(self._base_offsets[0])
        self.delays.close()
        if self.tag_summaries is not None:
            self.tag_summaries.close()
        for segment in self._segments:
            segment.close()
        for _, segment in self._pending_deletes:
            segment.delete_files()
        self._pending_deletes.clear()
        self._closed = True

    def close_for_deletion(self) -> list[BinaryIO]:
        """Close the log and write nothing: no flush, no checkpoint, no producer
        snapshot (the partition is being deleted, and a write could only race the
        rename of its directory). The segments' log files are not closed but returned:
        reads in flight may still send from them, so the caller closes them after
        file.delete.delay.ms, as for a deleted segment. For the one owner of a detached
        log; never raises."""
        if self._closed:
            return []
        self._closed = True
        if self.cleaning_plan is not None:
            self.cleaning_plan.cancel()
        closers: list[Callable[[], None]] = [self.delays.close]
        if self.tag_summaries is not None:
            closers.append(self.tag_summaries.close)
        for close in closers:
            try:
                close()
            except (OSError, sqlite3.Error) as e:
                logger.warning("%s: closing a deleted partition: %s", self.directory, e)
        segments = self._segments + [segment for _, segment in self._pending_deletes]
        self._pending_deletes.clear()
        return [file for segment in segments if (file := segment.close_for_deletion()) is not None]

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.directory}, start={self._log_start_offset}, "
            f"hw={self._high_watermark}, end={self._log_end_offset}, "
            f"segments={len(self._segments)})"
        )
