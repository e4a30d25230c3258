"""The log cleaner: compaction of ``cleanup.policy=compact`` (and ``compact,delete``) logs.

Compaction keeps, for every key, the record with the highest offset, and drops older
records with the same key. Offsets never change: a surviving record keeps its offset,
so a cleaned segment has gaps, which v2 batches allow. A pass works on the *cleanable*
part of the log, whole segments wholly below ``min(active segment base, last stable
offset)`` (the last stable offset is at most the high watermark, and stops at the first
transaction not decided yet) whose newest record is at least ``min.compaction.lag.ms``
old::

     log start     first dirty offset (cleaner checkpoint)     first uncleanable offset
        │                 │                                        │
    ────┼─────────────────┼────────────────────────────────────────┼────────────┬─────►
        │◄─ clean ───────►│◄─ dirty: the offset map is built here ─►│ too young, │ active
        │   (cleaned by   │   key digest → last offset              │ at or past │ segment
        │   earlier passes)                                         │ the LSO    │
        │◄─ rewritten by this pass: every segment up to the map end ►│

1. **Offset map.** The dirty range is read once; each keyed record sets
   ``map[blake2b-128(key)] = offset`` (markers and records of aborted transactions
   excepted, see Transactions). The map holds at most ``OFFSET_MAP_KEYS_MAX``
   keys (a named limit: memory stays bounded). When the dirty range holds more keys the
   map stops before the batch that would overflow it, and the pass cleans only up to
   there (the *map end*); the next pass goes on from there, as Kafka does.
2. **Rewrite.** Every cleanable segment below the map end (the clean part too: a key
   overwritten in the dirty range must lose its old value there) is copied batch by
   batch. A record is dropped when the map has a *higher* offset for its key. Records at
   or past the map end are always kept. Then per batch:

   * nothing dropped and nothing to mark: the bytes are copied as they are;
   * some records dropped (or a tombstone to mark): the batch is rebuilt with the same
     base offset, **the same last offset delta** (so the producer's last sequence and
     the batch's offset range are unchanged), the same leader epoch, producer id,
     epoch, base sequence, codec and timestamp type, and the surviving records byte
     for byte (their offset deltas kept; gaps are fine);
   * every record dropped: the batch goes, except that it stays as an *empty batch*
     (header only, no records, codec none; Kafka writes the same) when it is the last
     batch of an idempotent producer (so its sequence state survives) or the last batch
     of the new segment (so the segment still ends at the same offset, which is what
     lets a crashed swap be completed, see below).

   Consecutive segments are merged while their sizes add up to at most
   ``segment.bytes`` (Kafka's grouping); a lone segment in which nothing changes is not
   rewritten at all.
3. **Tombstones** (a keyed record with a null value) survive a first pass: the batch
   holding one is rebuilt with the *delete horizon* bit (attribute bit 6) set and its
   base timestamp set to ``now + delete.retention.ms`` (record timestamp deltas are
   rewritten against it, so consumers read the same timestamps); a later pass after
   that horizon drops the tombstone if it is still the latest record of its key
   (KIP-534, as Kafka ≥ 3.1 does). So a tombstone lives at least
   ``delete.retention.ms`` after the first pass that cleaned it, and a consumer that
   reads from the start within that time sees every delete. The earliest horizon
   still pending is kept in the cleaner checkpoint, and :func:`needs_cleaning` says
   yes once it has passed, even if the log is not dirty.

Transactions (``cleaner_transactions``). Everything a pass reads is decided, as the
cleanable range ends at the last stable offset (Kafka's first unstable offset). The
records of committed transactions are compacted like any record: they enter the offset
map, may shadow older values and be shadowed by newer ones. The batches of aborted
transactions (the aborted-transaction index says which) never enter the map and are
dropped (emptied when they are their producer's last batch). What a read_committed
reader reads after a pass is thus the compaction of what it read before. A marker
(control batch) stays while a batch of its transaction stays below it; once none does,
it goes through the delete horizon as a tombstone does (bit 6 and ``now +
delete.retention.ms`` set by one pass, removed by a pass after that time;
``CleaningStats.markers_removed``). Only a pass reading from the first segment decides
that; a window further on keeps markers as they are. A rewritten segment keeps the
aborted-transaction entries (``.txnindex``) of the segments it replaces whose markers
it still holds: the entry of a removed marker goes with it, as no data of its
transaction is left to filter out. A swap that removes markers deletes the
producer-state snapshots at or below the last of them, so no replay (after a
truncation) starts inside a transaction whose marker is gone.

Records with a null key are kept (Kafka's produce path rejects them on compacted
topics; the broker should too).

Threads. The broker's event loop must not block, so a pass is split in three::

    appending thread            worker thread                 appending thread
    plan = prepare(log, now) ─► plan.build(io_budget) ──────► log.swap_cleaned(plan)
    picks the range, dups the   reads only the duplicated     checks the log did not
    descriptors of the segments descriptors, writes only      change under the plan,
    to read, notes producers    new *.cleaned files,          swaps the files in, writes
                                throttled (token bucket)      the cleaner checkpoint

``plan.discard()`` (appending thread, never during ``build``) throws a plan away.
One plan at a time per log (``log.cleaning_plan``). Segments the plan reads are
inactive and below the high watermark: they do not change while it is built; if the
log is truncated, loses a planned segment to retention or DeleteRecords, or is closed,
the swap is abandoned and the plan's files deleted.

Files and the crash-safe swap (``<b>`` = a base offset in 20 digits)::

    build:   <b>.log.cleaned <b>.index.cleaned <b>.timeindex.cleaned   written, fsynced
             (and <b>.txnindex.cleaned: the aborted-transaction entries the new
             segment keeps, written whenever the segments replaced have any, even
             when none is kept, so it always replaces theirs; it follows the others
             through every step below, and a completed swap keeps it: unlike the
             other indexes it cannot be rebuilt from the segment alone)
    commit:  for each new segment, ascending: rename its *.cleaned → *.swap, the .log
             last; fsync the directory.   The commit point is the rename of the last
             .log.cleaned: from then on no .log.cleaned of the plan exists.
    install: for each new segment, ascending: rename the old segments it replaces to
             *.deleted (unlinked after file.delete.delay.ms), rename its .index.swap,
             .timeindex.swap and then .log.swap into place; fsync the directory.
    finish:  write cleaner-offset-checkpoint.

    On open (:func:`finish_interrupted_swap`, before anything else looks at segments):
      a <b>.log.cleaned exists   → not committed: delete every *.cleaned and *.swap;
                                   the old segments are all there.
      else, a <b>.log.swap exists → committed: for each, ascending, find its next
                                   offset n from its batch headers, delete every
                                   .log/.index/.timeindex with base in [b, n), delete
                                   its index swaps (rebuilt from the log on first use)
                                   and rename it to <b>.log.

A crash at any instant thus leaves either every old segment or every new one. A new
segment always ends at the offset where the segments it replaces ended (its last batch
is kept, emptied if need be), so [b, n) names exactly the segments it replaces. Renames
in one directory are taken to reach the disk in order (a journaling file system does;
Kafka assumes the same).

``cleaner-offset-checkpoint`` (text, written atomically, see ``checkpoint``)::

    0                          ← format version
    first_dirty_offset 5310    ← the map end of the last pass: below it is clean
    tombstone_horizon_ms -1    ← earliest delete horizon of a kept tombstone or marker;
                                 -1: none (the name predates markers)

It is lowered when the log is truncated below it, and reset to the log start when it
is outside the log.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import crc32c
from kio.serial.readers import read_signed_varint, read_signed_varlong

from sluice.common import errors
from sluice.common.clock import SYSTEM_CLOCK, Clock
from sluice.common.config import TopicConfig
from sluice.protocol.records.batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    HEADER_BYTES,
    LOG_OVERHEAD_BYTES,
    MAGIC,
    BatchHeader,
    Compression,
    crc_is_valid,
    parse_header,
)
from sluice.protocol.records.compression import DECOMPRESSED_BYTES_MAX, compress, decompress
from sluice.protocol.records.record import iter_record_fields
from sluice.storage.checkpoint import (
    fsync_directory,
    read_offsets_checkpoint,
    write_all,
    write_offsets_checkpoint,
)
from sluice.storage.cleaner_transactions import CleanedTransactions, MarkerFate
from sluice.storage.delays import is_parked_batch
from sluice.storage.index import RELATIVE_OFFSET_MAX, OffsetIndex, TimeIndex
from sluice.storage.producer_state import ProducerStateManager
from sluice.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    parse_segment_file_name,
    segment_file_name,
)
from sluice.storage.transaction_index import (
    TRANSACTION_INDEX_SUFFIX,
    AbortedTransaction,
    TransactionIndex,
)

logger = logging.getLogger(__name__)


class CleanableLog(Protocol):
    """What the cleaner reads from a partition log, and the one thing it marks on it
    (the plan in flight). ``PartitionLog`` is one; the cleaner is handed the log and
    never imports it, so the log can import the cleaner."""

    cleaning_plan: CleaningPlan | None

    @property
    def directory(self) -> Path: ...
    @property
    def config(self) -> TopicConfig: ...
    @property
    def segments(self) -> tuple[LogSegment, ...]: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def last_stable_offset(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def truncations(self) -> int: ...
    @property
    def producer_state(self) -> ProducerStateManager: ...
    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTransaction]: ...


__all__ = [
    "CLEANER_CHECKPOINT_NAME",
    "MIN_CLEANABLE_DIRTY_RATIO_DEFAULT",
    "OFFSET_MAP_KEYS_MAX",
    "PLAN_SEGMENTS_MAX",
    "CleanableLog",
    "CleanableRange",
    "CleanedSegment",
    "CleanerCheckpoint",
    "CleaningPlan",
    "CleaningStats",
    "Throttler",
    "cleanable_range",
    "finish_interrupted_swap",
    "needs_cleaning",
    "prepare",
    "read_cleaner_checkpoint",
    "truncate_cleaner_checkpoint",
    "write_cleaner_checkpoint",
]

CLEANER_CHECKPOINT_NAME: Final = "cleaner-offset-checkpoint"

MIN_CLEANABLE_DIRTY_RATIO_DEFAULT: Final = 0.5
"""Kafka's ``min.cleanable.dirty.ratio`` default: clean when at least half of the
cleanable bytes are in segments not cleaned yet."""

KEY_DIGEST_BYTES: Final = 16
"""The offset map holds a 128-bit BLAKE2b digest of each key longer than this, not the
key (keys may be large), and shorter keys as they are (no hashing cost, no more memory).
A collision, of two digests or of a digest and a short key, has odds ~2⁻¹²⁸ per pair:
out of reach."""

OFFSET_MAP_KEYS_MAX: Final = 500_000
"""Keys one pass's offset map may hold. A Python dict entry of a 16-byte digest and an
int takes about 130 bytes, so this caps the map near 64 MiB (Kafka's default dedupe
buffer is 128 MiB shared by its cleaner threads). A dirty range with more keys is
cleaned over several passes."""

PLAN_SEGMENTS_MAX: Final = 512
"""Segments one plan reads; each holds a duplicated descriptor until ``build`` ends.
With more cleanable segments, a pass reads the first ones, or, when the dirty range
starts past them, the ones from the first dirty segment on; then segments before that
window keep values overwritten in it until a pass covers both (the merging of small
cleaned segments usually brings the count down first). 512 segments are 512 GiB at the
default segment.bytes."""

CLEANER_READ_BYTES: Final = 1024 * 1024
"""Bytes read at a time from a segment (a larger batch is read whole)."""

CLEANER_WRITE_BUFFER_BYTES: Final = 1024 * 1024
"""Bytes gathered before each write to a cleaned segment."""

THROTTLE_BURST_SECONDS: Final = 0.1
"""The token bucket holds this many seconds of the I/O budget: after an idle spell the
cleaner may go that far ahead of the budget, no further."""

_HEADER_BEFORE_CRC = struct.Struct(">qiibI")
_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")
assert _HEADER_BEFORE_CRC.size + _HEADER_AFTER_CRC.size == HEADER_BYTES


# -- the cleaner checkpoint -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanerCheckpoint:
    """How far the cleaner got in one partition."""

    first_dirty_offset: int = 0
    """Offsets below this were cleaned with a map holding every key up to it."""
    tombstone_horizon_ms: int = -1
    """Earliest delete horizon of a tombstone or marker kept by a pass; -1 when none
    waits."""


def read_cleaner_checkpoint(directory: Path) -> CleanerCheckpoint:
    """The partition's cleaner checkpoint; the default (clean from the log start) when
    it is missing or unreadable (a warning: that only costs a longer pass)."""
    try:
        offsets = read_offsets_checkpoint(directory / CLEANER_CHECKPOINT_NAME)
    except errors.KafkaStorageError as e:
        logger.warning("%s: ignoring the cleaner checkpoint: %s", directory, e)
        return CleanerCheckpoint()
    if offsets is None:
        return CleanerCheckpoint()
    return CleanerCheckpoint(
        first_dirty_offset=max(offsets.get("first_dirty_offset", 0), 0),
        tombstone_horizon_ms=offsets.get("tombstone_horizon_ms", -1),
    )


def write_cleaner_checkpoint(directory: Path, checkpoint: CleanerCheckpoint) -> None:
    write_offsets_checkpoint(
        directory / CLEANER_CHECKPOINT_NAME,
        {
            "first_dirty_offset": checkpoint.first_dirty_offset,
            "tombstone_horizon_ms": checkpoint.tombstone_horizon_ms,
        },
    )


def truncate_cleaner_checkpoint(directory: Path, offset: int) -> None:
    """The log was truncated to ``offset``: offsets from there on are dirty again (they
    will be appended anew). Kafka's ``maybeTruncateCheckpoint``."""
    path = directory / CLEANER_CHECKPOINT_NAME
    if not path.exists():
        return
    checkpoint = read_cleaner_checkpoint(directory)
    if checkpoint.first_dirty_offset > offset:
        write_cleaner_checkpoint(
            directory, CleanerCheckpoint(max(offset, 0), checkpoint.tombstone_horizon_ms)
        )


