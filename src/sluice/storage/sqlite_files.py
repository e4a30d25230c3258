"""SQLite files kept beside a partition's segments (the delay index, the tag summaries):
how they are opened and removed. Both are derived from the log, so neither fsyncs its
commits; both run in WAL mode with a small page cache, since a broker may hold many."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Literal

WAL_SUFFIXES = ("", "-wal", "-shm")
"""The database and the files WAL mode keeps beside it."""


def connect(
    path: Path,
    *,
    synchronous: Literal["OFF", "NORMAL"],
    cache_kib: int,
    autocheckpoint: bool = True,
) -> sqlite3.Connection:
    """An autocommit connection usable from any one thread at a time. Without
    ``autocheckpoint`` the caller checkpoints (the fsync) where it chooses."""
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(f"PRAGMA synchronous={synchronous}")
        if not autocheckpoint:
            connection.execute("PRAGMA wal_autocheckpoint=0")
        connection.execute(f"PRAGMA cache_size=-{cache_kib}")
    except sqlite3.Error:
        connection.close()  # a damaged file: the caller decides (rebuild, or start afresh)
        raise
    return connection


def remove(path: Path) -> None:
    """Delete the database at ``path`` with its WAL files, those that exist."""
    for suffix in WAL_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            path.with_name(path.name + suffix).unlink()
