"""The pure half of a share consumer (KIP-932): what a ShareFetch answer hands the
application, how per-record decisions travel back, and the share session's epochs.

No I/O here; :mod:`sluice.client.share_consumer` drives these with real requests.

A ShareFetch answer gives each partition whole record batches plus ``acquired_records``
ranges ``[first_offset, last_offset, delivery_count]``. Only records inside an acquired
range belong to this member; the rest of a batch was acquired by someone else (or not
at all) and is skipped. An offset inside an acquired range that holds no record (a
control batch, a gap left by compaction) must still be acknowledged, with type GAP,
or the broker keeps it locked until the acquisition lock times out::

    batches     [0 1 2 3][4 5 6 7](ctrl 8)[9 10 11]
    acquired       [2 ─────────────────── 9]   delivery 1
    handed out      2 3 4 5 6 7            9
    GAP                          8

Acknowledgements go back as batches of contiguous offsets: ``[first, last]`` with one
type per offset, or a single type that covers the whole range.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from sluice.client.consumer_api import ConsumerRecord
from sluice.protocol.records.builder import decode_batches

INITIAL_EPOCH = 0
"""The share session epoch that opens a session (ShareFetch only)."""

FINAL_EPOCH = -1
"""The share session epoch that closes a session (ShareFetch or ShareAcknowledge)."""

EPOCH_MAX = 2**31 - 1


class AcknowledgeType(IntEnum):
    """What the application decided about a delivered record (ShareAcknowledge's
    acknowledge types)."""

    GAP = 0
    """No record at this offset (sent by the client itself, never by the application)."""
    ACCEPT = 1
    """Processed: never delivered again."""
    RELEASE = 2
    """Not processed: delivered again (to any member), its delivery count raised."""
    REJECT = 3
    """Unprocessable: never delivered again (archived)."""
    RENEW = 4
    """Still being processed: extend the acquisition lock (ShareFetch/ShareAcknowledge
    v2 and later)."""


@dataclass(frozen=True, slots=True)
class ShareConsumerRecord(ConsumerRecord):
    """A record delivered to a share consumer: a :class:`ConsumerRecord` plus how many
    times it has been delivered (1 the first time; more after releases and lock
    expiries)."""

    delivery_count: int = 1


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Offsets ``first_offset..last_offset`` (inclusive) acquired by this member."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AcquiredPartition:
    """What one partition of a ShareFetch answer gives the application, and the offsets
    the client itself must acknowledge as GAP."""

    records: tuple[ShareConsumerRecord, ...]
    gaps: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AcknowledgementBatch:
    """Contiguous offsets ``first_offset..last_offset`` and their acknowledge types:
    one per offset, or a single type for the whole range."""

    first_offset: int
    last_offset: int
    types: tuple[AcknowledgeType, ...]

    def as_fields(self) -> dict[str, object]:
        """The batch as request fields (ShareFetch and ShareAcknowledge alike)."""
        return {
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "acknowledge_types": [int(t) for t in self.types],
        }


def acquired_partition(
    topic: str, partition: int, data: bytes, ranges: Sequence[AcquiredRange]
) -> AcquiredPartition:
    """The records of ``data`` (a partition's record batches) inside ``ranges``, each with
    its range's delivery count, and the acquired offsets that hold no record."""
    if not ranges:
        return AcquiredPartition((), ())
    ordered = sorted(ranges, key=lambda r: r.first_offset)
    found: dict[int, ShareConsumerRecord] = {}
    for batch in decode_batches(data):
        header = batch.header
        if header.is_control or not _overlaps(ordered, header.base_offset, header.last_offset):
            continue
        timestamp_type = int(header.timestamp_type)
        for read in batch.records:
            acquired = _range_of(ordered, read.offset)
            if acquired is None:
                continue
            found[read.offset] = ShareConsumerRecord(
                topic,
                partition,
                read.offset,
                read.timestamp_ms,
                read.key,
                read.value,
                read.headers,
                timestamp_type,
                acquired.delivery_count,
            )
    records: list[ShareConsumerRecord] = []
    gaps: list[int] = []
    for acquired in ordered:
        for offset in range(acquired.first_offset, acquired.last_offset + 1):
            record = found.get(offset)
            if record is None:
                gaps.append(offset)
            else:
                records.append(record)
    return AcquiredPartition(tuple(records), tuple(gaps))


def _overlaps(ranges: Sequence[AcquiredRange], first: int, last: int) -> bool:
    return any(r.first_offset <= last and first <= r.last_offset for r in ranges)


def _range_of(ranges: Sequence[AcquiredRange], offset: int) -> AcquiredRange | None:
    for acquired in ranges:
        if acquired.first_offset <= offset <= acquired.last_offset:
            return acquired
    return None


def acknowledgement_batches(
    decisions: Mapping[int, AcknowledgeType],
) -> list[AcknowledgementBatch]:
    """Offset → decision as batches of contiguous offsets, in offset order. A batch whose
    offsets all have the same type carries that type once."""
    batches: list[AcknowledgementBatch] = []
    run: list[tuple[int, AcknowledgeType]] = []
    for offset in sorted(decisions):
        if run and offset != run[-1][0] + 1:
            batches.append(_batch(run))
            run = []
        run.append((offset, decisions[offset]))
    if run:
        batches.append(_batch(run))
    return batches


def _batch(run: Sequence[tuple[int, AcknowledgeType]]) -> AcknowledgementBatch:
    types = tuple(t for _, t in run)
    if all(t == types[0] for t in types):
        types = types[:1]
    return AcknowledgementBatch(run[0][0], run[-1][0], types)


def has_renew(batches: Iterable[AcknowledgementBatch]) -> bool:
    """True when any batch renews a lock (the request must then say so, v2+)."""
    return any(AcknowledgeType.RENEW in batch.types for batch in batches)


def next_epoch(epoch: int) -> int:
    """The share session epoch after ``epoch`` (Kafka's rule): 0 opens a session, each
    request then counts up, wrapping from 2**31-1 to 1 (never back to 0, which would
    open a new session); after the final epoch -1 comes -1 again."""
    if epoch < INITIAL_EPOCH:
        return FINAL_EPOCH
    if epoch == EPOCH_MAX:
        return 1
    return epoch + 1