# -- what may be cleaned --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """The cleanable segments of a log and how dirty they are."""

    segments: tuple[LogSegment, ...]
    """Inactive segments, from the first, wholly below the last stable offset (so below
    the high watermark and every transaction not decided yet) and at least
    min.compaction.lag.ms old."""
    boundaries: tuple[int, ...]
    """For each segment, the base offset of the segment after it (where it ends)."""
    first_dirty_offset: int
    end_offset: int
    """The first offset that may not be cleaned (the end of the last segment)."""
    clean_bytes: int
    dirty_bytes: int
    checkpoint: CleanerCheckpoint

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def tombstones_due(self, now_ms: int) -> bool:
        horizon = self.checkpoint.tombstone_horizon_ms
        return horizon >= 0 and now_ms >= horizon and bool(self.segments)


def _newest_timestamp_ms(segment: LogSegment) -> int:
    """The segment's max timestamp, or its file's mtime when no batch has one."""
    newest = segment.max_timestamp_ms
    if newest >= 0:
        return newest
    return os.fstat(segment.file.fileno()).st_mtime_ns // 1_000_000


def cleanable_range(log: CleanableLog, now_ms: int) -> CleanableRange:
    """What a pass on ``log`` at ``now_ms`` may clean (call on the appending thread)."""
    checkpoint = read_cleaner_checkpoint(log.directory)
    segments = log.segments
    # Kafka's first uncleanable offset: the active segment, the high watermark, and the
    # first offset of a transaction still open or not yet decided below the high
    # watermark (the last stable offset is at most the high watermark). Whether such a
    # transaction's records are aborted is not known yet: they must not enter the map.
    upper = min(segments[-1].base_offset, log.high_watermark, log.last_stable_offset)
    lag_ms = log.config.min_compaction_lag_ms
    cleanable: list[LogSegment] = []
    boundaries: list[int] = []
    for i, segment in enumerate(segments[:-1]):
        boundary = segments[i + 1].base_offset
        if boundary > upper:
            break
        if lag_ms > 0 and now_ms - _newest_timestamp_ms(segment) < lag_ms:
            break
        cleanable.append(segment)
        boundaries.append(boundary)
    first_dirty = checkpoint.first_dirty_offset
    if not log.log_start_offset <= first_dirty <= log.log_end_offset:
        first_dirty = log.log_start_offset
    clean_bytes = dirty_bytes = 0
    for segment, boundary in zip(cleanable, boundaries, strict=True):
        if boundary <= first_dirty:
            clean_bytes += segment.size_bytes
        else:
            dirty_bytes += segment.size_bytes
    return CleanableRange(
        segments=tuple(cleanable),
        boundaries=tuple(boundaries),
        first_dirty_offset=first_dirty,
        end_offset=boundaries[-1] if boundaries else segments[0].base_offset,
        clean_bytes=clean_bytes,
        dirty_bytes=dirty_bytes,
        checkpoint=checkpoint,
    )


