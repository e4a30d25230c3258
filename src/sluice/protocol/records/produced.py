"""The produce-time check of a batch's records, after its header passed
:func:`~sluice.protocol.records.batch.validate_produced`.

The broker stores a produced batch as it arrives, so it must know, before appending,
that consumers will be able to read every record the header promises::

    uncompressed ── tile_records: lengths only ─────────────────────────┐
                                                                         ├─▶ exactly
    compressed ─── iter_decompressed ── chunks ── RecordsWalker ─────────┘   records_count
                   (stops past the limit)         (offset deltas;             records, no
                                                   keys on compacted topics)  byte left over

A compressed batch is decompressed in chunks and walked as they come: the check holds
one chunk at a time, and decompression stops as soon as the output passes
``decompressed_bytes_max`` or the walk finds a defect (a batch that declares 3 records
and inflates to 500 MiB is refused after its first chunk).

The check can be advanced in steps (:meth:`ProducedRecordsCheck.advance` with a
budget), so the broker does the cheap part on its event loop and finishes a large batch
in a worker thread. It does no I/O and keeps no global state; one thread at a time.

Errors: ``InvalidRecord`` when the records do not match the header or cannot be
decompressed (Kafka answers ``InvalidRecordException`` for records it cannot read back),
``MessageTooLarge`` when the decompressed records pass the limit. Records without a key
on a compacted topic are not an exception: like Kafka, the check counts them and the
caller answers INVALID_RECORD with one ``record_errors`` entry per record.
"""

from __future__ import annotations

from collections.abc import Iterator

from sluice.common import errors
from sluice.common.limits import (
    PRODUCED_RECORDS_EXPANSION_MAX,
    RECORD_ERRORS_PER_PARTITION_MAX,
    RECORDS_CHECKED_ON_EVENT_LOOP_MAX,
)
from sluice.protocol.records.batch import HEADER_BYTES, BatchHeader, Compression
from sluice.protocol.records.compression import DECOMPRESSED_BYTES_MAX, iter_decompressed
from sluice.protocol.records.walk import RecordsWalker, tile_records

__all__ = ["ProducedRecordsCheck", "decompressed_bytes_max"]


def decompressed_bytes_max(
    max_message_bytes: int, ceiling_bytes: int = DECOMPRESSED_BYTES_MAX
) -> int:
    """The most a produced batch's records may decompress to on a topic with this
    ``max.message.bytes``; see ``PRODUCED_RECORDS_EXPANSION_MAX``. ``ceiling_bytes``
    (the broker's ``sluice.produce.max.decompressed.bytes``) may lower the ceiling,
    never raise it past what consumers decompress."""
    ceiling = min(ceiling_bytes, DECOMPRESSED_BYTES_MAX)
    return min(ceiling, PRODUCED_RECORDS_EXPANSION_MAX * max_message_bytes)


