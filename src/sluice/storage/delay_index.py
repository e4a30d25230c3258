"""The delay index of one partition: its parked records, by due time, on disk.

A partition that has received delayed records (see
:mod:`sluice.protocol.records.delayed`) keeps ``delays.sqlite`` beside its segments: a
row per parked record, updated by every append of the log, on the leader and on the
followers alike. The log is the truth; the index is derived from it and remembers the
offset it reflects (``applied``), so opening a log replays what came after, and a
damaged index is rebuilt from the log. Memory holds none of it: the leader asks for the
records due soonest, a bounded number at a time.

Every change a later batch makes to a row is recorded as the offset of that batch, never
by deleting the row, so a truncation of the log (a follower cutting back to its
leader's log) can undo exactly what the truncated batches did::

    parked(offset)           a parked record: due time, schedule id, cancel flag
      decided_at             its own offset; in a transaction, the offset of its marker
      aborted                1 when that marker was an ABORT
      superseded_at          offset of the record (or marker) that replaced or cancelled it
      fired_at               offset of the fired batch that delivered it
      finished_at            the first of those that finished the row (a cancel is
                             finished when decided), for purging

A row is *ready* when it is decided, not aborted, not a cancel, not superseded and not
fired: those are the records still to deliver. Rows that are finished below an offset
no truncation can reach (the high watermark) are purged.

SQLite runs in WAL mode with ``synchronous=NORMAL``: a crash may lose the last changes
but not the database, and the replay from ``applied`` restores them. Commits do not
fsync; only checkpoints (the write-ahead log copied into the database) do, so they are
not automatic: the flusher runs :meth:`DelayIndex.checkpoint` in its worker thread,
through a second connection, and the appending thread never waits for an fsync here
(an automatic checkpoint on it delayed due records by hundreds of milliseconds). The
file is created with an fsync of the directory, so a log that holds parked batches
always has an index.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sluice.protocol.records.delayed import ParkedRecord
from sluice.storage import sqlite_files
from sluice.storage.checkpoint import fsync_directory

log = logging.getLogger(__name__)

FILE_NAME: Final = "delays.sqlite"
SCHEMA_VERSION: Final = 1
CACHE_KIB: Final = 256
"""SQLite's page cache per index (its default is 2 MiB): a broker may hold many."""

_READY = (
    "decided_at IS NOT NULL AND aborted = 0 AND cancel = 0 "
    "AND superseded_at IS NULL AND fired_at IS NULL"
)

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS parked (
    offset INTEGER PRIMARY KEY,
    due_ms INTEGER NOT NULL,
    schedule_id TEXT,
    cancel INTEGER NOT NULL,
    producer_id INTEGER,
    decided_at INTEGER,
    aborted INTEGER NOT NULL DEFAULT 0,
    superseded_at INTEGER,
    fired_at INTEGER,
    finished_at INTEGER
);
CREATE INDEX IF NOT EXISTS parked_ready ON parked (due_ms, offset) WHERE {_READY};
CREATE INDEX IF NOT EXISTS parked_schedule ON parked (schedule_id)
    WHERE schedule_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS parked_undecided ON parked (producer_id)
    WHERE decided_at IS NULL;
CREATE INDEX IF NOT EXISTS parked_finished ON parked (finished_at)
    WHERE finished_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


ParkedRow = tuple[int, int, str | None, bool, int | None]
"""(offset, due time, schedule id, cancel, moved from) of one parked record."""


def row_of(record: ParkedRecord) -> ParkedRow:
    return (record.offset, record.due_ms, record.schedule_id, record.cancel, record.moved_from)


@dataclass(frozen=True, slots=True)
class DelayCounts:
    pending: int
    """Parked records not yet delivered (including those of undecided transactions)."""
    fired: int
    """Parked records delivered so far."""
    next_due_ms: int | None
    """The earliest due time of a ready record."""


@dataclass(frozen=True, slots=True)
class DueRecord:
    due_ms: int
    offset: int


class DelayIndexError(Exception):
    """The index file cannot be used: rebuild it from the log."""


