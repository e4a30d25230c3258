"""The produce-time walk over a batch's records: framing and count, without decoding.

A produced batch is stored as it arrives, so what its records section holds is what every
consumer later reads. Before the broker appends a batch it walks the section once, by the
records' length fields::

    section := record × records_count        nothing before, between or after them
    record  := length varint | body           length >= 6, the smallest body

    ┌len┬──── body ────┐┌len┬─ body ─┐ … ┌len┬──── body ────┐
    start ──────────────────────────────────────────────────▶ end: the last step must
                                                              land exactly here, after
                                                              exactly records_count steps

Nothing inside a body is decoded (no key, value or header objects are made), except
where a rule needs one field:

- on a compacted topic, the key length: a record without a key is refused, as Kafka
  does (compaction could never remove it);
- in a compressed batch, the offset delta, which must be the record's index. Kafka
  rewrites a compressed batch whose deltas are not 0, 1, 2, …; Sluice stores batches
  untouched, so it refuses such a batch instead. (Kafka does not look at the deltas of
  uncompressed batches, and neither does Sluice.)

Two forms: :func:`tile_records` steps over a contiguous, uncompressed section using the
length fields alone (the hot path: every uncompressed produce goes through it);
:class:`RecordsWalker` is fed a section in chunks (the decompressed output of a
compressed batch, as it comes), so a batch is checked without holding its whole
decompressed section, and it reads the fields above when asked to.

Every defect raises ``InvalidRecord``, the error Kafka answers a produce with when a
batch's records cannot be read back (``InvalidRecordException``).
"""

from __future__ import annotations

from itertools import repeat
from typing import Final

from kio.serial.errors import DecodeError
from kio.serial.readers import read_signed_varint, read_signed_varlong

from sluice.common import errors
from sluice.protocol.records.record import RECORD_BYTES_MIN

__all__ = [
    "RECORD_BODY_BYTES_MIN",
    "RECORD_PREFIX_BYTES_MAX",
    "RecordsWalker",
    "tile_records",
]

RECORD_BODY_BYTES_MIN: Final = RECORD_BYTES_MIN - 1
"""Smallest record body: attributes, timestamp delta, offset delta, key length, value
length and header count, one byte each."""

RECORD_PREFIX_BYTES_MAX: Final = 26
"""Most bytes from a record's start through its key length field: length varint (5),
attributes (1), timestamp delta varlong (10), offset delta varint (5), key length (5)."""

_READ_ERRORS: Final = (IndexError, ValueError, DecodeError)
"""What reading a varint past the end, or one longer than allowed, raises."""


def _one_byte_step(first: int) -> int:
    """The step over a record whose length is the one-byte varint ``first``: 1 + the
    length, or 0 when ``first`` is not such a varint of a legal length."""
    if first >= 0x80 or first & 1:  # more bytes follow, or a negative length
        return 0
    size = first >> 1
    return 1 + size if size >= RECORD_BODY_BYTES_MIN else 0


def _two_byte_step(first: int) -> int:
    """The part of the step over a record with a two-byte length varint that the first
    byte gives: 2 + its low six value bits (the second byte adds ``second << 6``), or 0
    when ``first`` does not start a two-byte varint of a non-negative length. Lengths of
    two bytes are 64..8191, always at least the smallest body."""
    if first < 0x80 or first & 1:
        return 0
    return 2 + ((first & 0x7F) >> 1)


_ONE_BYTE_STEPS: Final = tuple(_one_byte_step(first) for first in range(256))
_TWO_BYTE_STEPS: Final = tuple(_two_byte_step(first) for first in range(256))
_SINGLE_BYTES: Final = tuple(bytes((value,)) for value in range(256))
_RUN_RECORDS_MAX: Final = 256
"""Records one slice of a run covers; a longer run takes several. Bounds the work a run
check wastes when records of different sizes only happen to have one neighbour alike."""
_SCALAR_STEPS_RECORDS: Final = 32
"""Records stepped over one by one between two looks for a run."""


def _bad_length(size: int) -> errors.KafkaError:
    return errors.InvalidRecord(
        f"a record says its body is {size} bytes; the smallest record body is "
        f"{RECORD_BODY_BYTES_MIN}"
    )


