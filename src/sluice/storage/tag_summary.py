"""Per-batch tag summaries of a partition, so a view's fetch can skip or send a batch
without decoding it.

For each batch the summary is the set of distinct *tag combinations* of its records
(the values of a record's ``x-sluice-tag`` headers, as a set) with how many records
have each: ``{(): 40}`` for a batch of untagged records, ``{("red",): 3, ("blue",):
2}`` for a mixed one. A filter over tags alone decides from it whether every record of
the batch matches (send it as stored), none does (skip it), or some do (decode and
rebuild it). A batch with more than :data:`COMBINATIONS_MAX` combinations has no
summary (decoded when fetched).

Kept only for partitions of topics that have views (the broker turns it on), in
``tags.sqlite`` beside the segments: a row per batch, written as batches are appended
(by the leader and the followers alike), cut when the log is truncated, its start moves
or the cleaner rewrites batches. A batch without a row is decoded when a view fetches it,
so nothing here is needed for correctness: the file may be lost or removed at any time.
"""

from __future__ import annotations

import logging
import sqlite3
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from sluice.common import errors
from sluice.protocol.records.batch import BatchHeader, Compression
from sluice.protocol.records.builder import decode_batch
from sluice.protocol.records.tags import TAG_HEADER
from sluice.storage import sqlite_files

log = logging.getLogger(__name__)

TAG_HEADER_BYTES: Final = TAG_HEADER.encode()
FILE_NAME: Final = "tags.sqlite"
COMBINATIONS_MAX: Final = 16
CACHE_KIB: Final = 256

Combinations = Mapping[frozenset[bytes], int]
"""Tag combination → how many records of the batch have exactly it."""

_COUNT = struct.Struct(">HI")
_LENGTH = struct.Struct(">H")


def summarize(header: BatchHeader, batch: bytes | bytearray | memoryview) -> Combinations | None:
    """The tag combinations of one batch; None when it has too many to be worth it.
    An uncompressed batch that does not mention the tag header is not decoded."""
    if header.compression == Compression.NONE and TAG_HEADER_BYTES not in batch:
        return {frozenset(): header.records_count}
    combinations: dict[frozenset[bytes], int] = {}
    for record in decode_batch(bytes(batch)).records:
        tags = frozenset(v for k, v in record.headers if k == TAG_HEADER and v is not None)
        combinations[tags] = combinations.get(tags, 0) + 1
        if len(combinations) > COMBINATIONS_MAX:
            return None
    return combinations


def encode(combinations: Combinations) -> bytes:
    parts = []
    for tags, count in combinations.items():
        parts.append(_COUNT.pack(len(tags), count))
        for tag in sorted(tags):
            parts.append(_LENGTH.pack(len(tag)) + tag)
    return b"".join(parts)


def decode(data: bytes) -> Combinations:
    combinations: dict[frozenset[bytes], int] = {}
    at = 0
    while at < len(data):
        size, count = _COUNT.unpack_from(data, at)
        at += _COUNT.size
        tags = []
        for _ in range(size):
            (length,) = _LENGTH.unpack_from(data, at)
            at += _LENGTH.size
            tags.append(data[at : at + length])
            at += length
        combinations[frozenset(tags)] = count
    return combinations


class TagSummaries:
    """The summaries of one partition (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME
        self.broken = False
        try:
            self._db = self._connect()
        except sqlite3.DatabaseError:
            # Only an optimisation: start again from nothing.
            sqlite_files.remove(self.path)
            self._db = self._connect()

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite_files.connect(self.path, synchronous="OFF", cache_kib=CACHE_KIB)
        try:
            connection.execute(
                "CREATE TABLE IF NOT EXISTS batches (base_offset INTEGER PRIMARY KEY, summary BLOB)"
            )
        except sqlite3.DatabaseError:
            connection.close()
            raise
        return connection

    def appended(self, header: BatchHeader, batch: bytes | bytearray | memoryview) -> None:
        """A data batch was written at ``header.base_offset``."""
        if header.is_control or self.broken:
            return
        try:
            combinations = summarize(header, batch)
        except errors.KafkaError:
            return  # not ours to judge here: the fetch decodes it (and reports it)
        self._run(
            "INSERT OR REPLACE INTO batches VALUES (?, ?)",
            (header.base_offset, None if combinations is None else encode(combinations)),
        )

    def _run(self, sql: str, parameters: tuple[object, ...]) -> None:
        try:
            self._db.execute(sql, parameters)
        except sqlite3.Error as e:
            self._give_up(e)

    def _give_up(self, error: sqlite3.Error) -> None:
        """The file failed (a crash without fsync damaged it): fetches decode instead."""
        if not self.broken:
            log.warning(
                "%s: tag summaries off (%s); views decode batches instead", self.path, error
            )
        self.broken = True

    def get(self, base_offsets: Iterable[int]) -> dict[int, Combinations | None]:
        """The summaries known of these batches (None: too many combinations)."""
        wanted = list(base_offsets)
        found: dict[int, Combinations | None] = {}
        if self.broken:
            return found
        try:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for offset, summary in self._db.execute(
                    f"SELECT base_offset, summary FROM batches WHERE base_offset IN ({marks})",
                    chunk,
                ):
                    found[offset] = None if summary is None else decode(summary)
        except (sqlite3.Error, struct.error) as e:
            self._give_up(sqlite3.Error(str(e)))
            return {}
        return found

    def forget(self, *, from_offset: int | None = None, below: int | None = None) -> None:
        """Drop the rows of batches at or after ``from_offset`` (a truncation) or below
        ``below`` (the log start moved)."""
        if from_offset is not None:
            self._run("DELETE FROM batches WHERE base_offset >= ?", (from_offset,))
        if below is not None:
            self._run("DELETE FROM batches WHERE base_offset < ?", (below,))

    def forget_range(self, start: int, end: int) -> None:
        """Drop the rows of batches in [start, end) (the cleaner rewrote them)."""
        self._run("DELETE FROM batches WHERE base_offset >= ? AND base_offset < ?", (start, end))

    def close(self) -> None:
        self._db.close()
