"""Producer state of one partition: duplicate and gap detection, open transactions,
snapshots.

For each producer id the partition remembers the producer's epoch and its last
``PRODUCER_BATCHES_REMEMBERED`` batches (first and last sequence, first and last offset).
A batch from a producer (``producer_id >= 0``) is checked before it is appended::

    epoch < known epoch                           → InvalidProducerEpoch
    epoch > known epoch, base sequence != 0       → OutOfOrderSequenceNumber
    epoch > known epoch, base sequence == 0       → accept (new epoch starts over)
    same epoch, (first, last) seq = a remembered  → duplicate: answer with its offsets
    same epoch, base seq != last seq + 1 (mod 2³¹) → OutOfOrderSequenceNumber
    same epoch, base seq == last seq + 1          → accept
    unknown producer id, any sequence             → accept

The last rule is Kafka's since KIP-360: a producer whose state was lost (its batches
were deleted by retention, or it was idle too long) may go on with its sequence. A batch
without a sequence (-1, e.g. a transaction marker) only updates the epoch.

Transactions. A producer's first transactional batch opens its transaction at that
batch's offset; a marker (a control batch, COMMIT or ABORT) closes it::

    no transaction ──transactional batch at offset f──▶ open (first offset f)
          ▲                                                  │ more transactional batches
          └────────────── marker at offset m ◀───────────────┘ → CompletedTransaction(f, m)

A non-transactional batch from a producer with an open transaction is refused
(INVALID_TXN_STATE); a marker with an older producer epoch than the partition knows
(INVALID_PRODUCER_EPOCH) or an older coordinator epoch (TRANSACTION_COORDINATOR_FENCED)
is refused. The smallest first offset of the open transactions bounds the last stable
offset (``log``).

Snapshots let a reopened partition skip replaying the whole log. ``<offset>.snapshot``
(20 digits, like segments) holds the state after every batch below ``offset``; written
at each roll and at close, atomically but without fsync: a snapshot torn by a power
loss fails its CRC and is skipped, which costs only a longer replay. Layout,
big-endian::

    ┌──────────────┬──────────────┬───────────────────┐
    │ version int16│ crc32c uint32│ producer count i32│  CRC-32C covers everything after it
    └──────────────┴──────────────┴───────────────────┘
    then per producer:
    ┌────────────────┬─────────────┬───────────────────┐
    │ producer id i64│ epoch int16 │ last timestamp i64│
    ├────────────────┴─────┬───────┴───────────────────┴────┬───────────────────┐
    │ coordinator epoch i32│ open transaction first offset  │ batch count int8  │
    │ (v2 only)            │ i64, -1: none (v2 only)        │                   │
    └──────────────────────┴────────────────────────────────┴───────────────────┘
    then per remembered batch, oldest first:
    ┌────────────────┬───────────────┬──────────────────┬─────────────────┐
    │ first seq int32│ last seq int32│ first offset i64 │ last offset i64 │
    └────────────────┴───────────────┴──────────────────┴─────────────────┘

Version 1 snapshots (written before transactions existed) are read with no open
transactions. On open the log loads the newest snapshot at or below its recovery point
(deleting newer ones, and skipping unreadable ones) and replays the batches after it.

Not yet here: expiring idle producers (``producer.id.expiration.ms``).
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from sluice.common import errors
from sluice.common.limits import PRODUCER_BATCHES_REMEMBERED
from sluice.protocol.records.batch import NO_SEQUENCE, BatchHeader
from sluice.protocol.records.delayed import FIRED_PRODUCER_ID
from sluice.storage.checkpoint import write_file_atomically

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 2
SNAPSHOT_VERSIONS_READ = (1, 2)
SNAPSHOT_BYTES_MAX = 256 * 1024 * 1024
"""A snapshot file larger than this is refused as not ours (a producer takes at most
~150 bytes, so this is over a million producers)."""

InvalidTxnState = errors.for_code(errors.ErrorCode.invalid_txn_state)
TransactionCoordinatorFenced = errors.for_code(errors.ErrorCode.transaction_coordinator_fenced)

SEQUENCE_MODULUS = 2**31
"""Sequences are non-negative int32 and wrap from 2³¹-1 to 0."""

_SNAPSHOT_HEAD = struct.Struct(">hIi")
_PRODUCER_V1 = struct.Struct(">qhqb")
_PRODUCER = struct.Struct(">qhqiqb")
_BATCH = struct.Struct(">iiqq")


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Sequence and offset range of one appended batch."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class CompletedTransaction:
    """A transaction a marker closed: its first data offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    committed: bool


