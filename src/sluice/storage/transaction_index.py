"""The aborted-transaction index of one segment: which transactions an ABORT marker in
the segment closed, so a read_committed fetch can list them.

``00000000000000001200.txnindex`` sits beside the segment's ``.log``. One entry per
ABORT marker written into the segment, in marker order, 34 bytes, big-endian (Kafka's
layout)::

    ┌──────────────┬────────────────┬─────────────────┬────────────────┬───────────────────────┐
    │ version int16│ producer id i64│ first offset i64│ last offset i64│ last stable offset i64│
    └──────────────┴────────────────┴─────────────────┴────────────────┴───────────────────────┘

``first offset`` is the transaction's first data offset (it may lie in an earlier
segment), ``last offset`` the marker's offset, ``last stable offset`` the partition's
first unstable offset once the marker was written. A fetch from offset ``o`` up to ``u``
reads the indexes of the segment holding ``o`` and the ones after it and lists every
entry with ``last offset >= o`` and ``first offset < u``; it may stop at the first entry
whose last stable offset reaches ``u``: no transaction after it can overlap the range.

The index is derived data: appended without fsync, fsynced when its segment is rolled
or the log flushes, and rebuilt on open from the producer-state snapshot onwards (the
log replays the markers after the snapshot and drops entries at or past it first), so a
crash never leaves it behind the log. A segment written by the cleaner holds the
entries of the ABORT markers it kept (possibly none: an empty file, which replaces the
indexes of the segments it was cleaned from). Entries are few (one per aborted transaction that
touched the partition) and kept in memory once read.
"""

from __future__ import annotations

import itertools
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from sluice.common import errors

log = logging.getLogger(__name__)

TRANSACTION_INDEX_SUFFIX = ".txnindex"
ENTRY_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = _ENTRY.size


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """The ``.txnindex`` file of one segment; read lazily, appended in place."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTransaction] | None = None
        self._unflushed = False

    @property
    def entries(self) -> list[AbortedTransaction]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTransaction]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        whole = len(data) - len(data) % ENTRY_BYTES
        if whole != len(data):
            log.warning(
                "%s: %d trailing bytes of a torn entry ignored", self.path, len(data) - whole
            )
        entries = []
        for position in range(0, whole, ENTRY_BYTES):
            version, *fields = _ENTRY.unpack_from(data, position)
            if version != ENTRY_VERSION:
                raise errors.KafkaStorageError(
                    f"{self.path}: entry version {version} at byte {position} is not ours"
                )
            entries.append(AbortedTransaction(*fields))
        return entries

    def append(self, entry: AbortedTransaction) -> None:
        entries = self.entries
        assert not entries or entries[-1].last_offset < entry.last_offset, "markers in order"
        entries.append(entry)
        with self.path.open("ab") as file:
            file.write(
                _ENTRY.pack(
                    ENTRY_VERSION,
                    entry.producer_id,
                    entry.first_offset,
                    entry.last_offset,
                    entry.last_stable_offset,
                )
            )
        self._unflushed = True

    def truncate_from(self, offset: int) -> None:
        """Drop the entries of markers at or after ``offset``."""
        entries = self.entries
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(entries):
            return
        del entries[keep:]
        if keep == 0:
            self.path.unlink(missing_ok=True)
        else:
            os.truncate(self.path, keep * ENTRY_BYTES)
        self._unflushed = True

    def replace(self, entries: list[AbortedTransaction]) -> None:
        """Write ``entries`` as the whole index (a cleaned segment's). The file is
        created even when ``entries`` is empty: an empty index replaces the ones of
        the segments it is written for."""
        assert all(a.last_offset < b.last_offset for a, b in itertools.pairwise(entries)), (
            "markers in order"
        )
        self.path.write_bytes(
            b"".join(
                _ENTRY.pack(
                    ENTRY_VERSION,
                    entry.producer_id,
                    entry.first_offset,
                    entry.last_offset,
                    entry.last_stable_offset,
                )
                for entry in entries
            )
        )
        self._entries = list(entries)
        self._unflushed = True

    def collect(self, start: int, upper: int, into: list[AbortedTransaction]) -> bool:
        """Add the entries overlapping [start, upper) to ``into``; True when an entry's
        last stable offset reached ``upper`` (later segments need not be read)."""
        for entry in self.entries:
            if entry.last_offset >= start and entry.first_offset < upper:
                into.append(entry)
            if entry.last_stable_offset >= upper:
                return True
        return False

    def sync(self) -> None:
        if not self._unflushed:
            return
        if self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._unflushed = False
