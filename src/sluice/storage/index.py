"""Sparse indexes of one log segment: offset → file position, timestamp → offset.

Offset index, ``<base offset>.index``: 8-byte entries, big-endian::

    ┌───────────────────────┬───────────────────────┐
    │ relative offset int32 │ file position   int32 │  x entries
    └───────────────────────┴───────────────────────┘
    relative offset = base offset of a batch - base offset of the segment
    file position   = byte in the .log file where that batch starts

Entries are added every ``index.interval.bytes`` of log, so both columns strictly
increase. The first batch (position 0) is never indexed: "no entry below" means "start at
position 0", which also makes an all-zero entry (a preallocated, never-written slot)
recognisably invalid.

Time index, ``<base offset>.timeindex``: 12-byte entries, big-endian::

    ┌──────────────────────┬───────────────────────┐
    │ timestamp ms   int64 │ relative offset int32 │  x entries
    └──────────────────────┴───────────────────────┘

An entry (T, r) says: the batch at relative offset r and every batch before it have a max
timestamp ≤ T. Entries are added beside offset-index entries when the segment's running
max timestamp has grown, plus one final entry carrying the segment's max timestamp when
the segment stops being active. Timestamps strictly increase; offsets never decrease.

Life cycle of both files::

    active segment:   entries kept in memory (a buffer that grows as entries come, up
                      to segment.index.bytes); no file descriptor, no mapping
          │ roll / close
          ▼
    inactive segment: entries written to the file, fsynced, mapped read-only

An active index holds no descriptor, so a broker with many partitions spends one
descriptor per partition (its active ``.log``), not three. A crash loses the active
segment's entries, or leaves an older file behind; the active segment is always
recovered after a crash, which rebuilds them. A file
whose size is not a multiple of the entry size, or whose first and last entries are out
of order or out of bounds, fails :meth:`check` and is rebuilt from the log. Lookups are
binary searches over the mapping; the segment verifies each hit against the log.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import ClassVar

from sluice.storage.checkpoint import write_all

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")

RELATIVE_OFFSET_MAX = 2**31 - 1
"""Relative offsets and positions are int32; a segment rolls before either overflows."""


class _SparseIndex:
    """A file of fixed-size, sorted entries, memory-mapped. Subclasses name the columns."""

    ENTRY: ClassVar[struct.Struct]

    def __init__(
        self,
        path: Path,
        base_offset: int,
        capacity_bytes: int,
        writable: bool,
        *,
        empty: bool = False,
    ):
        """``empty``: start a writable index with no entries without looking for the
        file (it is known not to exist or to be replaced)."""
        self.path = path
        self.base_offset = base_offset
        self._entry_bytes = self.ENTRY.size
        self._mmap: mmap.mmap | None = None
        """The entries of a read-only index (file mapped read-only)."""
        self._memory: bytearray | None = None
        """The entries of a writable index (grown as entries are appended)."""
        self._writable = False
        self._entries = 0
        self._last: tuple[int, int] | None = None
        """The last entry, kept so appends never read the mapping back."""
        self._file_bytes = 0
        self._capacity_entries = 0
        if empty:
            assert writable
            self._writable = True
            self._memory = bytearray()
            self._capacity_entries = capacity_bytes // self._entry_bytes
        else:
            self._open(capacity_bytes, writable)

    # -- life cycle -----------------------------------------------------------------

    def _open(self, capacity_bytes: int, writable: bool) -> None:
        assert self._mmap is None and self._memory is None
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            if not writable:
                raise
            fd = -1
        try:
            self._file_bytes = os.fstat(fd).st_size if fd >= 0 else 0
            self._entries = self._file_bytes // self._entry_bytes
            self._capacity_entries = max(capacity_bytes // self._entry_bytes, self._entries)
            self._writable = writable
            if writable:
                used = self._entries * self._entry_bytes
                self._memory = bytearray(os.pread(fd, used, 0) if used else b"")
                if len(self._memory) != used:
                    raise OSError(f"{self.path}: short read of {used} bytes")
            elif self._entries > 0:
                self._mmap = mmap.mmap(
                    fd, self._entries * self._entry_bytes, access=mmap.ACCESS_READ
                )
        finally:
            if fd >= 0:
                os.close(fd)
        self._last = self._entry(self._entries - 1) if self._entries else None
        if self._mmap is not None and hasattr(mmap, "MADV_RANDOM"):
            # Binary search is random access: no read-ahead.
            self._mmap.madvise(mmap.MADV_RANDOM)

    @property
    def _buffer(self) -> mmap.mmap | bytearray | None:
        return self._memory if self._memory is not None else self._mmap

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        self._memory = None

    def make_read_only(self, *, sync: bool = True) -> None:
        """Write the entries to the file, fsync it (unless ``sync`` is False: the
        caller syncs it later) and map it read-only (segment rolled)."""
        if not self._writable:
            return
        used = self._entries * self._entry_bytes
        data = bytes(self._memory[:used]) if self._memory is not None else b""
        self._unmap()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, data, 0)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._open(0, writable=False)

    def make_writable(self, capacity_bytes: int) -> None:
        """Load the entries into memory for appends (the segment became active again)."""
        if self._writable:
            return
        entries = self._entries
        self._unmap()
        self._open(capacity_bytes, writable=True)
        assert self._entries == entries, "a read-only index file holds exactly its entries"

    def close(self) -> None:
        """Write (if writable) and unmap. The index is unusable afterwards."""
        self.make_read_only()
        self._unmap()

    def close_without_trim(self) -> None:
        """Unmap and forget (unwritten entries are lost); used when the file is about to
        be deleted or rebuilt, or to release an inactive segment's mapping."""
        self._unmap()
        self._writable = False

    def rename(self, path: Path) -> None:
        os.rename(self.path, path)
        self.path = path

    # -- entries --------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def is_full(self) -> bool:
        return self._entries >= self._capacity_entries

    @property
    def free_entries(self) -> int:
        return self._capacity_entries - self._entries

    @property
    def writable(self) -> bool:
        return self._writable

    def _entry(self, i: int) -> tuple[int, int]:
        buffer = self._buffer
        assert 0 <= i < self._entries and buffer is not None
        first, second = self.ENTRY.unpack_from(buffer, i * self._entry_bytes)
        return int(first), int(second)

    def _append(self, first: int, second: int) -> None:
        assert self._writable, f"{self.path} is not writable"
        assert not self.is_full, f"{self.path} is full; the segment should have rolled"
        memory = self._memory
        assert memory is not None
        end = (self._entries + 1) * self._entry_bytes
        if end > len(memory):
            # Grow by doubling: appends stay O(1) amortised, memory follows the entries.
            memory.extend(bytes(max(end, 2 * len(memory)) - len(memory)))
        self.ENTRY.pack_into(memory, self._entries * self._entry_bytes, first, second)
        self._entries += 1
        self._last = (first, second)

    def _floor(self, target: int, column: int, *, strict: bool) -> int:
        """Index of the last entry whose ``column`` is <= target (< when strict); -1 if
        none."""
        mapping = self._buffer
        if mapping is None:
            return -1
        low, high = 0, self._entries
        unpack = self.ENTRY.unpack_from
        size = self._entry_bytes
        while low < high:
            middle = (low + high) // 2
            key = unpack(mapping, middle * size)[column]
            if key < target or (key == target and not strict):
                low = middle + 1
            else:
                high = middle
        return low - 1

    def truncate_to_entries(self, entries: int) -> None:
        """Forget entries from ``entries`` on (the slots are zeroed when writable)."""
        assert 0 <= entries <= self._entries
        if self._writable and self._memory is not None:
            del self._memory[entries * self._entry_bytes :]
        elif not self._writable and entries != self._entries:
            self._entries = entries
            self._unmap()
            fd = os.open(self.path, os.O_RDWR)
            try:
                os.ftruncate(fd, entries * self._entry_bytes)
            finally:
                os.close(fd)
            self._open(0, writable=False)
        self._entries = entries
        self._last = self._entry(entries - 1) if entries else None

    def _check_shape(self) -> str | None:
        if self._file_bytes % self._entry_bytes:
            return f"size {self._file_bytes} is not a multiple of {self._entry_bytes}"
        return None