def needs_cleaning(
    log: CleanableLog,
    now_ms: int,
    *,
    min_cleanable_dirty_ratio: float = MIN_CLEANABLE_DIRTY_RATIO_DEFAULT,
) -> bool:
    """True when ``log`` is compacted and either its dirty ratio (dirty bytes over
    cleanable bytes) reached ``min_cleanable_dirty_ratio`` or the delete horizon of a
    kept tombstone or marker has passed. For the broker's background task, on the
    appending thread."""
    if log.closed or not log.config.compact or log.cleaning_plan is not None:
        return False
    span = cleanable_range(log, now_ms)
    if span.tombstones_due(now_ms):
        return True
    return span.dirty_bytes > 0 and span.dirty_ratio >= min_cleanable_dirty_ratio


# -- throttling -----------------------------------------------------------------------


class Throttler:
    """A token bucket of ``rate_bytes_per_s``: :meth:`consume` sleeps as long as the
    bytes used so far are ahead of the budget. ``rate_bytes_per_s`` None: no limit.
    Time comes from ``clock.monotonic_ms`` and waiting from ``sleep`` (seconds), both
    injectable, so tests run without sleeping."""

    def __init__(
        self,
        rate_bytes_per_s: float | None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        assert rate_bytes_per_s is None or rate_bytes_per_s > 0, "an I/O budget is positive"
        self.rate_bytes_per_s = rate_bytes_per_s
        self._clock = clock
        self._sleep = sleep
        self._capacity_bytes = (rate_bytes_per_s or 0) * THROTTLE_BURST_SECONDS
        self._tokens = self._capacity_bytes
        self._last_ms = clock.monotonic_ms()
        self.slept_s = 0.0
        self.consumed_bytes = 0

    def consume(self, size_bytes: int) -> None:
        self.consumed_bytes += size_bytes
        rate = self.rate_bytes_per_s
        if rate is None:
            return
        now_ms = self._clock.monotonic_ms()
        refill = (now_ms - self._last_ms) * rate / 1000
        self._tokens = min(self._capacity_bytes, self._tokens + refill) - size_bytes
        self._last_ms = now_ms
        if self._tokens < 0:
            wait_s = -self._tokens / rate
            self.slept_s += wait_s
            self._sleep(wait_s)


# -- records inside a batch, raw --------------------------------------------------------


def _zigzag(value: int) -> bytes:
    """Zigzag base-128 varint/varlong of a 64-bit value."""
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


_KeptRecord = tuple[int, int, int]
"""(timestamp delta, start, end) of a record to keep, in its records section."""


def _select_records(
    section: bytes,
    count: int,
    base_offset: int,
    offset_map: dict[bytes, int],
    *,
    drop_tombstones: bool,
) -> tuple[list[_KeptRecord], int, int]:
    """Walk the records of an (uncompressed) section and pick those to keep: all but
    the ones whose key the offset map has at a higher offset, and the tombstones still
    the latest of their key when ``drop_tombstones``. Returns (kept records, tombstones
    dropped, tombstones kept). Record headers are not decoded: the records kept are
    copied byte for byte. Raises CorruptMessage.

    The hot loop of the rewrite: a dropped record costs its walk and one lookup."""
    kept: list[_KeptRecord] = []
    tombstones_dropped = tombstones_kept = 0
    get = offset_map.get
    digest = hashlib.blake2b
    start = 0
    for offset_delta, timestamp_delta, record_key, value_position, end in iter_record_fields(
        section, count
    ):
        record_start, start = start, end
        if record_key is not None:
            key = (
                record_key
                if len(record_key) <= KEY_DIGEST_BYTES
                else digest(record_key, digest_size=KEY_DIGEST_BYTES).digest()
            )
            latest = get(key)
            if latest is not None and latest > base_offset + offset_delta:
                continue
            if section[value_position] == 0x01:  # the value's length: -1 is a tombstone
                if drop_tombstones:
                    tombstones_dropped += 1
                    continue
                tombstones_kept += 1
        kept.append((timestamp_delta, record_start, end))
    return kept, tombstones_dropped, tombstones_kept


def _retimed_record(section: bytes, start: int, end: int, timestamp_delta: int) -> bytes:
    """The record ``section[start:end]`` with its timestamp delta replaced (and its
    length with it). One-byte varints are read inline: this runs for every record kept
    in a batch whose delete horizon is set."""
    body_start = start + (1 if section[start] < 0x80 else read_signed_varint(section, start)[1])
    timestamp_start = body_start + 1  # after the attributes
    after_timestamp = timestamp_start + (
        1 if section[timestamp_start] < 0x80 else read_signed_varlong(section, timestamp_start)[1]
    )
    timestamp = _zigzag(timestamp_delta)
    return b"".join(
        (
            _zigzag(1 + len(timestamp) + end - after_timestamp),
            section[body_start:timestamp_start],  # attributes
            timestamp,
            section[after_timestamp:end],
        )
    )


def _encode_batch(
    header: BatchHeader,
    *,
    attributes: int,
    base_timestamp_ms: int,
    max_timestamp_ms: int,
    payload: bytes,
    records_count: int,
) -> bytes:
    """A batch with ``header``'s offsets, epoch and producer fields around ``payload``
    (the records section, already compressed if ``attributes`` say so)."""
    after_crc = _HEADER_AFTER_CRC.pack(
        attributes,
        header.last_offset_delta,
        base_timestamp_ms,
        max_timestamp_ms,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        records_count,
    )
    crc = crc32c.crc32c(payload, crc32c.crc32c(after_crc))
    before_crc = _HEADER_BEFORE_CRC.pack(
        header.base_offset,
        HEADER_BYTES - LOG_OVERHEAD_BYTES + len(payload),
        header.partition_leader_epoch,
        MAGIC,
        crc,
    )
    return b"".join((before_crc, after_crc, payload))


def _empty_batch(header: BatchHeader) -> bytes:
    """``header``'s batch with every record removed: its offset range, leader epoch and
    producer fields stay (Kafka's ``writeEmptyHeader``)."""
    return _encode_batch(
        header,
        attributes=header.attributes & ATTR_TIMESTAMP_TYPE,
        base_timestamp_ms=header.max_timestamp,
        max_timestamp_ms=header.max_timestamp,
        payload=b"",
        records_count=0,
    )


def _with_delete_horizon(header: BatchHeader, data: memoryview, horizon_ms: int) -> bytes:
    """``header``'s batch (every record kept) with its delete horizon set: attribute
    bit 6 and base timestamp ``horizon_ms``, record timestamps rewritten against it."""
    section = _records_section(header, data)
    parts = []
    start = 0
    for _, timestamp_delta, _, _, end in iter_record_fields(section, header.records_count):
        timestamp_ms = header.base_timestamp + timestamp_delta
        parts.append(_retimed_record(section, start, end, timestamp_ms - horizon_ms))
        start = end
    payload = b"".join(parts)
    if header.compression != Compression.NONE:
        payload = compress(header.compression, payload)
    return _encode_batch(
        header,
        attributes=header.attributes | ATTR_DELETE_HORIZON,
        base_timestamp_ms=horizon_ms,
        max_timestamp_ms=header.max_timestamp,
        payload=payload,
        records_count=header.records_count,
    )


def _records_section(header: BatchHeader, data: memoryview) -> bytes:
    codec = header.attributes & ATTR_COMPRESSION_MASK
    if codec == Compression.NONE:
        return bytes(data[HEADER_BYTES:])
    return decompress(header.compression, data[HEADER_BYTES:], DECOMPRESSED_BYTES_MAX)


def _map_batch_keys(
    offset_map: dict[bytes, int], section: bytes, count: int, base_offset: int
) -> None:
    """Set ``offset_map[key] = offset`` for every keyed record of a section: the hot
    loop of the map phase. Raises CorruptMessage."""
    digest = hashlib.blake2b
    for offset_delta, _, record_key, _, _ in iter_record_fields(section, count):
        if record_key is not None:
            key = (
                record_key
                if len(record_key) <= KEY_DIGEST_BYTES
                else digest(record_key, digest_size=KEY_DIGEST_BYTES).digest()
            )
            offset_map[key] = base_offset + offset_delta


# -- plans ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Source:
    """A segment as the plan reads it: a duplicated descriptor and its size then."""

    segment: LogSegment
    """For the swap's identity checks only; the worker never touches it."""
    base_offset: int
    end_offset: int
    """The next segment's base offset: every offset in this one is below it."""
    size_bytes: int
    fd: int
    name: str

    def pread(self, size: int, position: int) -> bytes:
        data = os.pread(self.fd, size, position)
        if len(data) != size:
            raise errors.KafkaStorageError(
                f"{self.name}: wanted {size} bytes at {position}, read {len(data)}; "
                "the segment changed under the cleaner"
            )
        return data


@dataclass(frozen=True, slots=True)
class CleanedSegment:
    """A segment written by :meth:`CleaningPlan.build`, to replace ``replaces``."""

    base_offset: int
    next_offset: int
    size_bytes: int
    replaces: tuple[LogSegment, ...]

    def path(self, suffix: str, state: str) -> Path:
        """``<base><suffix><state>``, e.g. ``…0042.log.cleaned``, in the log's directory."""
        directory = self.replaces[0].directory
        return directory / (segment_file_name(self.base_offset, suffix) + state)


@dataclass(frozen=True, slots=True)
class CleaningStats:
    """What one :meth:`CleaningPlan.build` did."""

    first_dirty_offset: int
    map_end_offset: int
    """The new first dirty offset: the pass cleaned below it."""
    keys: int
    segments_read: int
    segments_written: int
    bytes_read: int
    bytes_written: int
    records_examined: int
    records_removed: int
    tombstones_removed: int
    markers_removed: int
    """Transaction markers removed: no data of their transaction left, horizon passed."""
    batches_removed: int
    throttled_s: float
    elapsed_s: float


class CleaningCancelled(Exception):
    """:meth:`CleaningPlan.build` stopped because :meth:`CleaningPlan.cancel` was called
    (the log is being deleted). The caller discards the plan."""


class _State(enum.Enum):
    PREPARED = "prepared"
    BUILDING = "building"
    BUILT = "built"
    FAILED = "failed"
    DISCARDED = "discarded"
    SWAPPED = "swapped"


class _Action(enum.Enum):
    """What :meth:`CleaningPlan._clean_batch` decided for one batch."""

    KEEP = "keep"
    """Copy the batch as it is."""
    DROP = "drop"
    """Leave it out (kept empty if it turns out to end its segment)."""
    REPLACE = "replace"
    """Write the rebuilt batch instead."""


class _SegmentWriter:
    """Writes one cleaned segment, ``<b>.log.cleaned``, and its two indexes. With a
    ``lazy_source`` (a lone segment that may come out unchanged) nothing is written
    until the output first differs from the source; then the unchanged prefix is
    copied from it. Indexes follow the segment's own rule (an entry every
    index.interval.bytes, a final time-index entry), built as the batches go, so the
    swap has nothing to scan."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        index_capacity_bytes: int,
        throttler: Throttler,
        lazy_source: _Source | None,
        created: list[Path],
    ) -> None:
        self.base_offset = base_offset
        self.log_path, self.index_path, self.time_index_path = (
            directory / (segment_file_name(base_offset, suffix) + CLEANED_SUFFIX)
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
        )
        created.extend((self.log_path, self.index_path, self.time_index_path))
        self._throttler = throttler
        self._lazy_source = lazy_source
        self._index_interval_bytes = index_interval_bytes
        self._fd: int | None = None
        self._buffer = bytearray()
        self._flushed_bytes = 0
        self.size_bytes = 0
        self.next_offset = base_offset
        self.bytes_written = 0
        self.bytes_read = 0
        self._offset_index = OffsetIndex(
            self.index_path, base_offset, index_capacity_bytes, writable=True
        )
        self._time_index = TimeIndex(
            self.time_index_path, base_offset, index_capacity_bytes, writable=True
        )
        self._max_timestamp_ms = -1
        self._bytes_since_index_entry = 0
        self._last_batch_offset: int | None = None
        if lazy_source is None:
            self._open()

    def _open(self) -> int:
        self._fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        return self._fd

    def diverge(self) -> None:
        """The output stops being a copy of the lazy source: write what it was so far."""
        if self._fd is not None:
            return
        fd = self._open()
        source = self._lazy_source
        assert source is not None
        position = 0
        while position < self.size_bytes:
            chunk = source.pread(min(CLEANER_READ_BYTES, self.size_bytes - position), position)
            self._throttler.consume(len(chunk))
            self.bytes_read += len(chunk)
            write_all(fd, chunk, position)
            self._throttler.consume(len(chunk))
            self.bytes_written += len(chunk)
            position += len(chunk)
        self._flushed_bytes = self.size_bytes

    def add(
        self,
        data: bytes | memoryview,
        header: BatchHeader,
        max_timestamp_ms: int,
        *,
        same_as_source: bool,
    ) -> None:
        """Append one batch (``header`` gives its offsets)."""
        assert header.base_offset >= self.next_offset, "batches go in offset order"
        assert header.last_offset - self.base_offset <= RELATIVE_OFFSET_MAX
        if not same_as_source:
            self.diverge()
        if self._fd is not None:
            self._buffer += data
            if len(self._buffer) >= CLEANER_WRITE_BUFFER_BYTES:
                self._flush()
        position = self.size_bytes
        self._max_timestamp_ms = max(self._max_timestamp_ms, max_timestamp_ms)
        # The segment's rule, plus: the second batch is always indexed (a cleaned
        # segment is often an empty batch and one more; a lookup then skips the first).
        if (
            position > 0
            and (
                self._bytes_since_index_entry >= self._index_interval_bytes
                or not self._offset_index.entries
            )
            and not self._offset_index.is_full
        ):
            self._offset_index.append(header.base_offset, position)
            if self._time_index.free_entries > 1:
                self._time_index.maybe_append(self._max_timestamp_ms, header.base_offset)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += len(data)
        self._last_batch_offset = header.base_offset
        self.size_bytes += len(data)
        self.next_offset = header.next_offset

    def _flush(self) -> None:
        assert self._fd is not None
        if self._buffer:
            write_all(self._fd, self._buffer, self._flushed_bytes)
            self._throttler.consume(len(self._buffer))
            self.bytes_written += len(self._buffer)
            self._flushed_bytes += len(self._buffer)
            self._buffer.clear()

    def finish(self) -> bool:
        """Flush and fsync everything; True when a segment was written. An unchanged
        lazy source or an empty output leaves no file."""
        if self._fd is None or self.size_bytes == 0:
            self.abort()
            return False
        self._flush()
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        if self._last_batch_offset is not None:
            self._time_index.maybe_append(self._max_timestamp_ms, self._last_batch_offset)
        self._offset_index.close()  # trims to the entries and fsyncs
        self._time_index.close()
        return True

    def abort(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._offset_index.close_without_trim()
        self._time_index.close_without_trim()
        for path in (self.log_path, self.index_path, self.time_index_path):
            path.unlink(missing_ok=True)


class CleaningPlan:
    """One compaction pass over one log; see the module docstring. Made by
    :func:`prepare`, run by :meth:`build` (any thread), applied by
    ``PartitionLog.swap_cleaned`` or thrown away by :meth:`discard`."""

    def __init__(
        self,
        log: CleanableLog,
        *,
        now_ms: int,
        sources: list[_Source],
        first_dirty_offset: int,
        end_offset: int,
        checkpoint: CleanerCheckpoint,
        reads_from_log_start: bool,
        offset_map_keys_max: int,
    ) -> None:
        self.log = log
        """The log the plan is for (identity checks only)."""
        self.directory = log.directory
        self.truncations = log.truncations
        """The log's truncation count when planned: a truncation voids the plan."""
        self.now_ms = now_ms
        self.first_dirty_offset = first_dirty_offset
        self.end_offset = end_offset
        self._sources = sources
        self._checkpoint = checkpoint
        self._reads_from_log_start = reads_from_log_start
        self._offset_map_keys_max = offset_map_keys_max
        config = log.config
        self._delete_retention_ms = config.delete_retention_ms
        self._segment_bytes = config.segment_bytes
        self._index_interval_bytes = config.index_interval_bytes
        self._index_capacity_bytes = config.segment_index_bytes
        self._producer_last_offsets = {
            producer_id: entry.batches[-1].last_offset
            for producer_id, entry in log.producer_state.producers.items()
            if entry.batches
        }
        first = sources[0].base_offset if sources else end_offset
        self._transactions = CleanedTransactions(
            # The aborted transactions overlapping the plan, decided for good (the
            # marker below the high watermark; the plan ends at the last stable offset).
            (
                aborted
                for aborted in log.aborted_transactions(first, end_offset)
                if aborted.last_offset < log.high_watermark
            ),
            reads_from_log_start=reads_from_log_start,
        )
        self._state = _State.PREPARED
        self._created: list[Path] = []
        self.outputs: list[CleanedSegment] = []
        self.map_end_offset = first_dirty_offset
        self.tombstone_horizon_ms = -1
        """The earliest delete horizon of a tombstone or marker kept; -1 when none."""
        self.stats: CleaningStats | None = None
        self._cancelled = threading.Event()
        """Set from the appending thread, read by :meth:`build` on its worker thread."""

    def cancel(self) -> None:
        """Ask a build in flight to stop at its next read (any thread): the log is
        going away, so the plan will be discarded rather than swapped in."""
        self._cancelled.set()

    def _sleep_unless_cancelled(self, seconds: float) -> None:
        """The throttle's wait, cut short by :meth:`cancel` (the next read then stops)."""
        self._cancelled.wait(seconds)

    @property
    def last_marker_removed(self) -> int:
        """The highest offset of a transaction marker the built plan removes; -1: none."""
        return self._transactions.last_marker_removed

    @property
    def built(self) -> bool:
        return self._state is _State.BUILT

    @property
    def finished(self) -> bool:
        """Swapped in or discarded: nothing of the plan is left on disk or open."""
        return self._state in (_State.SWAPPED, _State.DISCARDED)

    def __repr__(self) -> str:
        return (
            f"CleaningPlan({self.directory.name}, dirty from {self.first_dirty_offset} to "
            f"{self.end_offset}, {len(self._sources)} segments, {self._state.value})"
        )

    # -- worker thread ------------------------------------------------------------

    def build(
        self,
        io_budget_bytes_per_s: float | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        sleep: Callable[[float], None] | None = None,
    ) -> CleaningStats:
        """Build the offset map and write the cleaned segments (``*.cleaned``, fsynced).
        Touches nothing but the plan, its duplicated descriptors and its new files, so
        it may run on any thread while the log goes on appending. Bytes read and
        written together stay within ``io_budget_bytes_per_s`` (None: no limit).
        Raises KafkaStorageError when a segment cannot be read or parsed, and
        CleaningCancelled once :meth:`cancel` was called (the caller discards the plan
        either way)."""
        assert self._state is _State.PREPARED, f"build of a {self._state.value} plan"
        self._state = _State.BUILDING
        started_ms = clock.monotonic_ms()
        throttler = Throttler(
            io_budget_bytes_per_s, clock=clock, sleep=sleep or self._sleep_unless_cancelled
        )
        counters = _Counters()
        try:
            offset_map = self._build_offset_map(throttler, counters)
            self._rewrite(offset_map, throttler, counters)
        except errors.KafkaError as e:
            self._state = _State.FAILED
            if isinstance(e, errors.KafkaStorageError):
                raise
            raise errors.KafkaStorageError(f"{self.directory}: cleaning failed: {e}") from e
        except OSError as e:
            self._state = _State.FAILED
            raise errors.KafkaStorageError(f"{self.directory}: cleaning failed: {e}") from e
        except BaseException:
            self._state = _State.FAILED
            raise
        finally:
            self._close_sources()
        self.stats = CleaningStats(
            first_dirty_offset=self.first_dirty_offset,
            map_end_offset=self.map_end_offset,
            keys=len(offset_map),
            segments_read=counters.segments_read,
            segments_written=len(self.outputs),
            bytes_read=counters.bytes_read,
            bytes_written=counters.bytes_written,
            records_examined=counters.records_examined,
            records_removed=counters.records_removed,
            tombstones_removed=counters.tombstones_removed,
            markers_removed=counters.markers_removed,
            batches_removed=counters.batches_removed,
            throttled_s=throttler.slept_s,
            elapsed_s=(clock.monotonic_ms() - started_ms) / 1000,
        )
        self._state = _State.BUILT
        return self.stats

    def _read_batches(
        self, source: _Source, throttler: Throttler, counters: _Counters
    ) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """(position, header, bytes) of each batch of ``source``, CRC-checked."""
        counters.segments_read += 1
        end = source.size_bytes
        position = 0
        chunk = b""
        chunk_start = 0
        while position < end:
            in_chunk = position - chunk_start
            if in_chunk + HEADER_BYTES > len(chunk):
                if self._cancelled.is_set():
                    raise CleaningCancelled(f"{self.directory}: cleaning cancelled")
                chunk = source.pread(min(CLEANER_READ_BYTES, end - position), position)
                throttler.consume(len(chunk))
                counters.bytes_read += len(chunk)
                chunk_start, in_chunk = position, 0
            try:
                header = parse_header(chunk, in_chunk)
            except errors.KafkaError as e:
                raise errors.KafkaStorageError(
                    f"{source.name}: bad batch at {position}: {e}"
                ) from None
            size = header.size_bytes
            if position + size > end:
                raise errors.KafkaStorageError(
                    f"{source.name}: batch at {position} of {size} bytes runs past {end}"
                )
            if in_chunk + size > len(chunk):
                chunk = source.pread(min(max(size, CLEANER_READ_BYTES), end - position), position)
                throttler.consume(len(chunk))
                counters.bytes_read += len(chunk)
                chunk_start, in_chunk = position, 0
            data = memoryview(chunk)[in_chunk : in_chunk + size]
            if not crc_is_valid(data, header):
                raise errors.KafkaStorageError(
                    f"{source.name}: CRC-32C mismatch in the batch at {position} "
                    f"(offset {header.base_offset})"
                )
            yield position, header, data
            position += size

    def _build_offset_map(self, throttler: Throttler, counters: _Counters) -> dict[bytes, int]:
        """key digest → last offset over the dirty range; sets the map end."""
        offset_map: dict[bytes, int] = {}
        first_dirty = self.first_dirty_offset
        keys_max = self._offset_map_keys_max
        self.map_end_offset = self.end_offset
        for source in self._sources:
            if source.end_offset <= first_dirty:
                continue
            for _, header, data in self._read_batches(source, throttler, counters):
                if header.next_offset <= first_dirty or header.is_control:
                    continue
                if self._transactions.is_aborted(header):
                    continue  # committed transactional records are mapped like any
                if offset_map and len(offset_map) + header.records_count > keys_max:
                    # Full: clean up to here; the next pass goes on from this batch.
                    self.map_end_offset = header.base_offset
                    return offset_map
                section = _records_section(header, data)
                _map_batch_keys(offset_map, section, header.records_count, header.base_offset)
        return offset_map

    def _groups(self) -> list[list[_Source]]:
        """Sources below the map end, in runs that fit one segment (Kafka's grouping:
        at most segment.bytes in all, relative offsets within an int32)."""
        groups: list[list[_Source]] = []
        size = 0
        for source in self._sources:
            if source.base_offset >= self.map_end_offset:
                break
            if groups and (
                size + source.size_bytes <= self._segment_bytes
                and source.end_offset - 1 - groups[-1][0].base_offset <= RELATIVE_OFFSET_MAX
            ):
                groups[-1].append(source)
                size += source.size_bytes
            else:
                groups.append([source])
                size = source.size_bytes
        return groups

    def _rewrite(
        self, offset_map: dict[bytes, int], throttler: Throttler, counters: _Counters
    ) -> None:
        horizon = -1 if self._reads_from_log_start else self._checkpoint.tombstone_horizon_ms
        counters.horizon_ms = horizon
        for group in self._groups():
            writer = _SegmentWriter(
                self.directory,
                group[0].base_offset,
                index_interval_bytes=self._index_interval_bytes,
                index_capacity_bytes=self._index_capacity_bytes,
                throttler=throttler,
                lazy_source=group[0] if len(group) == 1 else None,
                created=self._created,
            )
            try:
                self._clean_group(group, writer, offset_map, throttler, counters)
                written = writer.finish()
            except BaseException:
                writer.abort()
                raise
            counters.bytes_read += writer.bytes_read
            counters.bytes_written += writer.bytes_written
            if written:
                self._write_transaction_index(writer.base_offset, group)
                self.outputs.append(
                    CleanedSegment(
                        base_offset=writer.base_offset,
                        next_offset=writer.next_offset,
                        size_bytes=writer.size_bytes,
                        replaces=tuple(source.segment for source in group),
                    )
                )
        self.tombstone_horizon_ms = counters.horizon_ms

    def _write_transaction_index(self, base_offset: int, group: list[_Source]) -> None:
        """The new segment keeps the aborted-transaction entries of the segments it
        replaces whose markers it still holds, as ``<b>.txnindex.cleaned``: written
        whenever those segments had entries, even if none is left, so that the swap
        replaces their index in every case (a crash must neither bring back an entry
        of a removed marker nor lose one)."""
        entries = [entry for source in group for entry in source.segment.txn_index.entries]
        if not entries:
            return
        path = self.directory / (
            segment_file_name(base_offset, TRANSACTION_INDEX_SUFFIX) + CLEANED_SUFFIX
        )
        self._created.append(path)
        index = TransactionIndex(path)
        index.replace(self._transactions.index_entries(entries))
        index.sync()

    def _clean_group(
        self,
        group: list[_Source],
        writer: _SegmentWriter,
        offset_map: dict[bytes, int],
        throttler: Throttler,
        counters: _Counters,
    ) -> None:
        """Write the cleaned batches of ``group``. A dropped batch that turns out to be
        the group's last stays, emptied, so the new segment ends where the old ones
        did (an already empty one stays as it is)."""
        transactions = self._transactions
        dropped: tuple[BatchHeader, bytes] | None = None
        for source in group:
            for _, header, data in self._read_batches(source, throttler, counters):
                parked = header.is_control and is_parked_batch(header, data)
                if parked:
                    # Delayed delivery's parked records: kept as they are (their
                    # index points at them), and data of their producer's transaction.
                    action, cleaned, max_timestamp_ms = _Action.KEEP, b"", header.max_timestamp
                    transactions.written_data(header)
                else:
                    action, cleaned, max_timestamp_ms = self._clean_batch(
                        header, data, offset_map, counters
                    )
                if dropped is not None:
                    writer.diverge()  # the dropped batch was not the last after all
                    dropped = None
                if action is _Action.DROP:
                    counters.batches_removed += 1
                    dropped = (header, bytes(data) if header.records_count == 0 else b"")
                elif action is _Action.KEEP:
                    writer.add(data, header, header.max_timestamp, same_as_source=True)
                    if not parked:
                        transactions.written(header)
                else:
                    writer.add(cleaned, header, max_timestamp_ms, same_as_source=False)
                    transactions.written(parse_header(cleaned))
        if dropped is not None:
            header, original = dropped
            counters.batches_removed -= 1
            if original:
                writer.add(original, header, header.max_timestamp, same_as_source=True)
                transactions.written(header)
            else:
                # Emptied: no longer transactional nor a marker (an emptied marker
                # closes nothing on replay, as no data of its transaction is left).
                writer.add(_empty_batch(header), header, header.max_timestamp, same_as_source=False)

    def _clean_batch(
        self,
        header: BatchHeader,
        data: memoryview,
        offset_map: dict[bytes, int],
        counters: _Counters,
    ) -> tuple[_Action, bytes, int]:
        """(action, the rebuilt batch for REPLACE, its max timestamp)."""
        keep = (_Action.KEEP, b"", header.max_timestamp)
        if header.base_offset >= self.map_end_offset:
            return keep
        if header.is_control:
            return self._clean_marker(header, data, counters)
        producer_last = (
            header.producer_id >= 0
            and self._producer_last_offsets.get(header.producer_id) == header.last_offset
        )
        if header.records_count and self._transactions.is_aborted(header):
            counters.records_examined += header.records_count
            counters.records_removed += header.records_count
            if producer_last:
                return _Action.REPLACE, _empty_batch(header), header.max_timestamp
            return _Action.DROP, b"", header.max_timestamp
        if header.records_count == 0:
            # An empty batch kept by an earlier pass: still needed?
            return keep if producer_last else (_Action.DROP, b"", header.max_timestamp)
        section = _records_section(header, data)
        count = header.records_count
        base_timestamp = header.base_timestamp
        now_ms = self.now_ms
        # Tombstones kept by an earlier pass carry their delete horizon in the base
        # timestamp; once it has passed they go.
        has_horizon = bool(header.attributes & ATTR_DELETE_HORIZON)
        kept, tombstones_dropped, tombstones_kept = _select_records(
            section,
            count,
            header.base_offset,
            offset_map,
            drop_tombstones=has_horizon and now_ms >= base_timestamp,
        )
        counters.records_examined += count
        counters.records_removed += count - len(kept)
        counters.tombstones_removed += tombstones_dropped
        needs_horizon = tombstones_kept > 0 and not has_horizon
        if tombstones_kept and has_horizon:
            counters.note_horizon(base_timestamp)
        if len(kept) == count and not needs_horizon:
            return keep
        if not kept:
            if producer_last:
                return _Action.REPLACE, _empty_batch(header), header.max_timestamp
            return _Action.DROP, b"", header.max_timestamp
        attributes = header.attributes
        new_base_timestamp = base_timestamp
        if needs_horizon:
            new_base_timestamp = now_ms + self._delete_retention_ms
            attributes |= ATTR_DELETE_HORIZON
            counters.note_horizon(new_base_timestamp)
        parts: list[bytes] = []
        max_timestamp_ms: int | None = None
        for timestamp_delta, start, end in kept:
            timestamp_ms = base_timestamp + timestamp_delta
            if max_timestamp_ms is None or timestamp_ms > max_timestamp_ms:
                max_timestamp_ms = timestamp_ms
            if new_base_timestamp == base_timestamp:
                parts.append(section[start:end])
            else:
                parts.append(
                    _retimed_record(section, start, end, timestamp_ms - new_base_timestamp)
                )
        assert max_timestamp_ms is not None
        if header.attributes & ATTR_TIMESTAMP_TYPE:
            max_timestamp_ms = header.max_timestamp  # LogAppendTime: the broker's time
        payload = b"".join(parts)
        codec = header.compression
        if codec != Compression.NONE:
            payload = compress(codec, payload)
        cleaned = _encode_batch(
            header,
            attributes=attributes,
            base_timestamp_ms=new_base_timestamp,
            max_timestamp_ms=max_timestamp_ms,
            payload=payload,
            records_count=len(kept),
        )
        return _Action.REPLACE, cleaned, max_timestamp_ms

    def _clean_marker(
        self, header: BatchHeader, data: memoryview, counters: _Counters
    ) -> tuple[_Action, bytes, int]:
        """A control batch: kept, given its delete horizon, or removed (see
        ``cleaner_transactions``)."""
        fate = self._transactions.marker_fate(header, self.now_ms)
        if fate is MarkerFate.REMOVE:
            counters.markers_removed += 1
            self._transactions.removed_marker(header)
            return _Action.DROP, b"", header.max_timestamp
        if fate is MarkerFate.WAIT:
            counters.note_horizon(header.base_timestamp)
        elif fate is MarkerFate.SET_HORIZON:
            horizon_ms = self.now_ms + self._delete_retention_ms
            counters.note_horizon(horizon_ms)
            marked = _with_delete_horizon(header, data, horizon_ms)
            return _Action.REPLACE, marked, header.max_timestamp
        return _Action.KEEP, b"", header.max_timestamp

    def _close_sources(self) -> None:
        for source in self._sources:
            if source.fd >= 0:
                os.close(source.fd)
        self._sources = [
            _Source(s.segment, s.base_offset, s.end_offset, s.size_bytes, -1, s.name)
            for s in self._sources
        ]

    # -- appending thread ---------------------------------------------------------

    def discard(self) -> None:
        """Throw the plan away: close its descriptors, delete its files. Idempotent.
        Never while :meth:`build` runs."""
        assert self._state is not _State.BUILDING, "discard while the plan is being built"
        if self._state in (_State.DISCARDED, _State.SWAPPED):
            return
        if self._state is _State.PREPARED:
            self._close_sources()
        for path in self._created:  # each ``*.cleaned``, and the ``*.swap`` it may be now
            path.unlink(missing_ok=True)
            path.with_name(path.name.removesuffix(CLEANED_SUFFIX) + SWAP_SUFFIX).unlink(
                missing_ok=True
            )
        self._state = _State.DISCARDED
        if self.log.cleaning_plan is self:
            self.log.cleaning_plan = None

    def commit(self) -> None:
        """Rename every ``*.cleaned`` file to ``*.swap`` (each segment's .log last) and
        fsync the directory: from here a crash completes the swap. For
        ``PartitionLog.swap_cleaned``. On failure every file of the plan is deleted
        (the old segments are untouched) and KafkaStorageError raised."""
        assert self._state is _State.BUILT
        try:
            ours = {path.name for path in self._created}
            for name in os.listdir(self.directory):
                if name.endswith(CLEANED_SUFFIX) and name not in ours:
                    logger.warning("%s: deleting a stray %s", self.directory, name)
                    (self.directory / name).unlink(missing_ok=True)
            for cleaned in self.outputs:
                for suffix in (
                    INDEX_SUFFIX,
                    TIME_INDEX_SUFFIX,
                    TRANSACTION_INDEX_SUFFIX,
                    LOG_SUFFIX,
                ):
                    if (
                        suffix == TRANSACTION_INDEX_SUFFIX
                        and not cleaned.path(suffix, CLEANED_SUFFIX).exists()
                    ):
                        continue  # no aborted transaction in the segments it replaces
                    os.rename(
                        cleaned.path(suffix, CLEANED_SUFFIX), cleaned.path(suffix, SWAP_SUFFIX)
                    )
            fsync_directory(self.directory)
        except OSError as e:
            self._state = _State.FAILED
            self.discard()
            raise errors.KafkaStorageError(f"{self.directory}: cleaner commit failed: {e}") from e

    def install(self, cleaned: CleanedSegment) -> None:
        """Rename one committed segment's ``*.swap`` files into place, the .log last.
        The segments it replaces must be renamed away first."""
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TRANSACTION_INDEX_SUFFIX, LOG_SUFFIX):
            swap = cleaned.path(suffix, SWAP_SUFFIX)
            if suffix != LOG_SUFFIX and not swap.exists():
                continue  # the segment rebuilds a missing index; no aborted transaction
            os.rename(swap, cleaned.path(suffix, ""))

    def finish(self) -> None:
        """After the swap: remember how far the log is clean."""
        self._state = _State.SWAPPED
        write_cleaner_checkpoint(
            self.directory, CleanerCheckpoint(self.map_end_offset, self.tombstone_horizon_ms)
        )
        if self.log.cleaning_plan is self:
            self.log.cleaning_plan = None


