"""Leader-epoch cache: which leader epoch started at which offset, for one partition.

Every batch carries the epoch of the leader that appended it (``partition_leader_epoch``).
The cache keeps one entry per epoch, the first offset appended in that epoch::

    epoch:         0        3           4
    start offset:  0 ────── 1500 ────── 2210 ──── log end offset
                   └ epoch 0 ┘└ epoch 3 ┘└ epoch 4 ┘

A follower rejoining asks the leader "where does my latest epoch end?"
(:meth:`LeaderEpochCache.end_offset_for_epoch`, the OffsetsForLeaderEpoch API) and
truncates there, never at a stale high watermark.

Stored in ``leader-epoch-checkpoint`` beside the segments, Kafka's layout (see
``checkpoint``); rewritten by the log after the entries change (a new epoch, a
truncation), through the log's ``checkpoint_writer.CheckpointWriter``. The
entries can always be rebuilt from the batch headers of the log, which recovery does for
the batches it rescans.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable
from pathlib import Path

from sluice.common import errors
from sluice.storage.checkpoint import (
    encode_pairs_checkpoint,
    read_pairs_checkpoint,
    write_file_atomically,
)

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """(epoch, start offset) entries, both strictly increasing."""

    def __init__(self, directory: Path, log_end_offset: Callable[[], int]) -> None:
        self.path = directory / LEADER_EPOCH_CHECKPOINT_NAME
        self._log_end_offset = log_end_offset
        self._epochs: list[int] = []
        self._start_offsets: list[int] = []
        self._dirty = False

    @classmethod
    def load(cls, directory: Path, log_end_offset: Callable[[], int]) -> LeaderEpochCache:
        """Read the checkpoint. A missing one is empty; a malformed one is reported by
        raising KafkaStorageError (the caller rebuilds from the log)."""
        cache = cls(directory, log_end_offset)
        pairs = read_pairs_checkpoint(cache.path)
        for epoch, start_offset in pairs or ():
            if cache._epochs and not (
                epoch > cache._epochs[-1] and start_offset >= cache._start_offsets[-1]
            ):
                raise errors.KafkaStorageError(f"{cache.path}: entries are out of order")
            cache._epochs.append(epoch)
            cache._start_offsets.append(start_offset)
        return cache

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._start_offsets, strict=True))

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or -1 when there is none."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Note that ``epoch`` starts at ``start_offset`` if it is newer than the latest
        known. Entries that start at or after ``start_offset`` conflict with it and go.
        Returns whether anything changed (then :meth:`flush` should follow)."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return False
        while self._start_offsets and self._start_offsets[-1] >= start_offset:
            log.warning(
                "%s: epoch %d at %d replaces epoch %d at %d",
                self.path,
                epoch,
                start_offset,
                self._epochs[-1],
                self._start_offsets[-1],
            )
            self._epochs.pop()
            self._start_offsets.pop()
        self._epochs.append(epoch)
        self._start_offsets.append(start_offset)
        self._dirty = True
        return True

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's OffsetsForLeaderEpoch answers: for the latest
        epoch, the log end offset; for an older one, the start offset of the next newer
        epoch, paired with the largest known epoch <= ``epoch``; (-1, -1) when ``epoch``
        is newer than every known one or undefined."""
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, self._log_end_offset()
        higher = bisect.bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self._start_offsets[0]
        return self._epochs[higher - 1], self._start_offsets[higher]

    def start_offset_of(self, epoch: int) -> int:
        """Where ``epoch`` starts (0 when it is not one of the entries)."""
        i = bisect.bisect_left(self._epochs, epoch)
        return self._start_offsets[i] if i < len(self._epochs) and self._epochs[i] == epoch else 0

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch that appended ``offset`` (-1 when before every entry)."""
        i = bisect.bisect_right(self._start_offsets, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after ``end_offset`` (the log was truncated)."""
        keep = bisect.bisect_left(self._start_offsets, end_offset)
        if keep < len(self._epochs):
            del self._epochs[keep:]
            del self._start_offsets[keep:]
            self._dirty = True

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly below ``start_offset`` (the log start moved); the epoch
        that holds ``start_offset`` now starts there."""
        holder = bisect.bisect_right(self._start_offsets, start_offset) - 1
        if holder < 0:
            return
        if holder > 0 or self._start_offsets[0] != start_offset:
            del self._epochs[:holder]
            del self._start_offsets[:holder]
            self._start_offsets[0] = start_offset
            self._dirty = True

    def clear(self) -> None:
        if self._epochs:
            self._epochs.clear()
            self._start_offsets.clear()
            self._dirty = True

    @property
    def dirty(self) -> bool:
        return self._dirty

    def mark_changed(self) -> None:
        """The checkpoint file may not hold the entries (a write of it failed)."""
        self._dirty = True

    def take_checkpoint(self) -> tuple[Path, bytes] | None:
        """The checkpoint file's path and new contents if the entries changed since the
        last one taken (then they count as written: the caller writes them, through the
        log's ``CheckpointWriter``); None when nothing changed."""
        if not self._dirty:
            return None
        self._dirty = False
        return self.path, encode_pairs_checkpoint(self.entries)

    def flush(self) -> None:
        """Write the checkpoint now if the entries changed since the last write."""
        taken = self.take_checkpoint()
        if taken is not None:
            write_file_atomically(*taken)