class OffsetIndex(_SparseIndex):
    """Relative offset → file position of the batch starting there."""

    ENTRY = OFFSET_ENTRY

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        assert 0 < relative <= RELATIVE_OFFSET_MAX and 0 < position <= RELATIVE_OFFSET_MAX
        if self._last is not None:
            last_relative, last_position = self._last
            assert relative > last_relative and position > last_position
        self._append(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(base offset, position) of the last indexed batch at or below ``offset``, or
        (segment base offset, 0) when there is none."""
        i = self._floor(offset - self.base_offset, 0, strict=False)
        if i < 0:
            return self.base_offset, 0
        relative, position = self._entry(i)
        return self.base_offset + relative, position

    def lookup_by_position(self, position: int) -> tuple[int, int]:
        """(base offset, position) of the last indexed batch starting at or below
        ``position``, or (segment base offset, 0)."""
        i = self._floor(position, 1, strict=False)
        if i < 0:
            return self.base_offset, 0
        relative, found = self._entry(i)
        return self.base_offset + relative, found

    def last_entry(self) -> tuple[int, int]:
        """(base offset, position) of the last entry, or (segment base offset, 0)."""
        if not self._entries:
            return self.base_offset, 0
        relative, position = self._entry(self._entries - 1)
        return self.base_offset + relative, position

    def truncate_from(self, offset: int) -> None:
        """Drop entries for batches at ``offset`` or later."""
        self.truncate_to_entries(self._floor(offset - self.base_offset, 0, strict=True) + 1)

    def check(self, log_size_bytes: int) -> str | None:
        """Why this index cannot be right for a log of ``log_size_bytes``, or None.
        Looks at the shape and the first and last entries only (O(1)); lookups verify
        every hit against the log."""
        problem = self._check_shape()
        if problem or not self._entries:
            return problem
        first_relative, first_position = self._entry(0)
        last_relative, last_position = self._entry(self._entries - 1)
        if first_relative <= 0 or first_position <= 0:
            return f"first entry ({first_relative}, {first_position}) is not after position 0"
        if self._entries > 1 and not (
            last_relative > first_relative and last_position > first_position
        ):
            return f"last entry ({last_relative}, {last_position}) is not after the first"
        if last_position >= log_size_bytes:
            return f"last entry points at {last_position}, beyond the log ({log_size_bytes})"
        return None


class TimeIndex(_SparseIndex):
    """Running max timestamp → relative offset of a batch (see the module docstring)."""

    ENTRY = TIME_ENTRY

    def maybe_append(self, timestamp_ms: int, offset: int) -> None:
        """Add (timestamp, offset) when the timestamp is newer than the last entry's."""
        relative = offset - self.base_offset
        assert 0 <= relative <= RELATIVE_OFFSET_MAX
        if timestamp_ms < 0:
            return
        if self._last is not None:
            last_timestamp, last_relative = self._last
            if timestamp_ms <= last_timestamp:
                return
            assert relative >= last_relative
        self._append(timestamp_ms, relative)

    def lookup_before(self, timestamp_ms: int) -> int | None:
        """Base offset of a batch from which a scan for the first batch with max
        timestamp >= ``timestamp_ms`` may start: every earlier batch is older. None means
        start at the beginning of the segment."""
        i = self._floor(timestamp_ms, 0, strict=True)
        if i < 0:
            return None
        return self.base_offset + self._entry(i)[1]

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, base offset) of the last entry."""
        if not self._entries:
            return None
        timestamp, relative = self._entry(self._entries - 1)
        return timestamp, self.base_offset + relative

    def truncate_from(self, offset: int) -> None:
        """Drop entries that point at ``offset`` or later."""
        self.truncate_to_entries(self._floor(offset - self.base_offset, 1, strict=True) + 1)

    def check(self) -> str | None:
        """Why this index cannot be right, or None (shape, first and last entries)."""
        problem = self._check_shape()
        if problem or not self._entries:
            return problem
        first_timestamp, first_relative = self._entry(0)
        last_timestamp, last_relative = self._entry(self._entries - 1)
        if first_timestamp < 0 or first_relative < 0:
            return f"first entry ({first_timestamp}, {first_relative}) is negative"
        if self._entries > 1 and not (
            last_timestamp > first_timestamp and last_relative >= first_relative
        ):
            return f"last entry ({last_timestamp}, {last_relative}) is not after the first"
        return None


def read_last_time_entry(path: Path) -> tuple[int, int] | None:
    """(timestamp, relative offset) of the last entry of a time-index file without
    mapping it (one pread); None when missing, empty or misshapen."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0 or size % TIME_ENTRY.size:
            return None
        data = os.pread(fd, TIME_ENTRY.size, size - TIME_ENTRY.size)
    finally:
        os.close(fd)
    if len(data) != TIME_ENTRY.size:
        return None
    timestamp, relative = TIME_ENTRY.unpack(data)
    return int(timestamp), int(relative)
