"""One log segment: a file of whole record batches plus its two sparse indexes.

Files, named by the segment's base offset (the first offset it may hold) in 20 digits::

    00000000000000001200.log        record batches, back to back, as produced
    00000000000000001200.index      offset → position   (see ``index``)
    00000000000000001200.timeindex  timestamp → offset  (see ``index``)
    00000000000000001200.txnindex   aborted transactions (see ``transaction_index``;
                                    only when an ABORT marker landed here)

The ``.log`` file is nothing but v2 record batches, byte for byte as the producer sent
them with base offset and partition leader epoch filled in (``protocol.records.batch``)::

    position 0                  p1                        p2
    ┌─────────┬──────────┬─────┬─────────┬──────────┬─────┬───
    │ base    │ batch    │ ... │ base    │ batch    │ ... │
    │ offset  │ length L │     │ offset  │ length   │     │
    │ int64   │ int32    │     │ int64   │ int32    │     │
    └─────────┴──────────┴─────┴─────────┴──────────┴─────┴───
    ◄─ 12-byte head ──►◄── L bytes: epoch, magic, CRC-32C, header, records ──►

Base offsets strictly increase; gaps are allowed (compaction). There is no segment header
or footer: the batches describe themselves, so the file can be scanned from position 0
by reading 12-byte heads and skipping ``L`` bytes.

Recovery (:meth:`LogSegment.recover`) is that scan with every check on: each length
must fit in the file, each batch must parse as magic 2 with a valid CRC-32C, offsets must
increase and fit the int32 relative offsets of the index. The file is truncated at the
first batch that fails (a torn write at the tail after a crash, or corruption), the
indexes are rebuilt as the scan goes, and a report says what was dropped and why.

A segment is *active* (the last one of a partition: appended to, its ``.log`` always
open, index entries in memory) or *inactive* (read only). An inactive segment opens its
``.log`` and maps its indexes lazily, on first use, checks them (rebuilding them from the
log if they look wrong), and is closed again when it falls out of
:data:`OPEN_SEGMENT_FILES`, a least-recently-used set bounded by
``limits.INACTIVE_SEGMENTS_OPEN_MAX``: a partition with thousands of segments costs one
descriptor, not thousands. A file a read still holds (a :class:`FileSlice` waiting for
``sendfile``) stays open until that read lets go of it.

Damage found in an inactive segment by a scan (a torn tail, a batch header that does
not parse, a length that runs past the file) is logged once per segment with the file
and position; reads then serve the whole batches before it and continue at the next
segment's base offset, as Kafka does. Damage in the active segment fails the read with
KAFKA_STORAGE_ERROR (logged once): there is no next segment to continue at, and recovery
cuts it at the next start without the clean-shutdown marker.
"""

from __future__ import annotations

import io
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sluice.common import errors
from sluice.common.limits import INACTIVE_SEGMENTS_OPEN_MAX
from sluice.protocol.records.batch import (
    HEADER_BYTES,
    LOG_OVERHEAD_BYTES,
    BatchHeader,
    crc_is_valid,
    parse_header,
    read_offset_and_length,
)
from sluice.storage.checkpoint import write_all
from sluice.storage.index import RELATIVE_OFFSET_MAX, OffsetIndex, TimeIndex
from sluice.storage.transaction_index import TRANSACTION_INDEX_SUFFIX, TransactionIndex

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
"""Appended to a segment's file names when it is deleted; the files go after a delay."""
CLEANED_SUFFIX = ".cleaned"
"""Appended to the file names of a segment the log cleaner is writing (not yet part of
the log; see ``cleaner``)."""
SWAP_SUFFIX = ".swap"
"""Appended to the file names of a complete cleaned segment that is being swapped in
(committed: it replaces the segments it covers; see ``cleaner``)."""

SEGMENT_NAME_DIGITS = 20

SCAN_READ_BYTES = 16 * 1024
"""Bytes read per pread while walking batch headers. Index entries are ~4 KiB of log
apart by default, so one read usually covers a whole lookup scan of small batches."""