class _Counters:
    """Tallies of one build."""

    def __init__(self) -> None:
        self.segments_read = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.records_examined = 0
        self.records_removed = 0
        self.tombstones_removed = 0
        self.markers_removed = 0
        self.batches_removed = 0
        self.horizon_ms = -1

    def note_horizon(self, horizon_ms: int) -> None:
        if self.horizon_ms < 0 or horizon_ms < self.horizon_ms:
            self.horizon_ms = horizon_ms


def prepare(
    log: CleanableLog,
    now_ms: int,
    *,
    offset_map_keys_max: int = OFFSET_MAP_KEYS_MAX,
    plan_segments_max: int = PLAN_SEGMENTS_MAX,
) -> CleaningPlan | None:
    """Plan a pass over ``log`` at wall-clock ``now_ms`` (on the appending thread):
    pick the cleanable segments, duplicate their descriptors, note each idempotent
    producer's last batch. None when the log is not compacted or there is nothing to
    do (no dirty segment and no tombstone due)."""
    assert log.cleaning_plan is None, f"{log.directory}: another cleaning plan is in flight"
    assert offset_map_keys_max > 0 and plan_segments_max > 0
    if log.closed or not log.config.compact:
        return None
    span = cleanable_range(log, now_ms)
    if not span.segments or (span.dirty_bytes == 0 and not span.tombstones_due(now_ms)):
        return None
    first_dirty = span.first_dirty_offset
    start = 0
    if len(span.segments) > plan_segments_max:
        holding_first_dirty = next(
            (i for i, boundary in enumerate(span.boundaries) if boundary > first_dirty), 0
        )
        if holding_first_dirty >= plan_segments_max:
            start = holding_first_dirty
    window = range(start, min(start + plan_segments_max, len(span.segments)))
    sources = []
    try:
        for i in window:
            segment = span.segments[i]
            sources.append(
                _Source(
                    segment=segment,
                    base_offset=segment.base_offset,
                    end_offset=span.boundaries[i],
                    size_bytes=segment.size_bytes,
                    fd=os.dup(segment.file.fileno()),
                    name=str(segment.log_path),
                )
            )
    except OSError as e:
        for source in sources:
            os.close(source.fd)
        raise errors.KafkaStorageError(f"{log.directory}: cannot plan a cleaning: {e}") from e
    plan = CleaningPlan(
        log,
        now_ms=now_ms,
        sources=sources,
        first_dirty_offset=first_dirty,
        end_offset=span.boundaries[window[-1]],
        checkpoint=span.checkpoint,
        reads_from_log_start=start == 0,
        offset_map_keys_max=offset_map_keys_max,
    )
    log.cleaning_plan = plan
    return plan


