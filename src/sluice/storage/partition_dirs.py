"""Partition directories renamed for deletion, and their removal later.

A deleted partition's directory leaves its name at once, as in Kafka, so a new
topic of the same name never shares a path with the one going away::

    <data dir>/orders-0/                              hosted: the broker's event loop owns it
        │ deleted (topic deleted, or replica moved away): closed without writing,
        │ then one rename
        ▼
    <data dir>/orders-0.3f2a…9c1e-delete/             nobody's: its segments' log files
                                                      stay open for reads in flight; after
                                                      log.segment.delete.delay.ms they are
                                                      closed and the directory removed (at
                                                      the next start if the broker stopped)

The name is Kafka's: ``<topic>-<partition>.<32 hex digits>-delete``, the topic cut
short when the whole name would pass DIRECTORY_NAME_BYTES_MAX. Such a directory is never
a partition: recovery removes it, and nothing opens it. Everything here is synchronous
(a worker thread calls it) and never raises on removal: a directory that cannot be
removed now is logged and stays (it holds no live data).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from sluice.common.ids import TopicPartition

log = logging.getLogger(__name__)

DELETE_DIR_SUFFIX = "-delete"

DIRECTORY_NAME_BYTES_MAX = 255
"""The longest file name Linux file systems take (NAME_MAX)."""

_DELETION_NAME = re.compile(r"^.+-\d+\.[0-9a-f]{32}-delete$")


@dataclass(frozen=True)
class DeletedDirectory:
    """A partition directory renamed for deletion, and the segment files still open on
    it (reads in flight may be sending from them until it is removed)."""

    path: Path
    open_files: Sequence[BinaryIO] = field(default=())


def deletion_dir_name(topic_partition: TopicPartition) -> str:
    """A new unique ``<topic>-<partition>.<id>-delete`` name for the partition's
    directory, within DIRECTORY_NAME_BYTES_MAX bytes."""
    suffix = f"-{topic_partition.partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    topic = topic_partition.topic.encode()[: DIRECTORY_NAME_BYTES_MAX - len(suffix)]
    return topic.decode(errors="ignore") + suffix


def is_deletion_dir_name(name: str) -> bool:
    """Whether ``name`` is a directory renamed for deletion (never a partition's)."""
    return _DELETION_NAME.match(name) is not None


def rename_for_deletion(directory: Path, topic_partition: TopicPartition) -> Path:
    """Rename a closed partition directory to a deletion name beside it and return the
    new path. The caller fsyncs the parent directory (one fsync for many). Raises
    OSError."""
    renamed = directory.with_name(deletion_dir_name(topic_partition))
    os.rename(directory, renamed)
    return renamed


def deletion_dirs_in(data_dir: Path) -> list[DeletedDirectory]:
    """The directories of ``data_dir`` renamed for deletion (left by a broker that
    stopped before removing them)."""
    try:
        entries = list(os.scandir(data_dir))
    except OSError as e:
        log.warning("cannot list %s for deleted partitions: %s", data_dir, e)
        return []
    return [
        DeletedDirectory(Path(entry.path))
        for entry in sorted(entries, key=lambda entry: entry.name)
        if is_deletion_dir_name(entry.name) and entry.is_dir(follow_symlinks=False)
    ]


def close_quietly(files: Sequence[BinaryIO]) -> None:
    """Close files of a deleted partition; an error is logged (nothing is lost)."""
    for file in files:
        try:
            file.close()
        except OSError as e:
            log.warning("closing %s of a deleted partition: %s", getattr(file, "name", "?"), e)


def remove_deletion_dir(directory: DeletedDirectory) -> bool:
    """Close the files left open on a directory renamed for deletion, then remove it with
    everything in it. Never raises: True when it is gone, False (logged) when it could
    not be removed."""
    assert is_deletion_dir_name(directory.path.name), f"{directory.path} is not a deletion"
    close_quietly(directory.open_files)
    try:
        shutil.rmtree(directory.path)
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("cannot remove the deleted partition directory %s: %s", directory.path, e)
        return False
    return True