RECOVERY_READ_BYTES = 1024 * 1024
"""Bytes read at a time while recovery checks every batch's CRC (larger batches are read
whole)."""


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000001200.log`` for base offset 1200 and suffix ``.log``."""
    assert base_offset >= 0
    return f"{base_offset:0{SEGMENT_NAME_DIGITS}d}{suffix}"


def parse_segment_file_name(name: str, suffix: str) -> int | None:
    """The base offset in a segment file name with ``suffix``, or None if it is not one."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != SEGMENT_NAME_DIGITS or not stem.isdigit():
        return None
    return int(stem)


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a segment file, for ``loop.sendfile(transport, file, position,
    size_bytes)``. The segment keeps ``file`` open (a deleted segment for
    ``file.delete.delay.ms``). Use :meth:`read` rather than ``file.seek/read`` when the
    bytes are wanted in memory: several readers share one file object."""

    file: BinaryIO
    position: int
    size_bytes: int

    def read(self) -> bytes:
        """The bytes of the slice (pread: no shared file position is touched)."""
        data = os.pread(self.file.fileno(), self.size_bytes, self.position)
        if len(data) != self.size_bytes:
            raise errors.KafkaStorageError(
                f"{getattr(self.file, 'name', '?')}: wanted {self.size_bytes} bytes at "
                f"{self.position}, the file has {len(data)}"
            )
        return data


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What :meth:`LogSegment.recover` kept and dropped."""

    valid_bytes: int
    truncated_bytes: int
    batches: int
    next_offset: int
    problem: str | None
    """Why the scan stopped before the end of the file; None when it reached the end."""


class _SegmentFile(io.FileIO):
    """A segment's ``.log`` file object. Closed explicitly when the log closes, or by
    the garbage collector once neither its segment (after an eviction from
    :data:`OPEN_SEGMENT_FILES`) nor any read in flight refers to it; that last close is
    expected, so it is done quietly (no ResourceWarning)."""

    def __del__(self) -> None:
        if not self.closed:
            self.close()


class _Damage(Exception):
    """A scan met bytes that are not a whole batch (see :meth:`LogSegment.iter_batches`)."""

    def __init__(self, position: int, problem: str) -> None:
        super().__init__(problem)
        self.position = position
        self.problem = problem


