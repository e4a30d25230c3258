"""What one cleaning pass knows about transactions: which batches belong to aborted
transactions, which transaction markers may go, and which aborted-transaction index
entries the cleaned segments keep. Kafka's ``CleanedTransactionMetadata``, with its
own rule for markers (below).

A pass only reads transactions that are decided: the cleanable range ends at the last
stable offset (``cleaner.cleanable_range``). Then, batch by batch in offset order:

* a transactional batch whose producer has an aborted transaction covering its offset
  (from the aborted-transaction index, ``PartitionLog.aborted_transactions``) is
  aborted data: it stays out of the offset map and out of the cleaned segment;
* any other transactional batch is committed data, compacted like any record;
* a marker (control batch) closes its producer's transaction. It must stay while a
  batch of that transaction stays below it: replaying the log (producer state) would
  otherwise reopen the transaction and hold the last stable offset for ever. So the
  pass notes, per producer, whether a transactional batch of the current transaction
  was *written* to the cleaned segments (batches it drops, or empties, do not count).
  A marker with none goes through the delete horizon, as a tombstone does: the first
  such pass sets attribute bit 6 and the base timestamp ``now + delete.retention.ms``,
  a later pass after that time removes it (a reader that started within
  ``delete.retention.ms`` still sees it). Kafka keeps a marker one more pass when it
  saw its transaction's data in the pass (even data it dropped); noting what was
  written lets the horizon start in the pass that drops the last of the data.

Only a pass that reads from the first segment of the log can know that nothing of a
transaction is left below its marker; a pass over a later window of segments
(``PLAN_SEGMENTS_MAX``) keeps every marker as it is.

The aborted-transaction index of a cleaned segment keeps the entries whose ABORT
marker it still holds as a marker; the entry of a removed marker goes with it (no data
of the transaction is left to filter out).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from sluice.protocol.records.batch import ATTR_DELETE_HORIZON, BatchHeader
from sluice.storage.transaction_index import AbortedTransaction

__all__ = ["CleanedTransactions", "MarkerFate"]


class MarkerFate(enum.Enum):
    """What a pass does with one marker."""

    KEEP = "keep"
    """Data of its transaction is left below it, or the pass cannot know: copy it."""
    SET_HORIZON = "set horizon"
    """No data left and no horizon yet: rebuild it with its delete horizon."""
    WAIT = "wait"
    """No data left, its delete horizon not passed yet: copy it."""
    REMOVE = "remove"
    """No data left and its delete horizon passed: leave it out."""


class CleanedTransactions:
    """The transaction bookkeeping of one pass; fed every batch in offset order."""

    def __init__(
        self, aborted: Iterable[AbortedTransaction], *, reads_from_log_start: bool
    ) -> None:
        self._aborted: dict[int, list[tuple[int, int]]] = {}
        """Producer id → (first offset, marker offset) of its aborted transactions."""
        for entry in aborted:
            self._aborted.setdefault(entry.producer_id, []).append(
                (entry.first_offset, entry.last_offset)
            )
        self._may_remove_markers = reads_from_log_start
        self._with_data: set[int] = set()
        """Producers whose current transaction has a batch written by this pass."""
        self.markers_kept: set[int] = set()
        """Offsets of the markers the cleaned segments hold (changed or not)."""
        self.last_marker_removed = -1
        """The highest offset of a marker this pass removed; -1 when none."""

    def is_aborted(self, header: BatchHeader) -> bool:
        """The (data) batch belongs to an aborted transaction of its producer."""
        return header.is_transactional and any(
            first <= header.base_offset < marker
            for first, marker in self._aborted.get(header.producer_id, ())
        )

    def marker_fate(self, header: BatchHeader, now_ms: int) -> MarkerFate:
        """What to do with the marker ``header`` at wall-clock ``now_ms``."""
        assert header.is_control
        if header.producer_id in self._with_data or not self._may_remove_markers:
            return MarkerFate.KEEP
        if not header.attributes & ATTR_DELETE_HORIZON:
            return MarkerFate.SET_HORIZON
        if now_ms < header.base_timestamp:
            return MarkerFate.WAIT
        return MarkerFate.REMOVE

    def written(self, header: BatchHeader) -> None:
        """A batch went into a cleaned segment with these attributes (``header`` of
        the bytes written, so an emptied batch, no longer transactional, counts as no
        data)."""
        if header.is_control:
            self._with_data.discard(header.producer_id)
            self.markers_kept.add(header.base_offset)
        elif header.is_transactional and header.producer_id >= 0:
            self._with_data.add(header.producer_id)

    def written_data(self, header: BatchHeader) -> None:
        """A control batch that is data, not a marker (delayed delivery's parked
        records), went into a cleaned segment."""
        if header.is_transactional and header.producer_id >= 0:
            self._with_data.add(header.producer_id)

    def removed_marker(self, header: BatchHeader) -> None:
        """The marker ``header`` is not written (left out, or emptied at a segment's
        end)."""
        self._with_data.discard(header.producer_id)
        self.last_marker_removed = max(self.last_marker_removed, header.base_offset)

    def index_entries(self, entries: Iterable[AbortedTransaction]) -> list[AbortedTransaction]:
        """The aborted-transaction entries a cleaned segment keeps, of ``entries`` (those
        of the segments it replaces): the ones whose marker it holds."""
        return [entry for entry in entries if entry.last_offset in self.markers_kept]