def tile_records(data: bytes, position: int, count: int) -> int:
    """Step over ``count`` records of ``data`` from ``position`` by their length fields
    alone and return the position after the last one; the caller checks that it is the
    section's end. ``data`` must end where the section ends: a record that runs past it
    raises ``InvalidRecord``, as does a negative or too small length.

    Speed: this runs for every uncompressed batch produced.

    - Runs of records of one size (fixed-size messages; a producer's batch changes size
      only where the offset delta grows a byte, at record 64) are checked in C: when the
      next record starts with the same length bytes, the first (and second) length byte
      of every record of the run is sliced out at once (``data[start:stop:size]``) and
      the run ends at the first byte that differs (``lstrip``). This is exact: a record
      that starts with the same length bytes has the same size, so the next one starts
      where the slice looks.
    - Otherwise records are stepped over one by one, ``_SCALAR_STEPS_RECORDS`` at a time
      before the next look for a run: records of 6-63 bytes have a one-byte length and
      records of 64-8191 bytes a two-byte one, each stepped over with one table lookup
      (and a shift for two bytes); longer lengths by kio's native varint reader. A
      position past the end is caught by the next index (IndexError), so the steps do no
      bounds check of their own; the caller's final position check catches a last record
      that overruns.
    """
    end = len(data)
    remaining = count
    try:
        while remaining > _SCALAR_STEPS_RECORDS:
            records, size = _run_at(data, position, remaining, end)
            if records:
                position += size
                remaining -= records
                continue
            position = _step(data, position, _SCALAR_STEPS_RECORDS)
            remaining -= _SCALAR_STEPS_RECORDS
        position = _step(data, position, remaining)
    except _READ_ERRORS:
        raise errors.InvalidRecord(
            "the batch's records end before its records_count is reached (a record's "
            "length runs past the end of the batch)"
        ) from None
    return position


_NO_RUN: Final = (0, 0)