class DelayIndex:
    """The parked records of one partition (see the module docstring)."""

    def __init__(self, path: Path, connection: sqlite3.Connection) -> None:
        self.path = path
        self._db = connection
        self.applied = self._meta("applied", 0)
        """The log offset the index reflects: every batch below it is applied."""
        self._checkpointer: sqlite3.Connection | None = None
        self.revision = 0
        """Counts the changes that make rows ready out of due order (a transaction's
        commit, a truncation): whoever loaded ready rows by due time loads again."""

    @classmethod
    def open(cls, directory: Path, *, create: bool) -> DelayIndex | None:
        """The index of the log in ``directory``; None when there is none and ``create``
        is false. Raises DelayIndexError for a file that is not a usable index."""
        path = directory / FILE_NAME
        existed = path.exists()
        if not existed and not create:
            return None
        try:
            connection = sqlite_files.connect(
                path, synchronous="NORMAL", cache_kib=CACHE_KIB, autocheckpoint=False
            )
            connection.executescript(_SCHEMA)
            index = cls(path, connection)
            version = index._meta("version", SCHEMA_VERSION)
        except sqlite3.DatabaseError as e:
            raise DelayIndexError(f"{path}: {e}") from e
        if version != SCHEMA_VERSION:
            index.close()
            raise DelayIndexError(f"{path}: schema version {version}, not {SCHEMA_VERSION}")
        if not existed:
            with index._transaction():
                index._set_meta("version", SCHEMA_VERSION)
            fsync_directory(directory)
        return index

    @staticmethod
    def delete(directory: Path) -> None:
        sqlite_files.remove(directory / FILE_NAME)

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None
        self._db.close()

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the database (fsyncs it): on the flusher's
        worker thread, with a connection of its own, while appends go on."""
        if self._checkpointer is None:
            self._checkpointer = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False
            )
        try:
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as e:
            raise OSError(f"{self.path}: checkpoint failed: {e}") from e

    # -- changes, in log order ----------------------------------------------------------

    def apply_parked(
        self, rows: Sequence[ParkedRow], *, producer_id: int, transactional: bool
    ) -> None:
        """A parked batch was appended. Rows of a transaction wait for its marker; the
        others are decided at once (replacing or cancelling earlier ones, in order)."""
        insert = (
            "INSERT OR REPLACE INTO parked (offset, due_ms, schedule_id, cancel, "
            "producer_id, decided_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
        )
        owner = producer_id if transactional else None

        def values(row: ParkedRow) -> tuple[object, ...]:
            offset, due_ms, schedule_id, cancel, _ = row
            decided = None if transactional else offset
            finished = decided if cancel else None
            return (offset, due_ms, schedule_id, int(cancel), owner, decided, finished)

        if all(row[2] is None and row[4] is None for row in rows):
            self._db.executemany(insert, [values(row) for row in rows])
            return
        for row in rows:
            offset, _, schedule_id, _, moved_from = row
            self._db.execute(insert, values(row))
            if moved_from is not None:
                self._db.execute(
                    f"UPDATE parked SET superseded_at = ?1, finished_at = ?1 "
                    f"WHERE offset = ?2 AND {_READY}",
                    (offset, moved_from),
                )
            elif not transactional and schedule_id is not None:
                self._supersede(schedule_id, offset, at=offset)

    def apply_marker(self, producer_id: int, *, committed: bool, marker_offset: int) -> None:
        """A transaction marker: the producer's waiting rows are decided."""
        rows = self._db.execute(
            "SELECT offset, schedule_id FROM parked WHERE decided_at IS NULL "
            "AND producer_id = ? ORDER BY offset",
            (producer_id,),
        ).fetchall()
        self._db.execute(
            "UPDATE parked SET decided_at = :at, aborted = :aborted, finished_at = "
            "CASE WHEN :aborted OR cancel = 1 THEN :at END "
            "WHERE decided_at IS NULL AND producer_id = :producer",
            {"at": marker_offset, "aborted": int(not committed), "producer": producer_id},
        )
        if committed and rows:
            self.revision += 1
        if committed:
            for offset, schedule_id in rows:
                if schedule_id is not None:
                    self._supersede(schedule_id, offset, at=marker_offset)

    def _supersede(self, schedule_id: str, newer: int, *, at: int) -> None:
        self._db.execute(
            f"UPDATE parked SET superseded_at = ?1, finished_at = ?1 WHERE schedule_id = ?2 "
            f"AND offset != ?3 AND {_READY}",
            (at, schedule_id, newer),
        )

    def apply_fired(self, fired_offset: int, origins: Iterable[int]) -> None:
        """A fired batch at ``fired_offset`` delivered the records parked at ``origins``."""
        self._db.executemany(
            f"UPDATE parked SET fired_at = ?1, finished_at = ?1 WHERE offset = ?2 AND {_READY}",
            [(fired_offset, origin) for origin in origins],
        )

    def set_applied(self, offset: int) -> None:
        """Every batch below ``offset`` is applied."""
        self.applied = offset
        self._set_meta("applied", offset)

    def truncate(self, offset: int) -> None:
        """The log was cut at ``offset``: forget what the batches from there did."""
        with self._transaction():
            self._db.execute("DELETE FROM parked WHERE offset >= ?", (offset,))
            self._db.execute(
                "UPDATE parked SET decided_at = NULL, aborted = 0 WHERE decided_at >= ?",
                (offset,),
            )
            for column in ("superseded_at", "fired_at", "finished_at"):
                self._db.execute(
                    f"UPDATE parked SET {column} = NULL WHERE {column} >= ?", (offset,)
                )
            self.set_applied(min(self.applied, offset))
        self.revision += 1

    def purge(self, below: int) -> int:
        """Delete rows finished by batches below ``below`` (which no truncation can undo);
        returns how many went. The fired ones still count in :meth:`counts`."""
        with self._transaction():
            (fired,) = self._db.execute(
                "SELECT count(*) FROM parked WHERE fired_at < ?", (below,)
            ).fetchone()
            cursor = self._db.execute("DELETE FROM parked WHERE finished_at < ?", (below,))
            self._set_meta("fired_purged", self._meta("fired_purged", 0) + fired)
        return cursor.rowcount

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Group the changes of one append into one SQLite transaction."""
        with self._transaction():
            yield

    # -- queries ---------------------------------------------------------------------

    def due(
        self, *, up_to_ms: int, after: tuple[int, int] | None = None, limit: int
    ) -> list[DueRecord]:
        """Ready records due at or before ``up_to_ms``, by (due time, offset), after the
        position ``after`` (exclusive), at most ``limit``."""
        due_ms, offset = after if after is not None else (-(2**63), -1)
        rows = self._db.execute(
            f"SELECT due_ms, offset FROM parked WHERE {_READY} AND due_ms <= ? "
            "AND (due_ms, offset) > (?, ?) ORDER BY due_ms, offset LIMIT ?",
            (up_to_ms, due_ms, offset, limit),
        ).fetchall()
        return [DueRecord(due, at) for due, at in rows]

    def ready_among(self, offsets: list[int]) -> set[int]:
        """Which of ``offsets`` are ready records (one query per thousand)."""
        ready: set[int] = set()
        for start in range(0, len(offsets), 1000):
            chunk = offsets[start : start + 1000]
            marks = ",".join("?" * len(chunk))
            ready.update(
                offset
                for (offset,) in self._db.execute(
                    f"SELECT offset FROM parked WHERE offset IN ({marks}) AND {_READY}", chunk
                )
            )
        return ready

    def is_ready(self, offset: int) -> bool:
        row = self._db.execute(
            f"SELECT 1 FROM parked WHERE offset = ? AND {_READY}", (offset,)
        ).fetchone()
        return row is not None

    def counts(self) -> DelayCounts:
        (pending,) = self._db.execute(
            "SELECT count(*) FROM parked WHERE aborted = 0 AND cancel = 0 "
            "AND superseded_at IS NULL AND fired_at IS NULL"
        ).fetchone()
        (fired,) = self._db.execute(
            "SELECT count(*) FROM parked WHERE fired_at IS NOT NULL"
        ).fetchone()
        (next_due,) = self._db.execute(f"SELECT min(due_ms) FROM parked WHERE {_READY}").fetchone()
        return DelayCounts(pending, fired + self._meta("fired_purged", 0), next_due)

    def rows(self) -> int:
        """Rows kept, finished ones not yet purged included."""
        (count,) = self._db.execute("SELECT count(*) FROM parked").fetchone()
        return int(count)

    def pending(self, *, limit: int) -> list[tuple[int, int, str | None]]:
        """(offset, due time, schedule id) of the first ``limit`` ready records by due."""
        return [
            (offset, due_ms, schedule_id)
            for offset, due_ms, schedule_id in self._db.execute(
                f"SELECT offset, due_ms, schedule_id FROM parked WHERE {_READY} "
                "ORDER BY due_ms, offset LIMIT ?",
                (limit,),
            )
        ]

    def first_unfinished_offset(self) -> int | None:
        """The lowest offset of a parked record not yet delivered, replaced, cancelled
        or aborted: retention must keep the segment holding it."""
        row = self._db.execute(
            "SELECT offset FROM parked WHERE finished_at IS NULL ORDER BY offset LIMIT 1"
        ).fetchone()
        return None if row is None else int(row[0])

    def drop_below(self, offset: int) -> None:
        """The log now starts at ``offset`` (DeleteRecords, or retention): forget the
        rows below it, delivered or not."""
        with self._transaction():
            (fired,) = self._db.execute(
                "SELECT count(*) FROM parked WHERE offset < ? AND fired_at IS NOT NULL",
                (offset,),
            ).fetchone()
            self._db.execute("DELETE FROM parked WHERE offset < ?", (offset,))
            self._set_meta("fired_purged", self._meta("fired_purged", 0) + fired)

    def ready_offsets_below(self, offset: int) -> list[int]:
        """Ready records parked below ``offset`` (what a segment deletion would lose)."""
        return [
            at
            for (at,) in self._db.execute(
                f"SELECT offset FROM parked WHERE offset < ? AND {_READY} ORDER BY offset",
                (offset,),
            )
        ]

    # -- plumbing --------------------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        if self._db.in_transaction:
            yield
            return
        self._db.execute("BEGIN")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _meta(self, name: str, default: int) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return default if row is None else int(row[0])

    def _set_meta(self, name: str, value: int) -> None:
        self._db.execute(
            "INSERT INTO meta (name, value) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (name, value),
        )