class ProducedRecordsCheck:
    """Checks the records of one produced ``batch`` (the whole batch's bytes, its header
    already validated) against its ``header``."""

    def __init__(
        self,
        batch: bytes,
        header: BatchHeader,
        *,
        max_message_bytes: int,
        keys_required: bool = False,
        watch_for: bytes | None = None,
        decompressed_ceiling_bytes: int = DECOMPRESSED_BYTES_MAX,
        keep_records: bool = False,
    ) -> None:
        self._batch = batch
        self._keep_records = keep_records
        self._kept: list[bytes] | None = (
            [] if keep_records and header.compression != Compression.NONE else None
        )
        self.records_section: tuple[bytes, int] | None = None
        """With ``keep_records``, once done: (bytes, start) of the records section, the
        decompressed chunks joined (start 0) or the batch itself (start after its
        header), so a later look at the records (schema validation) decompresses
        nothing again."""
        self._watch_for = watch_for
        self.watched_seen = False
        """Whether ``watch_for`` occurs in the (decompressed) records: the broker looks
        for Sluice's header names this way before decoding any record."""
        self._watch_tail = b""
        self._count = header.records_count
        self.compressed = header.compression != Compression.NONE
        self.decompressed_bytes_max = decompressed_bytes_max(
            max_message_bytes, decompressed_ceiling_bytes
        )
        self.done = False
        """True once every record has been checked and found whole."""
        self._walker: RecordsWalker | None = None
        if self.compressed or keys_required:
            self._walker = RecordsWalker(
                self._count,
                check_offset_deltas=self.compressed,
                keys_required=keys_required,
                keyless_indexes_max=RECORD_ERRORS_PER_PARTITION_MAX,
            )
        self._chunks: Iterator[bytes] | None = None
        if self.compressed:
            self._chunks = iter_decompressed(
                header.compression,
                memoryview(batch)[HEADER_BYTES:],
                self.decompressed_bytes_max,
            )

    @property
    def fits_event_loop(self) -> bool:
        """Whether the batch declares few enough records for its check to start on the
        event loop (a compressed batch is then advanced with a budget)."""
        return self._count <= RECORDS_CHECKED_ON_EVENT_LOOP_MAX

    @property
    def keyless_records(self) -> int:
        """Records without a key (counted only when keys are required)."""
        return 0 if self._walker is None else self._walker.keyless_records

    @property
    def keyless_record_indexes(self) -> list[int]:
        """The first ``RECORD_ERRORS_PER_PARTITION_MAX`` indexes of records without a
        key, in order."""
        return [] if self._walker is None else self._walker.keyless_record_indexes

    def advance(self, decompressed_bytes_budget: int | None = None) -> bool:
        """Check more of the records: all of them, or for a compressed batch about
        ``decompressed_bytes_budget`` more decompressed bytes. Returns whether the check
        is done; raises the Kafka error the partition is answered with."""
        if self.done:
            return True
        if self._chunks is None:
            self._check_uncompressed()
            if self._keep_records:
                self.records_section = (self._batch, HEADER_BYTES)
        else:
            assert self._walker is not None
            inflated = 0
            try:
                for chunk in self._chunks:
                    self._walker.feed(chunk)
                    if self._kept is not None:
                        self._kept.append(chunk)
                    self._watch(chunk)
                    inflated += len(chunk)
                    if decompressed_bytes_budget is not None and (
                        inflated >= decompressed_bytes_budget
                    ):
                        return False
            except errors.CorruptMessage as e:
                raise errors.InvalidRecord(
                    f"the batch's records cannot be decompressed: {e.message}"
                ) from None
            self._walker.finish()
            if self._kept is not None:
                self.records_section = (b"".join(self._kept), 0)
                self._kept = None
        self.done = True
        return True

    def _watch(self, chunk: bytes) -> None:
        """Look for ``watch_for`` in a chunk, across the boundary with the last one."""
        watch_for = self._watch_for
        if watch_for is None or self.watched_seen:
            return
        keep = len(watch_for) - 1
        joined = self._watch_tail + chunk[:keep]
        if watch_for in joined or watch_for in chunk:
            self.watched_seen = True
        self._watch_tail = (
            (self._watch_tail + chunk)[-keep:] if len(chunk) < keep else chunk[-keep:]
        )

    def _check_uncompressed(self) -> None:
        batch = self._batch
        if self._watch_for is not None:
            self.watched_seen = self._batch.find(self._watch_for, HEADER_BYTES) >= 0
        if self._walker is not None:
            self._walker.feed(batch[HEADER_BYTES:])
            self._walker.finish()
            return
        end = tile_records(batch, HEADER_BYTES, self._count)
        if end != len(batch):
            raise errors.InvalidRecord(
                f"the batch declares {self._count} records but their lengths "
                + (
                    f"leave {len(batch) - end} bytes after the last one"
                    if end < len(batch)
                    else "run past the end of the batch"
                )
            )