def _scan_batches(file: io.FileIO, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch in [start, end) of a file that should hold whole
    batches there; raises :class:`_Damage` where it does not. Holds ``file`` (not its
    descriptor number) so an eviction in between cannot close it under the scan."""
    fd = file.fileno()
    position = start
    chunk = b""
    chunk_start = start
    while position < end:
        in_chunk = position - chunk_start
        if in_chunk + HEADER_BYTES > len(chunk):
            chunk = os.pread(fd, min(SCAN_READ_BYTES, end - position), position)
            chunk_start = position
            in_chunk = 0
            if len(chunk) < HEADER_BYTES:
                raise _Damage(
                    position, f"{end - position} bytes at the end cannot hold a batch header"
                )
        try:
            header = parse_header(chunk, in_chunk)
        except errors.KafkaError as e:
            raise _Damage(position, f"bad batch header: {e}") from None
        if position + header.size_bytes > end:
            raise _Damage(
                position,
                f"torn batch: {header.size_bytes} bytes, {end - position} left in the file",
            )
        yield position, header
        position += header.size_bytes


class OpenSegmentFiles:
    """The inactive segments whose ``.log`` is open (and indexes mapped), least recently
    used first. Past ``capacity`` the least recently used one lets its files go; one with
    unflushed data is skipped until it is flushed (an fsync must use a descriptor that
    was open when the data was written, to see a write-back error). Active segments are
    never here: they stay open. Used from the thread that owns the logs."""

    def __init__(self, capacity: int) -> None:
        assert capacity >= 1
        self.capacity = capacity
        self._segments: OrderedDict[int, LogSegment] = OrderedDict()

    def __len__(self) -> int:
        return len(self._segments)

    def touch(self, segment: LogSegment) -> None:
        key = id(segment)
        if key in self._segments:
            self._segments.move_to_end(key)
            return
        self._segments[key] = segment
        if len(self._segments) <= self.capacity:
            return
        evictable = [
            k
            for k, candidate in self._segments.items()
            if candidate is not segment and candidate.evictable
        ][: len(self._segments) - self.capacity]
        for k in evictable:
            self._segments.pop(k)._release_files()

    def forget(self, segment: LogSegment) -> None:
        self._segments.pop(id(segment), None)


OPEN_SEGMENT_FILES = OpenSegmentFiles(INACTIVE_SEGMENTS_OPEN_MAX)
"""The process's bound on open inactive segments (the broker may lower its capacity to
fit its open-file limit)."""


class LogSegment:
    """One ``.log`` file and its indexes. Not thread-safe; the partition log owns it."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        index_capacity_bytes: int,
        active: bool,
        created_ms: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.index_capacity_bytes = index_capacity_bytes
        self.created_ms = created_ms
        """Wall-clock start of the segment's age for ``segment.ms``."""
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        self.index_path = directory / segment_file_name(base_offset, INDEX_SUFFIX)
        self.time_index_path = directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX)
        self.txn_index = TransactionIndex(
            directory / segment_file_name(base_offset, TRANSACTION_INDEX_SUFFIX)
        )
        self._file: _SegmentFile | None = None
        """Open lazily (see :attr:`file`); dropped again by :data:`OPEN_SEGMENT_FILES`."""
        self.size_bytes = os.stat(self.log_path).st_size if self.log_path.exists() else 0
        self._active = active
        self._damage: tuple[int, str] | None = None
        """(position, problem) of the first damage a scan found in the file."""
        self._tail_checked = False
        """True once the batches after the last index entry were walked (then
        :attr:`readable_bytes` is known)."""
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._max_timestamp_ms = -1
        self._max_timestamp_batch_offset: int | None = None
        """Base offset of the first batch carrying ``_max_timestamp_ms``; None when not
        known (a trusted segment reopened: found through the time index on demand)."""
        self._bytes_since_index_entry = 0
        self._last_batch_offset: int | None = None
        self._next_offset: int | None = None
        self._unflushed = False
        self._indexes_unsynced = False
        """Rolled, and the trimmed index files not fsynced yet: the next flush syncs
        them (on the flusher's worker thread), before the recovery point passes this
        segment, since recovery trusts the indexes below it."""
        self.deleted = False
        self.needs_recovery = False
        """Set by :meth:`open` when the caller must run :meth:`recover`."""

    # -- creation -------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        index_capacity_bytes: int,
        now_ms: int,
        new_directory: bool = False,
    ) -> LogSegment:
        """A new, empty, active segment. Refuses to overwrite an existing one.
        ``new_directory``: the directory was just made, so there is nothing to check or
        remove (fewer system calls when thousands of partitions are created)."""
        log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        if not new_directory:
            if log_path.exists() and log_path.stat().st_size:
                raise errors.KafkaStorageError(f"{log_path} already exists and is not empty")
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TRANSACTION_INDEX_SUFFIX):
                (directory / segment_file_name(base_offset, suffix)).unlink(missing_ok=True)
        segment = cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            index_capacity_bytes=index_capacity_bytes,
            active=True,
            created_ms=now_ms,
        )
        segment._open_file(create=True)
        segment._next_offset = base_offset
        segment._tail_checked = True
        segment._unflushed = False  # nothing written; the directory entry is the log's
        segment._fresh_indexes(files_exist=not new_directory)
        return segment

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        index_capacity_bytes: int,
        active: bool,
        trusted: bool,
        now_ms: int,
    ) -> LogSegment:
        """An existing segment. ``trusted`` (below the recovery point, or after a clean
        shutdown): no CRC scan; the active one has its indexes loaded and checked now and
        its next offset found by scanning from the last index entry, an inactive one
        loads them on first use. Not trusted: the caller must call :meth:`recover` next.
        """
        segment = cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            index_capacity_bytes=index_capacity_bytes,
            active=active,
            created_ms=now_ms,
        )
        segment.needs_recovery = not trusted
        if active and trusted:
            try:
                segment._load_indexes()
            except errors.KafkaStorageError as e:
                log.warning("%s: cannot be trusted, it will be recovered: %s", segment.log_path, e)
                segment.needs_recovery = True
        return segment

    def age_from_first_batch(self, now_ms: int) -> None:
        """Start the ``segment.ms`` clock at the first batch's max timestamp when it is
        plausible (Kafka ages a reopened segment from its first record), else now."""
        self.created_ms = now_ms
        if self.size_bytes >= HEADER_BYTES:
            for _, header in self.iter_batches():
                if 0 <= header.max_timestamp <= now_ms:
                    self.created_ms = header.max_timestamp
                break

    # -- files ----------------------------------------------------------------------

    def _open_file(self, *, create: bool = False) -> _SegmentFile:
        assert not self.deleted, f"{self.log_path} was deleted"
        # Not O_APPEND: Linux pwrite ignores the position on O_APPEND files, and writing
        # at an explicit position makes a failed, partial write harmless (overwritten).
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(self.log_path, flags, 0o644)
        self._file = _SegmentFile(fd, "r+", closefd=True)
        return self._file

    @property
    def file(self) -> io.FileIO:
        """The open ``.log`` file (opened now if it was not). Hold the object, not its
        descriptor number, for as long as it is used."""
        file = self._file
        if file is None:
            file = self._open_file()
        if not self._active and not self.deleted:
            OPEN_SEGMENT_FILES.touch(self)
        return file

    def _release_files(self) -> None:
        """Let go of the ``.log`` and the index mappings (called by
        :data:`OPEN_SEGMENT_FILES` for an inactive segment). A read that still holds the
        file keeps it open until it is done."""
        assert not self._active
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close_without_trim()
        self._offset_index = self._time_index = None
        self._file = None

    @property
    def evictable(self) -> bool:
        """True when :data:`OPEN_SEGMENT_FILES` may release the files now: inactive,
        nothing unflushed, no index being written."""
        index = self._offset_index
        return not (self._active or self._unflushed or (index is not None and index.writable))

    @property
    def is_open(self) -> bool:
        """True while the segment holds its ``.log`` open."""
        return self._file is not None

    # -- damage ---------------------------------------------------------------------

    @property
    def readable_bytes(self) -> int:
        """Bytes from position 0 that hold whole batches: the file size, or the position
        of the first damage found. For an inactive segment the batches after the last
        index entry are walked once to know it."""
        if not self._tail_checked:
            self._indexes()
        if self._damage is None:
            return self.size_bytes
        return min(self._damage[0], self.size_bytes)

    def _note_damage(self, position: int, problem: str) -> None:
        """Remember damage at ``position``; log it the first time (not once per read)."""
        if self._damage is not None and self._damage[0] <= position:
            return
        first = self._damage is None
        self._damage = (position, problem)
        if not first:
            return
        if self._active:
            log.error(
                "%s: damaged at position %d: %s; reads reaching it fail with "
                "KAFKA_STORAGE_ERROR until recovery cuts the log there (restart the broker "
                "without its .clean-shutdown marker)",
                self.log_path,
                position,
                problem,
            )
        else:
            log.error(
                "%s: damaged at position %d of %d: %s; the whole batches before it are "
                "served, reads continue at the next segment",
                self.log_path,
                position,
                self.size_bytes,
                problem,
            )

    # -- indexes --------------------------------------------------------------------

    def _indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        if not self._active and not self.deleted:
            OPEN_SEGMENT_FILES.touch(self)
        if self._offset_index is None or self._time_index is None:
            self._load_indexes()
        assert self._offset_index is not None and self._time_index is not None
        return self._offset_index, self._time_index

    def _load_indexes(self) -> None:
        """Map both indexes, check them, rebuild them from the log when they are wrong."""
        problem: str | None = None
        missing = [p.name for p in (self.index_path, self.time_index_path) if not p.exists()]
        if missing and self.size_bytes == 0:
            # An empty segment closed without index files (nothing to write): not damage.
            self._fresh_indexes(files_exist=False)
            self._next_offset = self.base_offset
            self._tail_checked = True
            if not self._active:
                self._finish_indexes()
            return
        if missing:
            problem = f"missing {', '.join(missing)}"
        else:
            self._offset_index = OffsetIndex(
                self.index_path, self.base_offset, self.index_capacity_bytes, self._active
            )
            self._time_index = TimeIndex(
                self.time_index_path, self.base_offset, self.index_capacity_bytes, self._active
            )
            problem = self._offset_index.check(self.size_bytes) or self._time_index.check()
            offset, position = self._offset_index.last_entry()
            if problem is None and position and not self._head_matches(position, offset):
                problem = f"last entry ({offset}, {position}) is not a batch of the log"
        if problem is not None:
            log.warning("%s: rebuilding indexes: %s", self.log_path, problem)
            self.rebuild_indexes()
            return
        offset_index, time_index = self._offset_index, self._time_index
        assert offset_index is not None and time_index is not None
        last_time = time_index.last_entry()
        self._max_timestamp_ms = last_time[0] if last_time else -1
        self._max_timestamp_batch_offset = None
        sparse = self._scan_tail(stop_at_missing_entry=True)
        if sparse is not None:
            # Not damage: every entry there is right, the index only lacks later ones
            # (index.interval.bytes was lowered since it was written, or the file was
            # cut short), which would make lookups in this segment scan far.
            log.info(
                "%s: indexing anew with index.interval.bytes=%d: %s",
                self.log_path,
                self.index_interval_bytes,
                sparse,
            )
            self.rebuild_indexes()

    def _scan_tail(self, *, stop_at_missing_entry: bool = False) -> str | None:
        """Walk the batches after the last offset-index entry: the next offset, the last
        batch, and the max timestamp even if the time index lost its final entry.

        An index written by :meth:`_index_batch` has an entry for every batch that
        starts index.interval.bytes or more past the previous entry (until the index is
        full), so this walk covers at most about index.interval.bytes plus one batch,
        however large the batches (a segment of one batch larger than the interval has
        no entry at all, and needs none). With ``stop_at_missing_entry``, a batch past
        that bound ends the walk, and the return value says where the entry is missing
        (the caller rebuilds the indexes); None when the index is complete."""
        offset_index, _ = self._indexes()
        last_offset, position = offset_index.last_entry()
        self._bytes_since_index_entry = self.size_bytes - position
        next_offset = self.base_offset if position == 0 else last_offset
        entry_due_at = position + self.index_interval_bytes
        for batch_position, header in self.iter_batches(position):
            missing = batch_position >= entry_due_at and not offset_index.is_full
            if stop_at_missing_entry and missing:
                return (
                    f"no entry for the batch at position {batch_position}, "
                    f"{batch_position - position} bytes past the last one"
                )
            next_offset = header.next_offset
            self._last_batch_offset = header.base_offset
            self._note_max_timestamp(header.max_timestamp, header.base_offset)
        self._next_offset = next_offset
        self._tail_checked = True
        return None

    def _fresh_indexes(self, *, files_exist: bool = True) -> tuple[OffsetIndex, TimeIndex]:
        """Delete both index files and start empty, writable ones."""
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close_without_trim()
        if files_exist:
            self.index_path.unlink(missing_ok=True)
            self.time_index_path.unlink(missing_ok=True)
        self._offset_index = OffsetIndex(
            self.index_path, self.base_offset, self.index_capacity_bytes, writable=True, empty=True
        )
        self._time_index = TimeIndex(
            self.time_index_path,
            self.base_offset,
            self.index_capacity_bytes,
            writable=True,
            empty=True,
        )
        self._max_timestamp_ms = -1
        self._max_timestamp_batch_offset = None
        self._bytes_since_index_entry = 0
        self._last_batch_offset = None
        return self._offset_index, self._time_index

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes by walking the batch headers of the log."""
        self._fresh_indexes()
        next_offset = self.base_offset
        for position, header in self.iter_batches():
            self._index_batch(position, header.base_offset, header.size_bytes, header.max_timestamp)
            next_offset = header.next_offset
        self._next_offset = next_offset
        self._tail_checked = True
        if not self._active:
            self._finish_indexes()

    def _index_batch(self, position: int, offset: int, size: int, max_timestamp_ms: int) -> None:
        """Account for a batch written at ``position``; index it every
        ``index.interval.bytes``. O(1)."""
        offset_index, time_index = self._offset_index, self._time_index
        assert offset_index is not None and time_index is not None
        self._note_max_timestamp(max_timestamp_ms, offset)
        if (
            position > 0
            and self._bytes_since_index_entry >= self.index_interval_bytes
            and not offset_index.is_full
        ):
            offset_index.append(offset, position)
            if time_index.free_entries > 1:  # the last slot is kept for _finish_indexes
                time_index.maybe_append(self._max_timestamp_ms, offset)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size
        self._last_batch_offset = offset

    def _note_max_timestamp(self, max_timestamp_ms: int, batch_offset: int) -> None:
        """Keep the segment's max timestamp and the first batch that carries it (a later
        batch with the same timestamp does not replace it, as in Kafka)."""
        if max_timestamp_ms > self._max_timestamp_ms:
            self._max_timestamp_ms = max_timestamp_ms
            self._max_timestamp_batch_offset = batch_offset

    def _finish_indexes(self, *, sync: bool = True) -> None:
        """Write the final time-index entry (the segment's max timestamp) and trim both
        files to their entries (fsynced unless ``sync`` is False)."""
        offset_index, time_index = self._indexes()
        if self._last_batch_offset is not None and time_index.writable:
            time_index.maybe_append(self._max_timestamp_ms, self._last_batch_offset)
        offset_index.make_read_only(sync=sync)
        time_index.make_read_only(sync=sync)

    def index_is_full(self) -> bool:
        """True when the next append might find no room in an index (then roll)."""
        offset_index, time_index = self._indexes()
        return offset_index.is_full or time_index.free_entries <= 1

    def _head_matches(self, position: int, offset: int) -> bool:
        head = os.pread(self.file.fileno(), LOG_OVERHEAD_BYTES, position)
        return len(head) == LOG_OVERHEAD_BYTES and read_offset_and_length(head)[0] == offset

    def _verified_lookup(self, offset: int) -> int:
        """File position from which to scan for ``offset``; the index hit is checked
        against the log and the index rebuilt when it lies."""
        offset_index, _ = self._indexes()
        found_offset, position = offset_index.lookup(offset)
        if position and not self._head_matches(position, found_offset):
            log.warning(
                "%s: index entry (%d, %d) does not match the log; rebuilding",
                self.log_path,
                found_offset,
                position,
            )
            self.rebuild_indexes()
            found_offset, position = self._indexes()[0].lookup(offset)
        return position

    # -- state ----------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self._active

    @property
    def max_timestamp_ms(self) -> int:
        """Largest batch max timestamp in the segment; -1 when it has none."""
        self._indexes()
        return self._max_timestamp_ms

    @property
    def next_offset(self) -> int:
        """One past the last offset in the segment (its base offset when empty)."""
        if self._next_offset is None:
            self._indexes()
        assert self._next_offset is not None
        return self._next_offset

    def iter_batches(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from ``start_position`` (a batch start) up to
        the first damage. Damage is logged once; in the active segment it raises
        KafkaStorageError, in an inactive one the iteration just ends there."""
        end = self.size_bytes if self._damage is None else min(self._damage[0], self.size_bytes)
        try:
            yield from _scan_batches(self.file, start_position, end)
        except _Damage as damage:
            self._note_damage(damage.position, damage.problem)
            if self._active:
                raise errors.KafkaStorageError(
                    f"{self.log_path}: damaged at position {damage.position}: {damage.problem}"
                ) from None

    # -- append ---------------------------------------------------------------------

    def append(
        self,
        batch: bytes | bytearray | memoryview,
        *,
        base_offset: int,
        next_offset: int,
        max_timestamp_ms: int,
    ) -> int:
        """Write one batch (offsets already stamped) at the end; return its position.
        The bytes reach the page cache before this returns (pwrite, no user buffer)."""
        assert self._active, f"{self.log_path} is not the active segment"
        assert base_offset >= self.next_offset and next_offset > base_offset
        assert next_offset - 1 - self.base_offset <= RELATIVE_OFFSET_MAX
        position = self.size_bytes
        fd = self.file.fileno()
        written = os.pwrite(fd, batch, position)  # one call for all but a short write
        if written < len(batch):
            write_all(fd, memoryview(batch)[written:], position + written)
        self._index_batch(position, base_offset, len(batch), max_timestamp_ms)
        self.size_bytes = position + len(batch)
        self._next_offset = next_offset
        self._unflushed = True
        return position

    # -- lookups --------------------------------------------------------------------

    def translate_offset(self, offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= ``offset``
        (the batch holding it, or the next one after a gap); None when there is none in
        this segment."""
        position = self._verified_lookup(offset) if offset > self.base_offset else 0
        for found, header in self.iter_batches(position):
            if header.last_offset >= offset:
                return found, header
        return None

    def batch_boundary_at_or_before(self, start: int, limit: int) -> int:
        """The largest batch boundary b with start <= b <= limit (``start`` is a batch
        start). Used to cut a read at whole batches within a byte budget."""
        assert 0 <= start <= limit
        offset_index, _ = self._indexes()
        found_offset, position = offset_index.lookup_by_position(limit)
        if position > start and not self._head_matches(position, found_offset):
            position = start
        boundary = max(position, start)
        for found, header in self.iter_batches(boundary):
            end = found + header.size_bytes
            if end > limit:
                break
            boundary = end
        return boundary

    def max_timestamp_batch(self) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose max timestamp is the segment's;
        None when the segment holds no timestamped batch. Cheap: the batch is known from
        appends and recovery, or found from the time index (one short scan) after a
        trusted reopen."""
        max_timestamp_ms = self.max_timestamp_ms
        if max_timestamp_ms < 0 or self.size_bytes == 0:
            return None
        batch_offset = self._max_timestamp_batch_offset
        if batch_offset is not None:
            position = self._verified_lookup(batch_offset) if batch_offset > self.base_offset else 0
            for found, header in self.iter_batches(position):
                if header.base_offset >= batch_offset:
                    if header.max_timestamp == max_timestamp_ms:
                        return found, header
                    break
        found_batch = self.find_batch_for_timestamp(max_timestamp_ms)
        if found_batch is not None:
            self._max_timestamp_batch_offset = found_batch[1].base_offset
        return found_batch

    def find_batch_for_timestamp(
        self, timestamp_ms: int, min_offset: int = 0
    ) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch that holds offsets >= ``min_offset``
        and whose max timestamp is >= ``timestamp_ms``; None when no batch in this
        segment is that new."""
        if self.max_timestamp_ms < timestamp_ms or self.size_bytes == 0:
            return None
        _, time_index = self._indexes()
        start_offset = max(time_index.lookup_before(timestamp_ms) or 0, min_offset)
        position = self._verified_lookup(start_offset) if start_offset > self.base_offset else 0
        for found, header in self.iter_batches(position):
            if header.max_timestamp >= timestamp_ms and header.last_offset >= min_offset:
                return found, header
        return None

    # -- recovery and truncation ----------------------------------------------------

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None) -> RecoveryReport:
        """Check every batch from position 0 (bounds, magic, CRC-32C, increasing
        offsets), truncate the file at the first that fails, rebuild the indexes. Calls
        ``on_batch`` with each good batch's header, in order."""
        self._fresh_indexes()
        self.needs_recovery = False
        file = self.file
        fd = file.fileno()
        file_size = os.fstat(fd).st_size
        name = str(self.log_path)
        position = 0
        batches = 0
        next_offset = self.base_offset
        problem: str | None = None
        chunk = b""
        chunk_start = 0

        def bytes_at(start: int, size: int) -> memoryview | None:
            nonlocal chunk, chunk_start
            if not (chunk_start <= start and start + size <= chunk_start + len(chunk)):
                chunk = os.pread(fd, max(size, RECOVERY_READ_BYTES), start)
                chunk_start = start
                if len(chunk) < size:
                    return None
            view = memoryview(chunk)
            return view[start - chunk_start : start - chunk_start + size]

        while position < file_size:
            remaining = file_size - position
            if remaining < LOG_OVERHEAD_BYTES:
                problem = f"torn batch head: {remaining} bytes at {position}"
                break
            head = bytes_at(position, LOG_OVERHEAD_BYTES)
            if head is None:
                problem = f"short read at {position}"
                break
            _, batch_length = read_offset_and_length(head)
            size = LOG_OVERHEAD_BYTES + batch_length
            if batch_length < HEADER_BYTES - LOG_OVERHEAD_BYTES:
                problem = f"batch at {position} has impossible length {batch_length}"
                break
            if size > remaining:
                problem = f"torn batch at {position}: needs {size} bytes, {remaining} left"
                break
            data = bytes_at(position, size)
            if data is None:
                problem = f"short read of {size} bytes at {position}"
                break
            try:
                header = parse_header(data)
            except errors.KafkaError as e:
                problem = f"bad batch at {position}: {e}"
                break
            if not crc_is_valid(data, header):
                problem = f"CRC-32C mismatch in batch at {position} (offset {header.base_offset})"
                break
            if header.base_offset < next_offset or header.last_offset_delta < 0:
                problem = (
                    f"batch at {position} has offsets {header.base_offset}.."
                    f"{header.last_offset}, expected from {next_offset} on"
                )
                break
            if header.last_offset - self.base_offset > RELATIVE_OFFSET_MAX:
                problem = f"batch at {position} has offset {header.last_offset}: out of range"
                break
            self._index_batch(position, header.base_offset, size, header.max_timestamp)
            if on_batch is not None:
                on_batch(header)
            batches += 1
            next_offset = header.next_offset
            position += size
        if position < file_size:
            os.ftruncate(fd, position)
        # Checked is not durable: after a process crash the pages may be only in the
        # page cache. The next flush syncs them before the recovery point passes them.
        self._unflushed = True
        self.size_bytes = position
        self._next_offset = next_offset
        self._damage = None
        self._tail_checked = True
        if not self._active:
            self._finish_indexes()
        if problem is not None:
            log.debug("%s: recovery stopped: %s", name, problem)
        return RecoveryReport(
            valid_bytes=position,
            truncated_bytes=file_size - position,
            batches=batches,
            next_offset=next_offset,
            problem=problem,
        )

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= ``offset`` (a batch straddling it
        goes whole). Returns the bytes removed. The segment must be active."""
        assert self._active
        found = self.translate_offset(offset)
        if found is None:
            self._next_offset = min(self.next_offset, offset)
            return 0
        position, header = found
        offset_index, time_index = self._indexes()
        offset_index.truncate_from(header.base_offset)
        time_index.truncate_from(header.base_offset)
        removed = self.size_bytes - position
        os.ftruncate(self.file.fileno(), position)
        self.size_bytes = position
        self._next_offset = min(offset, header.base_offset)
        self._unflushed = True
        # Recompute what the removed batches may have contributed.
        last_time = time_index.last_entry()
        self._max_timestamp_ms = -1
        self._max_timestamp_batch_offset = None
        self._last_batch_offset = None
        scan_from = 0
        if last_time is not None:
            self._max_timestamp_ms = last_time[0]
            scan_from = self._verified_lookup(last_time[1])
        for _, batch_header in self.iter_batches(scan_from):
            self._note_max_timestamp(batch_header.max_timestamp, batch_header.base_offset)
            self._last_batch_offset = batch_header.base_offset
        self._bytes_since_index_entry = self.size_bytes - offset_index.last_entry()[1]
        return removed

    # -- life cycle -----------------------------------------------------------------

    def make_inactive(self) -> None:
        """The segment was rolled: final time-index entry, trim the indexes. Their
        fsyncs are left to the next flush (:attr:`needs_sync`), which the broker runs on
        a worker thread: a roll costs the appending thread no wait for the disk (but an
        fsync of the .txnindex when aborted transactions were indexed since the last)."""
        if not self._active:
            return
        self._finish_indexes(sync=False)
        self._indexes_unsynced = True
        # Synced now (when a marker wrote to it since the last sync): the producer-state
        # snapshot this roll writes makes recovery replay markers only after it.
        self.txn_index.sync()
        self._active = False
        OPEN_SEGMENT_FILES.touch(self)

    def make_active(self) -> None:
        """The segment is the last again (the log was truncated back into it)."""
        if self._active:
            return
        offset_index, time_index = self._indexes()
        if self._file is None:
            self._open_file()
        OPEN_SEGMENT_FILES.forget(self)
        self._active = True
        self._indexes_unsynced = False  # an active segment's indexes are never trusted
        offset_index.make_writable(self.index_capacity_bytes)
        time_index.make_writable(self.index_capacity_bytes)
        self._scan_tail()

    @property
    def unflushed(self) -> bool:
        return self._unflushed

    @property
    def needs_sync(self) -> bool:
        """Unflushed data, or index files a roll left unsynced."""
        return self._unflushed or self._indexes_unsynced

    def flush(self) -> None:
        """fdatasync the log file, and the index files of a roll not synced yet. The
        indexes of the active segment are not synced: after a crash the active segment
        is always recovered, which rebuilds them; an inactive segment's indexes are
        synced by the first flush after its roll, before the recovery point passes it."""
        if self._unflushed:
            os.fdatasync(self.file.fileno())
            self._unflushed = False
        if self._indexes_unsynced:
            descriptors = self._take_unsynced_index_descriptors()
            try:
                for descriptor in descriptors:
                    os.fsync(descriptor)
            finally:
                for descriptor in descriptors:
                    os.close(descriptor)

    def take_unflushed_descriptors(self) -> list[int]:
        """For a flush done on another thread: descriptors to fdatasync and close (a
        duplicate of the log file's if there is unflushed data; the index files a roll
        left unsynced). The segment counts as flushed from now on; appends after this
        mark it again."""
        descriptors: list[int] = []
        if self._unflushed:
            self._unflushed = False
            descriptors.append(os.dup(self.file.fileno()))
        if self._indexes_unsynced:
            try:
                descriptors.extend(self._take_unsynced_index_descriptors())
            except OSError:
                for descriptor in descriptors:
                    os.close(descriptor)
                raise
        return descriptors

    def _take_unsynced_index_descriptors(self) -> list[int]:
        """Read-only descriptors of the index files a roll left unsynced (the caller
        fsyncs and closes them); from now on they count as synced. Opened anew, not
        kept from the write: the files are derived from the log, and a write-back error
        nobody has seen yet is reported to a descriptor opened after it (as for the
        .txnindex, synced through a new descriptor too)."""
        self._indexes_unsynced = False
        descriptors: list[int] = []
        try:
            for path in (self.index_path, self.time_index_path):
                descriptors.append(os.open(path, os.O_RDONLY))
        except OSError:
            for descriptor in descriptors:
                os.close(descriptor)
            raise
        return descriptors

    def sync_data(self) -> None:
        """fdatasync the log file only (acks that must be durable; indexes are rebuilt
        by recovery if lost)."""
        os.fdatasync(self.file.fileno())

    def close(self) -> None:
        """Trim the indexes and close every file. An empty active segment writes no
        index files (opening it again starts empty indexes)."""
        if self._active and self.size_bytes == 0:
            for index in (self._offset_index, self._time_index):
                if index is not None:
                    index.close_without_trim()
            self._offset_index = self._time_index = None
        elif self._active:
            self._finish_indexes()
        elif self._indexes_unsynced:
            self.flush()
        self.txn_index.sync()
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close()
        self._offset_index = self._time_index = None
        OPEN_SEGMENT_FILES.forget(self)
        if self._file is not None:
            self._file.close()
            self._file = None

    def close_for_deletion(self) -> BinaryIO | None:
        """Close the indexes without writing anything (no trim, no sync) and hand over
        the open log file, if any: a read in flight (sendfile) may still be sending
        from it, so the caller closes it once file.delete.delay.ms has passed. The
        segment's partition is being deleted."""
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close_without_trim()
        self._offset_index = self._time_index = None
        OPEN_SEGMENT_FILES.forget(self)
        file, self._file = self._file, None
        return file

    def rename_to_deleted(self) -> None:
        """Mark for deletion: unmap the indexes, add ``.deleted`` to the file names. The
        log file stays open so reads in flight (sendfile) can finish."""
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close_without_trim()
        self._offset_index = self._time_index = None
        OPEN_SEGMENT_FILES.forget(self)
        self.deleted = True
        for path in self._paths():
            if path.exists():
                path.rename(path.with_name(path.name + DELETED_SUFFIX))

    def delete_files(self) -> None:
        """Close the log file and unlink the segment's ``.deleted`` files."""
        assert self.deleted
        if self._file is not None:
            self._file.close()
            self._file = None
        for path in self._paths():
            path.with_name(path.name + DELETED_SUFFIX).unlink(missing_ok=True)

    def _paths(self) -> tuple[Path, ...]:
        return (self.log_path, self.index_path, self.time_index_path, self.txn_index.path)

    def __repr__(self) -> str:
        state = "active" if self._active else "inactive"
        return f"LogSegment({self.log_path.name}, {self.size_bytes} bytes, {state})"