@dataclass(slots=True)
class ProducerStateEntry:
    """What the partition knows about one producer id."""

    producer_id: int
    epoch: int
    last_timestamp_ms: int = -1
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=PRODUCER_BATCHES_REMEMBERED)
    )
    coordinator_epoch: int = -1
    """The transaction coordinator epoch of the last marker (older ones are fenced)."""
    transaction_first_offset: int = -1
    """First offset of the producer's open transaction here; -1 when none is open."""

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def find_duplicate(self, first_sequence: int, last_sequence: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_sequence == first_sequence and batch.last_sequence == last_sequence:
                return batch
        return None


def snapshot_file_name(offset: int) -> str:
    assert offset >= 0
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerStateManager:
    """Producer state of one partition and its snapshot files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerStateEntry] = {}
        self.open_transactions: dict[int, int] = {}
        """Producer id → first offset of its open transaction (mirrors the entries)."""
        self.markers_appended: dict[int, int] = {}
        """Producer id → markers appended since the log was opened (in memory only): a
        transactional produce verified with its coordinator checks that none landed
        between the verification and its append."""

    # -- checks and updates ---------------------------------------------------------

    def check(
        self,
        producer_id: int,
        epoch: int,
        first_sequence: int,
        last_sequence: int,
        *,
        transactional: bool = False,
    ) -> BatchMetadata | None:
        """Check a batch about to be appended. Returns the remembered batch when it is a
        duplicate, None when it may be appended; raises the Kafka error otherwise."""
        if producer_id < 0:
            return None
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        if epoch < entry.epoch:
            raise errors.InvalidProducerEpoch(
                f"producer {producer_id} has epoch {epoch}, older than {entry.epoch}"
            )
        if not transactional and entry.transaction_first_offset >= 0:
            raise InvalidTxnState(
                f"producer {producer_id} sent a non-transactional batch while its "
                f"transaction from offset {entry.transaction_first_offset} is open"
            )
        if first_sequence == NO_SEQUENCE:
            return None
        if epoch > entry.epoch:
            if first_sequence != 0:
                raise errors.OutOfOrderSequenceNumber(
                    f"producer {producer_id} starts epoch {epoch} at sequence "
                    f"{first_sequence}, not 0"
                )
            return None
        duplicate = entry.find_duplicate(first_sequence, last_sequence)
        if duplicate is not None:
            return duplicate
        if entry.last_sequence == NO_SEQUENCE:
            return None
        expected = (entry.last_sequence + 1) % SEQUENCE_MODULUS
        if first_sequence != expected:
            raise errors.OutOfOrderSequenceNumber(
                f"producer {producer_id} epoch {epoch} sent sequence {first_sequence}, "
                f"expected {expected}"
            )
        return None

    def record(
        self,
        producer_id: int,
        epoch: int,
        *,
        first_sequence: int,
        last_sequence: int,
        first_offset: int,
        last_offset: int,
        timestamp_ms: int,
        transactional: bool = False,
    ) -> None:
        """Remember an appended batch (after :meth:`check`, or unchecked when replaying
        the log or appending as a follower). Fired batches of delayed delivery have no
        producer to remember."""
        if producer_id < 0 or producer_id == FIRED_PRODUCER_ID:
            return
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = ProducerStateEntry(producer_id, epoch)
            self.producers[producer_id] = entry
        elif epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.last_timestamp_ms = max(entry.last_timestamp_ms, timestamp_ms)
        if first_sequence != NO_SEQUENCE:
            entry.batches.append(
                BatchMetadata(first_sequence, last_sequence, first_offset, last_offset)
            )
        if transactional and entry.transaction_first_offset < 0:
            entry.transaction_first_offset = first_offset
            self.open_transactions[producer_id] = first_offset

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Check a transaction marker about to be appended (raises the Kafka error)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise errors.InvalidProducerEpoch(
                f"marker for producer {producer_id} has epoch {epoch}, older than {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFenced(
                f"marker for producer {producer_id} from coordinator epoch "
                f"{coordinator_epoch}, older than {entry.coordinator_epoch}"
            )

    def complete_transaction(
        self,
        producer_id: int,
        epoch: int,
        *,
        marker_offset: int,
        committed: bool,
        coordinator_epoch: int,
        timestamp_ms: int,
    ) -> CompletedTransaction | None:
        """Remember an appended marker; the transaction it closed, or None when the
        producer had none open here (a marker for a partition it never wrote to)."""
        self.record(
            producer_id,
            epoch,
            first_sequence=NO_SEQUENCE,
            last_sequence=NO_SEQUENCE,
            first_offset=marker_offset,
            last_offset=marker_offset,
            timestamp_ms=timestamp_ms,
        )
        entry = self.producers[producer_id]
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        self.markers_appended[producer_id] = self.markers_appended.get(producer_id, 0) + 1
        first_offset = entry.transaction_first_offset
        if first_offset < 0:
            return None
        entry.transaction_first_offset = -1
        del self.open_transactions[producer_id]
        return CompletedTransaction(producer_id, first_offset, marker_offset, committed)

    def has_open_transaction(self, producer_id: int, epoch: int) -> bool:
        """Whether the producer, at this epoch, has a transaction open here."""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.epoch == epoch and entry.transaction_first_offset >= 0

    def first_open_transaction_offset(self) -> int | None:
        """The smallest first offset of an open transaction, None when none is open."""
        return min(self.open_transactions.values()) if self.open_transactions else None

    def replay(self, header: BatchHeader) -> None:
        """Remember a data batch read back from the log (its header has the real
        offsets): a data batch or a parked batch of delayed delivery (a control batch
        holding a producer's records). Markers go to :meth:`complete_transaction`."""
        self.record(
            header.producer_id,
            header.producer_epoch,
            first_sequence=header.base_sequence,
            last_sequence=header.last_sequence,
            first_offset=header.base_offset,
            last_offset=header.last_offset,
            timestamp_ms=header.max_timestamp,
            transactional=header.is_transactional,
        )

    def clear(self) -> None:
        self.producers.clear()
        self.open_transactions.clear()

    # -- snapshots ------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files on disk, ascending."""
        offsets = []
        for name in os.listdir(self.directory):
            if name.endswith(SNAPSHOT_SUFFIX):
                stem = name[: -len(SNAPSHOT_SUFFIX)]
                if stem.isdigit():
                    offsets.append(int(stem))
        return sorted(offsets)

    def take_snapshot(self, offset: int) -> None:
        """Write the current state as ``<offset>.snapshot`` (state after all batches
        below ``offset``)."""
        write_file_atomically(
            self.directory / snapshot_file_name(offset), self._encode(), durable=False
        )

    def load_latest_snapshot(self, at_or_below: int) -> int | None:
        """Replace the state with the newest readable snapshot whose offset is <=
        ``at_or_below``. Returns its offset, or None (empty state) when there is none.
        Unreadable snapshots are deleted with a warning."""
        self.clear()
        for offset in reversed(self.snapshot_offsets()):
            if offset > at_or_below:
                continue
            path = self.directory / snapshot_file_name(offset)
            try:
                self.producers = self._decode(path)
            except errors.KafkaError as e:
                log.warning("%s: unreadable producer snapshot, deleting it: %s", path, e)
                path.unlink(missing_ok=True)
                self.producers = {}
                continue
            self.open_transactions = {
                producer_id: entry.transaction_first_offset
                for producer_id, entry in self.producers.items()
                if entry.transaction_first_offset >= 0
            }
            return offset
        return None

    def delete_snapshots_after(self, offset: int) -> None:
        """Delete snapshots with offset > ``offset`` (the log was truncated below them)."""
        self._delete(o for o in self.snapshot_offsets() if o > offset)

    def delete_snapshots_before(self, offset: int) -> None:
        """Delete snapshots with offset < ``offset``, always keeping the newest one."""
        offsets = self.snapshot_offsets()
        self._delete(o for o in offsets[:-1] if o < offset)

    def _delete(self, offsets: Iterable[int]) -> None:
        for offset in offsets:
            (self.directory / snapshot_file_name(offset)).unlink(missing_ok=True)

    def _encode(self) -> bytes:
        body = bytearray()
        for entry in self.producers.values():
            body += _PRODUCER.pack(
                entry.producer_id,
                entry.epoch,
                entry.last_timestamp_ms,
                entry.coordinator_epoch,
                entry.transaction_first_offset,
                len(entry.batches),
            )
            for batch in entry.batches:
                body += _BATCH.pack(
                    batch.first_sequence,
                    batch.last_sequence,
                    batch.first_offset,
                    batch.last_offset,
                )
        count = struct.pack(">i", len(self.producers))
        crc = crc32c.crc32c(count + body)
        return struct.pack(">hI", SNAPSHOT_VERSION, crc) + count + bytes(body)

    @staticmethod
    def _decode(path: Path) -> dict[int, ProducerStateEntry]:
        with path.open("rb") as file:
            data = file.read(SNAPSHOT_BYTES_MAX + 1)
        if len(data) > SNAPSHOT_BYTES_MAX:
            raise errors.KafkaStorageError(f"larger than {SNAPSHOT_BYTES_MAX} bytes")
        if len(data) < _SNAPSHOT_HEAD.size:
            raise errors.KafkaStorageError(f"only {len(data)} bytes")
        version, crc, count = _SNAPSHOT_HEAD.unpack_from(data, 0)
        if version not in SNAPSHOT_VERSIONS_READ:
            raise errors.KafkaStorageError(f"unknown version {version}")
        if crc32c.crc32c(memoryview(data)[6:]) != crc:
            raise errors.KafkaStorageError("CRC-32C mismatch")
        producers: dict[int, ProducerStateEntry] = {}
        position = _SNAPSHOT_HEAD.size
        try:
            for _ in range(count):
                if version == 1:
                    producer_id, epoch, last_timestamp, batch_count = _PRODUCER_V1.unpack_from(
                        data, position
                    )
                    coordinator_epoch, transaction_first_offset = -1, -1
                    position += _PRODUCER_V1.size
                else:
                    (
                        producer_id,
                        epoch,
                        last_timestamp,
                        coordinator_epoch,
                        transaction_first_offset,
                        batch_count,
                    ) = _PRODUCER.unpack_from(data, position)
                    position += _PRODUCER.size
                entry = ProducerStateEntry(
                    producer_id,
                    epoch,
                    last_timestamp,
                    coordinator_epoch=coordinator_epoch,
                    transaction_first_offset=transaction_first_offset,
                )
                for _ in range(batch_count):
                    entry.batches.append(BatchMetadata(*_BATCH.unpack_from(data, position)))
                    position += _BATCH.size
                producers[producer_id] = entry
        except struct.error:
            raise errors.KafkaStorageError(f"truncated at byte {position}") from None
        if position != len(data):
            raise errors.KafkaStorageError(f"{len(data) - position} trailing bytes")
        return producers