# -- recovery -------------------------------------------------------------------------


def _next_offset_of(path: Path) -> int:
    """One past the last offset of a complete segment file, from its batch heads."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        position = 0
        next_offset: int | None = None
        while position < size:
            head = os.pread(fd, HEADER_BYTES, position)
            try:
                header = parse_header(head)
            except errors.KafkaError as e:
                raise errors.KafkaStorageError(f"{path}: bad batch at {position}: {e}") from None
            next_offset = header.next_offset
            position += header.size_bytes
        if next_offset is None or position != size:
            raise errors.KafkaStorageError(f"{path}: not a complete cleaned segment")
        return next_offset
    finally:
        os.close(fd)


def _base_of(name: str) -> int | None:
    """The base offset of a segment's file name (``.log``, ``.index``, ``.timeindex``,
    ``.txnindex``), else None."""
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TRANSACTION_INDEX_SUFFIX):
        base = parse_segment_file_name(name, suffix)
        if base is not None:
            return base
    return None


def finish_interrupted_swap(directory: Path) -> None:
    """Roll back or complete a swap a crash interrupted (see the module docstring).
    Called by ``PartitionLog.open`` before it lists the segments."""
    names = os.listdir(directory)
    cleaned = [name for name in names if name.endswith(CLEANED_SUFFIX)]
    swaps = [name for name in names if name.endswith(SWAP_SUFFIX)]
    if not cleaned and not swaps:
        return
    uncommitted = any(
        parse_segment_file_name(name.removesuffix(CLEANED_SUFFIX), LOG_SUFFIX) is not None
        for name in cleaned
    )
    if uncommitted:
        logger.warning(
            "%s: a cleaning was interrupted before it committed; rolling back %d files",
            directory,
            len(cleaned) + len(swaps),
        )
        for name in cleaned + swaps:
            (directory / name).unlink(missing_ok=True)
        fsync_directory(directory)
        return
    for name in cleaned:
        (directory / name).unlink(missing_ok=True)
    log_swaps = sorted(
        (base, name)
        for name in swaps
        if (base := parse_segment_file_name(name.removesuffix(SWAP_SUFFIX), LOG_SUFFIX)) is not None
    )
    for base, name in log_swaps:
        next_offset = _next_offset_of(directory / name)
        replaced = sorted(
            other
            for other in os.listdir(directory)
            if (other_base := _base_of(other)) is not None and base <= other_base < next_offset
        )
        logger.warning(
            "%s: completing an interrupted cleaning: %s replaces %s",
            directory,
            name,
            ", ".join(replaced) or "nothing",
        )
        # The aborted-transaction index cannot be rebuilt from the segment alone: its
        # .swap wins; without one, <b>.txnindex is the new segment's, installed before
        # the crash (an old one at b would have its .swap beside it).
        transaction_index = segment_file_name(base, TRANSACTION_INDEX_SUFFIX)
        swapped_index = directory / (transaction_index + SWAP_SUFFIX)
        for other in replaced:
            if other != transaction_index or swapped_index.exists():
                (directory / other).unlink()
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            (directory / (segment_file_name(base, suffix) + SWAP_SUFFIX)).unlink(missing_ok=True)
        if swapped_index.exists():
            os.rename(swapped_index, directory / transaction_index)
        os.rename(directory / name, directory / segment_file_name(base, LOG_SUFFIX))
    for name in os.listdir(directory):
        if name.endswith(SWAP_SUFFIX):
            (directory / name).unlink(missing_ok=True)
    fsync_directory(directory)
