"""The parked records of one partition log, kept in step with the log.

:class:`PartitionDelays` is the partition log's side of delayed delivery: it recognises
parked and fired batches and transaction markers as they are appended (by the leader or
copied by a follower), applies them to the :class:`~sluice.storage.delay_index.DelayIndex`
(created with the first parked batch), undoes them when the log is truncated, and on
opening replays the batches the index has not seen, or rebuilds a damaged index from the
whole log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from sluice.common import errors
from sluice.protocol.records.batch import BatchHeader
from sluice.protocol.records.builder import (
    ConsumerRecord,
    ControlRecordType,
    decode_batch,
    decode_control_record,
)
from sluice.protocol.records.delayed import (
    FIRED_PRODUCER_ID,
    Delivery,
    decode_parked,
    is_parked_key,
)
from sluice.protocol.records.delayed import (
    fired_origins as origins_of,
)
from sluice.storage.delay_index import (
    DelayCounts,
    DelayIndex,
    DelayIndexError,
    DueRecord,
    row_of,
)

log = logging.getLogger(__name__)

BatchSource = Callable[[int], Iterable[tuple[BatchHeader, Callable[[], bytes]]]]
"""Every batch of the log from the one holding an offset, with a function reading its
bytes (only control and fired batches are read)."""


def is_parked_batch(header: BatchHeader, data: bytes | bytearray | memoryview) -> bool:
    """A control batch holding parked records (not a transaction marker)."""
    if not header.is_control:
        return False
    try:
        records = decode_batch(data).records
    except errors.KafkaError:
        return False
    return bool(records) and is_parked_key(records[0].key)


class PartitionDelays:
    """The delay index of one partition log, or nothing until a parked batch comes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.index: DelayIndex | None = None
        self.on_revision: Callable[[], None] | None = None
        """Called when rows became ready out of due order (see ``DelayIndex.revision``)."""

    def open(self, batches_from: BatchSource, log_start: int, log_end: int) -> None:
        """Open the index if the log has one and bring it up to ``log_end``; a damaged
        one is rebuilt from ``log_start``."""
        try:
            self.index = DelayIndex.open(self.directory, create=False)
        except DelayIndexError as e:
            log.warning("%s: rebuilding the delay index from the log: %s", self.directory, e)
            DelayIndex.delete(self.directory)
            self.index = DelayIndex.open(self.directory, create=True)
            assert self.index is not None
        if self.index is None:
            return
        if self.index.applied > log_end:
            self.index.truncate(log_end)
        start = max(self.index.applied, log_start)
        if start < log_end:
            with self.index.batch():
                for header, read in batches_from(start):
                    if header.base_offset >= start and may_matter(header):
                        self.apply(header, read(), marker=None)
                self.index.set_applied(log_end)

    def appended(
        self,
        header: BatchHeader,
        data: bytes | bytearray | memoryview,
        *,
        marker: bool | None,
        log_end: int,
        fired_origins: Sequence[int] | None = None,
        parked: Sequence[Delivery] | None = None,
    ) -> None:
        """One batch was written to the log (by the leader or copied by a follower) and
        the log now ends at ``log_end``. Cheap for batches that do not matter. The
        leader that built a fired batch names its origins (``fired_origins``), and the
        one that built a parked batch each record's delivery (``parked``), sparing a
        decode."""
        if not may_matter(header) or (self.index is None and not header.is_control):
            return
        index_before = self.index
        if index_before is not None:
            with index_before.batch():
                self.apply(header, data, marker=marker, fired_origins=fired_origins, parked=parked)
                index_before.set_applied(log_end)
            return
        self.apply(header, data, marker=marker, parked=parked)
        if self.index is not None:
            self.index.set_applied(log_end)

    def apply(
        self,
        header: BatchHeader,
        data: bytes | bytearray | memoryview,
        *,
        marker: bool | None,
        fired_origins: Sequence[int] | None = None,
        parked: Sequence[Delivery] | None = None,
    ) -> None:
        """Apply one batch at its offsets: parked records join the index, fired ones
        leave it, a marker (``marker``: committed; None when not known to be one)
        decides a transaction's rows."""
        if header.is_control and parked is not None:
            base = header.base_offset
            self._index_for_parked().apply_parked(
                [(base + i, d.due_ms, d.schedule_id, d.cancel, None) for i, d in enumerate(parked)],
                producer_id=header.producer_id,
                transactional=header.is_transactional,
            )
        elif header.is_control:
            records = decode_batch(data).records
            if records and is_parked_key(records[0].key):
                index = self._index_for_parked()
                index.apply_parked(
                    [row_of(decode_parked(record)) for record in records],
                    producer_id=header.producer_id,
                    transactional=header.is_transactional,
                )
            elif self.index is not None and header.is_transactional:
                committed = marker if marker is not None else _is_commit(records)
                if committed is not None:
                    revision = self.index.revision
                    self.index.apply_marker(
                        header.producer_id, committed=committed, marker_offset=header.base_offset
                    )
                    if self.index.revision != revision and self.on_revision is not None:
                        self.on_revision()
        elif header.producer_id == FIRED_PRODUCER_ID and self.index is not None:
            if fired_origins is None:
                fired_origins = origins_of(decode_batch(data).records)
            self.index.apply_fired(header.base_offset, fired_origins)

    def applied(self, log_end: int, *, purge_below: int) -> None:
        """On a flush: remember how far the index reflects the log, and forget rows
        finished below ``purge_below`` (the high watermark: no truncation goes there)."""
        if self.index is not None:
            with self.index.batch():
                self.index.set_applied(log_end)
                self.index.purge(purge_below)

    def _index_for_parked(self) -> DelayIndex:
        if self.index is None:
            self.index = DelayIndex.open(self.directory, create=True)
            assert self.index is not None
        return self.index

    def first_unfinished_offset(self) -> int | None:
        return None if self.index is None else self.index.first_unfinished_offset()

    def drop_below(self, offset: int) -> None:
        if self.index is not None:
            self.index.drop_below(offset)

    def truncate(self, offset: int) -> None:
        if self.index is not None:
            self.index.truncate(offset)

    def close(self) -> None:
        if self.index is not None:
            self.index.close()
            self.index = None

    # -- for the leader's scheduler and the tools ---------------------------------------

    def due(
        self, *, up_to_ms: int, after: tuple[int, int] | None = None, limit: int
    ) -> list[DueRecord]:
        if self.index is None:
            return []
        return self.index.due(up_to_ms=up_to_ms, after=after, limit=limit)

    def counts(self) -> DelayCounts:
        if self.index is None:
            return DelayCounts(0, 0, None)
        return self.index.counts()


def may_matter(header: BatchHeader) -> bool:
    """Parked batches and markers are control batches; fired ones have their producer."""
    return header.is_control or header.producer_id == FIRED_PRODUCER_ID


def _is_commit(records: list[ConsumerRecord]) -> bool | None:
    """Whether a marker's record is COMMIT (None: not a marker we read)."""
    try:
        marker, _ = decode_control_record(records[0].key, records[0].value)
    except (errors.KafkaError, IndexError):
        return None
    return marker is ControlRecordType.COMMIT
