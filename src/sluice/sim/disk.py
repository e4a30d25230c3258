"""A partition's log on a simulated disk: what the replication state machines read and
write, and what a crash keeps.

Records are appended at the log end, each stamped with the leader epoch that appended it
(the leader's epoch as leader; the fetched record's own as follower). The leader-epoch
entries are Sluice's own :class:`~sluice.storage.leader_epoch.LeaderEpochCache` (kept in
memory), so truncation by epoch behaves as the broker's does. An fsync (:meth:`SimLog.flush`)
makes the log up to its end durable, with the high watermark and the epoch entries of
that moment; :meth:`SimLog.crash` keeps only what the last fsync made durable (a machine
that loses its page cache) or everything (a process crash: the page cache survives)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sluice.storage.leader_epoch import LeaderEpochCache

Control = Literal["commit", "abort"]


@dataclass(frozen=True, slots=True)
class SimRecord:
    """One record: the epoch of the leader that appended it, and what a producer sent.
    A transactional producer's record carries its producer epoch and ``transactional``;
    a COMMIT or ABORT marker of a producer's transaction is a record with ``control``
    set (no value, sequence -1), as a control batch is."""

    epoch: int
    producer_id: int
    sequence: int
    value: str
    producer_epoch: int = 0
    transactional: bool = False
    control: Control | None = None


class SimLog:
    def __init__(self, name: str) -> None:
        self.name = name
        self.records: list[SimRecord] = []
        self.high_watermark = 0
        self.flushed_offset = 0
        self._durable_high_watermark = 0
        self._durable_epochs: list[tuple[int, int]] = []
        self.epochs = self._new_epochs()
        self.lost_in_crashes = 0
        """Records a machine crash took (appended, never synced)."""
        self._dropped_from: int | None = None
        """The lowest offset whose record was dropped (truncated, lost in a crash) since
        :meth:`take_dropped_from` last looked."""

    def _new_epochs(self) -> LeaderEpochCache:
        # The path only names the log in the cache's messages; nothing is written.
        return LeaderEpochCache(Path(self.name), lambda: self.log_end_offset)

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    @property
    def log_start_offset(self) -> int:
        return 0  # nothing is deleted from a simulated log

    @property
    def latest_epoch(self) -> int:
        return self.epochs.latest_epoch

    def begin_leader_epoch(self, epoch: int) -> None:
        """A leader's new epoch starts at the log end (written at once, as the broker
        fsyncs its leader-epoch checkpoint when it begins leading)."""
        if self.epochs.assign(epoch, self.log_end_offset):
            self._durable_epochs = self.epochs.entries

    def append(self, records: Sequence[SimRecord]) -> int:
        """Append ``records`` (as leader or follower; each carries its epoch); the offset
        of the first."""
        base = self.log_end_offset
        for record in records:
            if record.epoch > self.epochs.latest_epoch:
                self.epochs.assign(record.epoch, self.log_end_offset)
            self.records.append(record)
        return base

    def read(self, offset: int, max_records: int, end: int | None = None) -> list[SimRecord]:
        """Up to ``max_records`` from ``offset``, not past ``end`` (default: the log end)."""
        stop = min(self.log_end_offset if end is None else end, offset + max_records)
        return self.records[offset:stop]

    def update_high_watermark(self, offset: int) -> None:
        self.high_watermark = min(offset, self.log_end_offset)

    def truncate_to(self, offset: int) -> None:
        """Drop the records at ``offset`` and after (a follower whose tail diverged)."""
        if offset >= self.log_end_offset:
            return
        del self.records[offset:]
        self._dropped(offset)
        self.epochs.truncate_from_end(offset)
        self.high_watermark = min(self.high_watermark, offset)
        self.flushed_offset = min(self.flushed_offset, offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers it."""
        return self.epochs.end_offset_for_epoch(epoch)

    def flush(self) -> None:
        """fsync: everything appended so far survives any crash."""
        self.flushed_offset = self.log_end_offset
        self._durable_high_watermark = self.high_watermark
        self._durable_epochs = self.epochs.entries

    @property
    def unflushed(self) -> int:
        return self.log_end_offset - self.flushed_offset

    def crash(self, *, lose_unflushed: bool) -> None:
        """The node stops at once. With ``lose_unflushed``, the machine went down too and
        the records after the last fsync are gone; otherwise only the process died and
        the page cache kept everything. The high watermark restarts from the last
        fsync's (never above the log end), as from the broker's checkpoint."""
        if lose_unflushed:
            if self.flushed_offset < self.log_end_offset:
                self._dropped(self.flushed_offset)
                self.lost_in_crashes += self.log_end_offset - self.flushed_offset
            del self.records[self.flushed_offset :]
            self.epochs = self._new_epochs()
            for epoch, start in self._durable_epochs:
                self.epochs.assign(epoch, start)
            self.epochs.truncate_from_end(self.log_end_offset)
        self.high_watermark = min(self._durable_high_watermark, self.log_end_offset)

    def _dropped(self, offset: int) -> None:
        if self._dropped_from is None or offset < self._dropped_from:
            self._dropped_from = offset

    def take_dropped_from(self) -> int:
        """The lowest offset whose record was dropped since the last call (the log end
        when none was): records below it are the ones there were then."""
        dropped, self._dropped_from = self._dropped_from, None
        return self.log_end_offset if dropped is None else dropped