def _run_at(data: bytes, position: int, remaining: int, end: int) -> tuple[int, int]:
    """(records, bytes) of the run of records of one size starting at ``position``, at
    most ``remaining`` and ``_RUN_RECORDS_MAX`` records, all within ``end``; ``_NO_RUN``
    unless the next record starts with the same length bytes as this one."""
    first = data[position]
    step = _ONE_BYTE_STEPS[first]
    if step:
        following = position + step
        if following >= end or data[following] != first:
            return _NO_RUN
        limit = min(remaining, (end - position) // step, _RUN_RECORDS_MAX)
        starts = data[position : position + limit * step : step]
        records = limit - len(starts.lstrip(_SINGLE_BYTES[first]))
        return records, records * step
    step = _TWO_BYTE_STEPS[first]
    second = data[position + 1]
    if not step or second >= 0x80:
        return _NO_RUN
    step += second << 6
    following = position + step
    if following + 1 >= end or data[following] != first or data[following + 1] != second:
        return _NO_RUN
    limit = min(remaining, (end - position) // step, _RUN_RECORDS_MAX)
    stop = position + limit * step
    unlike = max(
        len(data[position:stop:step].lstrip(_SINGLE_BYTES[first])),
        len(data[position + 1 : stop + 1 : step].lstrip(_SINGLE_BYTES[second])),
    )
    return limit - unlike, (limit - unlike) * step


def _step(data: bytes, position: int, count: int) -> int:
    """Step over ``count`` records one by one; see :func:`tile_records`."""
    one_byte_steps = _ONE_BYTE_STEPS
    two_byte_steps = _TWO_BYTE_STEPS
    for _ in repeat(None, count):
        first = data[position]
        step = one_byte_steps[first]
        if step:
            position += step
            continue
        second = data[position + 1]
        step = two_byte_steps[first]
        if step and second < 0x80:
            position += step + (second << 6)
            continue
        size, width = read_signed_varint(data, position)
        if size < RECORD_BODY_BYTES_MIN:
            raise _bad_length(size)
        position += width + size
    return position


class RecordsWalker:
    """Checks a records section fed in chunks: that it holds exactly ``count`` records
    whose lengths tile it, and, when asked, each record's offset delta and key.

    Feed every chunk with :meth:`feed`, then call :meth:`finish`. Memory stays at one
    chunk plus the few bytes of a record start cut by a chunk's end: the body of a
    record that continues into later chunks is skipped, never gathered.
    """

    def __init__(
        self,
        count: int,
        *,
        check_offset_deltas: bool = False,
        keys_required: bool = False,
        keyless_indexes_max: int | None = None,
    ) -> None:
        self.count = count
        """Records the batch header declares."""
        self.records_walked = 0
        self.keyless_record_indexes: list[int] = []
        """Indexes of records without a key, the first ``keyless_indexes_max`` of them
        (only when ``keys_required``)."""
        self.keyless_records = 0
        """How many records have no key (only counted when ``keys_required``)."""
        self.keyless_indexes_max = count if keyless_indexes_max is None else keyless_indexes_max
        self._check_offset_deltas = check_offset_deltas
        self._keys_required = keys_required
        self._reads_fields = check_offset_deltas or keys_required
        self._skip_bytes = 0
        """Bytes of the current record's body still to come in later chunks."""
        self._carry = b""
        """The start of a record cut by the end of the previous chunk."""
        self._section_bytes = 0

    def feed(self, chunk: bytes) -> None:
        """Walk the next chunk of the section. Raises ``InvalidRecord`` as soon as the
        section cannot be right."""
        if not chunk:
            return
        self._section_bytes += len(chunk)
        if self._skip_bytes:
            if len(chunk) <= self._skip_bytes:
                self._skip_bytes -= len(chunk)
                return
            chunk = chunk[self._skip_bytes :]
            self._skip_bytes = 0
        if self._carry:
            chunk = self._carry + chunk
            self._carry = b""
        self._walk_chunk(chunk, final=False)

    def finish(self) -> None:
        """The section has ended: raise ``InvalidRecord`` unless it held exactly
        ``count`` whole records."""
        if self._carry:
            carry, self._carry = self._carry, b""
            self._walk_chunk(carry, final=True)
        if self._skip_bytes or self.records_walked < self.count:
            raise errors.InvalidRecord(
                f"the batch declares {self.count} records but its {self._section_bytes} "
                f"bytes of records end inside record {self.records_walked}"
            )

    def _walk_chunk(self, data: bytes, *, final: bool) -> None:
        if self.records_walked == self.count:
            raise self._bytes_after_last_record()
        try:
            position = self._walk(data, final)
        except _READ_ERRORS:
            raise errors.InvalidRecord(
                f"record {self.records_walked} of the batch is cut short or has a varint "
                "longer than allowed"
            ) from None
        end = len(data)
        if position < end and not self._skip_bytes:
            if self.records_walked == self.count:
                raise self._bytes_after_last_record()
            self._carry = data[position:]  # fewer than RECORD_PREFIX_BYTES_MAX bytes

    def _bytes_after_last_record(self) -> errors.KafkaError:
        return errors.InvalidRecord(
            f"the batch declares {self.count} records but its records section holds more "
            "bytes after the last of them"
        )

    def _walk(self, data: bytes, final: bool) -> int:
        """Walk whole record starts in ``data``; return where the walk stopped (the end
        of ``data`` when a record's body continues past it: ``_skip_bytes`` then says
        how much of it is still to come). Without ``final``, stops before a record
        start with fewer than RECORD_PREFIX_BYTES_MAX bytes left, to be carried over."""
        end = len(data)
        index = self.records_walked
        count = self.count
        reads_fields = self._reads_fields
        check_offset_deltas = self._check_offset_deltas
        keys_required = self._keys_required
        position = 0
        while index < count:
            if not final and end - position < RECORD_PREFIX_BYTES_MAX:
                break
            first = data[position]
            if first < 0x80:
                size = (first >> 1) ^ -(first & 1)
                body = position + 1
            else:
                size, width = read_signed_varint(data, position)
                body = position + width
            if size < RECORD_BODY_BYTES_MIN:
                self.records_walked = index
                raise _bad_length(size)
            record_end = body + size
            if reads_fields:
                field = body + 1  # attributes: unused
                if data[field] < 0x80:  # timestamp delta
                    field += 1
                else:
                    field += read_signed_varlong(data, field)[1]
                first = data[field]
                if first < 0x80:
                    offset_delta = (first >> 1) ^ -(first & 1)
                    field += 1
                else:
                    offset_delta, width = read_signed_varint(data, field)
                    field += width
                if check_offset_deltas and offset_delta != index:
                    self.records_walked = index
                    raise errors.InvalidRecord(
                        f"record {index} of a compressed batch has offset delta "
                        f"{offset_delta}; the deltas must be 0, 1, 2, … in order"
                    )
                if keys_required:
                    first = data[field]
                    if first < 0x80:
                        key_size = (first >> 1) ^ -(first & 1)
                        field += 1
                    else:
                        key_size, width = read_signed_varint(data, field)
                        field += width
                    if key_size < 0:
                        if len(self.keyless_record_indexes) < self.keyless_indexes_max:
                            self.keyless_record_indexes.append(index)
                        self.keyless_records += 1
                if field > record_end:
                    self.records_walked = index
                    raise errors.InvalidRecord(
                        f"record {index}'s fields run past the {size} bytes its length gives"
                    )
            index += 1
            if record_end > end:
                self._skip_bytes = record_end - end
                position = end
                break
            position = record_end
        self.records_walked = index
        return position
