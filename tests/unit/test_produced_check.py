"""The produce-time check of a batch's records: the length walk, the chunked walker,
bounded streamed decompression, and the whole check as the broker runs it.

Decoders are fed every split of their input: the walker must give the
same verdict whether a section arrives whole, in two pieces cut anywhere, or byte by
byte.
"""

from __future__ import annotations

import struct
import time
import zlib

import cramjam
import crc32c
import pytest

from sluice.common import errors
from sluice.common.limits import PRODUCED_RECORDS_EXPANSION_MAX, RECORD_ERRORS_PER_PARTITION_MAX
from sluice.protocol.records import (
    HEADER_BYTES,
    Compression,
    Record,
    RecordInput,
    build_batch,
    compress,
    encode_records,
    parse_header,
    validate_produced,
)
from sluice.protocol.records.compression import DECOMPRESSED_CHUNK_BYTES, iter_decompressed
from sluice.protocol.records.produced import ProducedRecordsCheck, decompressed_bytes_max
from sluice.protocol.records.walk import RecordsWalker, tile_records

CODECS = list(Compression)
COMPRESSED = CODECS[1:]
MAX_MESSAGE_BYTES = 1_048_588


def section_of(value_sizes: list[int], keyed: bool = True) -> bytes:
    """An uncompressed records section: one record per size, offset deltas 0, 1, 2…"""
    return encode_records(
        Record(index, 0, b"k" if keyed else None, bytes(size), ())
        for index, size in enumerate(value_sizes)
    )


# Lengths of one, two and three bytes, records larger than a decompressed chunk.
VALUE_SIZES = [0, 1, 50, 57, 58, 63, 64, 100, 1000, 8185, 8186, 20_000, 300_000, 0, 5]


def batch_around(
    section: bytes, count: int, codec: Compression = Compression.NONE, payload: bytes | None = None
) -> bytes:
    """A batch declaring ``count`` records whose records section is ``section``
    compressed with ``codec`` (or exactly ``payload``), with a valid CRC."""
    body = compress(codec, section) if payload is None else payload
    batch = bytearray(
        struct.pack(
            ">qiibIhiqqqhii",
            0,
            HEADER_BYTES - 12 + len(body),
            -1,
            2,
            0,
            int(codec),
            count - 1,
            0,
            0,
            -1,
            -1,
            -1,
            count,
        )
        + body
    )
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def check(batch: bytes, *, keys_required: bool = False, max_message_bytes: int = 1 << 30):
    """Validate the header as the broker does, then run the records check to its end."""
    header = validate_produced(batch, max_message_bytes)
    records_check = ProducedRecordsCheck(
        batch, header, max_message_bytes=max_message_bytes, keys_required=keys_required
    )
    assert records_check.advance()
    return records_check


# -- tile_records: the uncompressed hot path --------------------------------------------


def test_tiling_steps_over_one_two_and_three_byte_lengths() -> None:
    section = section_of(VALUE_SIZES)
    data = b"\xaa" * 9 + section
    assert tile_records(data, 9, len(VALUE_SIZES)) == len(data)


@pytest.mark.parametrize(
    ("length_field", "why"),
    [
        (b"\x01", "negative (-1)"),
        (b"\x0a", "5 bytes, less than the smallest body"),
        (b"\x81\x01", "negative, two bytes"),
        (b"\xff\xff\xff\xff\x0f", "most negative int32"),
        (b"\x80\x80\x80\x80\x80\x01", "varint longer than five bytes"),
    ],
)
def test_tiling_refuses_impossible_lengths(length_field: bytes, why: str) -> None:
    data = section_of([10]) + length_field + bytes(100)
    with pytest.raises(errors.InvalidRecord):
        tile_records(data, 0, 2)


def test_tiling_refuses_a_record_running_past_the_end() -> None:
    section = section_of([10, 10])
    with pytest.raises(errors.InvalidRecord):
        tile_records(section[:-1], 0, 3)
    # The last record overrunning is seen by the caller: the end is not the section's.
    assert tile_records(section[:-1], 0, 2) == len(section)


# -- RecordsWalker: every split -----------------------------------------------------------


def walk_in_pieces(section: bytes, count: int, cuts: list[int], **options: bool) -> RecordsWalker:
    walker = RecordsWalker(count, **options)
    previous = 0
    for cut in [*cuts, len(section)]:
        walker.feed(section[previous:cut])
        previous = cut
    walker.finish()
    return walker


@pytest.mark.parametrize("options", [{}, {"check_offset_deltas": True, "keys_required": True}])
def test_walker_gives_one_verdict_for_every_split(options: dict[str, bool]) -> None:
    sizes = [0, 1, 63, 64, 200, 8186, 0, 3]
    section = encode_records(
        Record(index, 1000 * index, None if index % 3 else b"key", bytes(size), ())
        for index, size in enumerate(sizes)
    )
    count = len(sizes)
    keyless = [1, 2, 4, 5, 7] if options else []
    for cut in range(len(section) + 1):
        walker = walk_in_pieces(section, count, [cut], **options)
        assert walker.keyless_record_indexes == keyless
    assert walk_in_pieces(section, count, list(range(len(section))), **options).records_walked == 8
    for cut in range(len(section) + 1):  # one record too few or too many: refused
        with pytest.raises(errors.InvalidRecord):
            walk_in_pieces(section, count + 1, [cut], **options)
        with pytest.raises(errors.InvalidRecord):
            walk_in_pieces(section, count - 1, [cut], **options)
        with pytest.raises(errors.InvalidRecord):
            walk_in_pieces(section + b"\x00", count, [cut], **options)


def test_walker_checks_offset_deltas_only_when_asked() -> None:
    section = encode_records(Record(delta, 0, b"k", b"v", ()) for delta in (0, 1, 1, 3))
    walk_in_pieces(section, 4, [])
    with pytest.raises(errors.InvalidRecord, match="offset delta 1"):
        walk_in_pieces(section, 4, [], check_offset_deltas=True)


def test_walker_refuses_fields_running_past_their_record() -> None:
    # A 6-byte body whose timestamp delta claims more bytes than the record has.
    section = b"\x0c" + b"\x00" + b"\x80\x80\x80\x80\x01" + bytes(20)
    with pytest.raises(errors.InvalidRecord):
        walk_in_pieces(section, 1, [], check_offset_deltas=True)


def test_walker_keeps_at_most_the_asked_keyless_indexes_but_counts_all() -> None:
    section = section_of([1] * 50, keyed=False)
    walker = RecordsWalker(50, keys_required=True, keyless_indexes_max=3)
    walker.feed(section)
    walker.finish()
    assert (walker.keyless_records, walker.keyless_record_indexes) == (50, [0, 1, 2])


# -- iter_decompressed -----------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_streamed_decompression_round_trips_in_bounded_chunks(codec: Compression) -> None:
    payload = bytes(range(256)) * 4000 + bytes(3_000_000)
    chunks = list(iter_decompressed(codec, compress(codec, payload), len(payload)))
    assert b"".join(chunks) == payload
    if codec in (Compression.GZIP, Compression.ZSTD):
        assert max(map(len, chunks)) <= DECOMPRESSED_CHUNK_BYTES


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_streamed_decompression_stops_at_the_limit(codec: Compression) -> None:
    payload = bytes(2_000_000)
    compressed = compress(codec, payload)
    with pytest.raises(errors.MessageTooLarge):
        for _ in iter_decompressed(codec, compressed, 1_999_999):
            pass


def test_a_gzip_bomb_is_refused_before_it_is_inflated() -> None:
    """512 concatenated gzip members of 1 MiB of zeros: 0.5 MB that inflate to 512 MiB.
    The output stops one chunk past the limit."""
    bomb = zlib.compress(bytes(1 << 20), 9, wbits=31) * 512
    assert len(bomb) < 600_000
    inflated = 0
    with pytest.raises(errors.MessageTooLarge):
        for chunk in iter_decompressed(Compression.GZIP, bomb, 8 << 20):
            inflated += len(chunk)
    assert inflated <= 8 << 20


def test_a_raw_snappy_block_declaring_too_much_is_refused_before_inflating() -> None:
    block = bytes(cramjam.snappy.compress_raw(bytes(4 << 20)))
    with pytest.raises(errors.MessageTooLarge):
        next(iter_decompressed(Compression.SNAPPY, block, 1 << 20))


def test_lz4_frames_with_linked_blocks_are_refused_as_kafka_refuses_them() -> None:
    linked = cramjam.lz4.Compressor(block_linked=True)
    linked.compress(bytes(range(256)) * 1000)
    frame = bytes(linked.finish())
    with pytest.raises(errors.CorruptMessage, match="linked blocks"):
        list(iter_decompressed(Compression.LZ4, frame, 1 << 30))


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_streamed_decompression_of_a_truncated_stream_never_passes_silently(
    codec: Compression,
) -> None:
    payload = bytes(range(256)) * 300
    compressed = compress(codec, payload)
    for cut in range(len(compressed)):
        try:
            output = b"".join(iter_decompressed(codec, compressed[:cut], 1 << 30))
        except errors.CorruptMessage:
            continue
        # Some prefixes are whole streams (xerial: whole blocks); then they are shorter.
        assert payload.startswith(output) and len(output) < len(payload)


# -- ProducedRecordsCheck: the whole check -------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_well_formed_batches_pass(codec: Compression) -> None:
    inputs = [RecordInput(b"k%d" % i, bytes(size)) for i, size in enumerate(VALUE_SIZES)]
    check(build_batch(inputs, compression=codec), keys_required=True)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("declared", [1, 2, 4, 5])
def test_a_count_that_disagrees_with_the_records_is_invalid_record(
    codec: Compression, declared: int
) -> None:
    section = section_of([10, 20, 30])
    with pytest.raises(errors.InvalidRecord):
        check(batch_around(section, declared, codec))


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_undecompressable_records_are_invalid_record(codec: Compression) -> None:
    good = compress(codec, section_of([10, 20]))
    damaged = good[: len(good) // 2] + bytes(len(good) - len(good) // 2)
    for payload in (b"", b"\xff" * 40, good[:-3], damaged):
        with pytest.raises(errors.InvalidRecord):
            check(batch_around(b"", 2, codec, payload=payload))


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_compressed_offset_deltas_must_count_from_zero(codec: Compression) -> None:
    """Kafka rewrites such a batch; Sluice, which stores batches untouched, refuses it."""
    section = encode_records(Record(delta, 0, b"k", b"v", ()) for delta in (0, 2, 3))
    with pytest.raises(errors.InvalidRecord, match="offset delta"):
        check(batch_around(section, 3, codec))
    check(batch_around(section, 3))  # uncompressed: Kafka does not look, nor does Sluice


def test_keyless_records_are_listed_not_raised() -> None:
    section = section_of([1] * 300, keyed=False)
    records_check = check(batch_around(section, 300, Compression.ZSTD), keys_required=True)
    assert records_check.keyless_records == 300
    assert records_check.keyless_record_indexes == list(range(RECORD_ERRORS_PER_PARTITION_MAX))


def test_decompressed_limit_follows_max_message_bytes() -> None:
    assert decompressed_bytes_max(1000) == PRODUCED_RECORDS_EXPANSION_MAX * 1000
    assert decompressed_bytes_max(MAX_MESSAGE_BYTES) == 64 * MAX_MESSAGE_BYTES
    assert decompressed_bytes_max(100 << 20) == 128 << 20  # what a Sluice consumer inflates


def zigzag_varint(value: int) -> bytes:
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


def one_huge_record_gzip_bomb(value_bytes: int) -> bytes:
    """A gzip records section holding one record whose value is ``value_bytes`` zeros,
    as concatenated members of 1 MiB each (fast to build, about 1 KB per MiB)."""
    # attributes, timestamp delta 0, offset delta 0, null key, value length
    before_value = b"\x00\x00\x00\x01" + zigzag_varint(value_bytes)
    head = zigzag_varint(len(before_value) + value_bytes + 1) + before_value
    zeros_member = zlib.compress(bytes(1 << 20), 9, wbits=31)
    whole, rest = divmod(value_bytes, 1 << 20)
    return (
        zlib.compress(head, wbits=31)
        + zeros_member * whole
        + zlib.compress(bytes(rest) + b"\x00", wbits=31)  # the rest, no headers
    )


def test_a_bomb_is_refused_with_message_too_large_after_inflating_only_the_limit() -> None:
    max_message_bytes = 100_000  # inflating at most 6.4 MB
    section_payload = one_huge_record_gzip_bomb(512 << 20)
    assert len(section_payload) < 600_000
    batch = batch_around(b"", 1, Compression.GZIP, payload=section_payload)
    header = validate_produced(batch, 1 << 20)
    records_check = ProducedRecordsCheck(batch, header, max_message_bytes=max_message_bytes)
    started = time.process_time()
    with pytest.raises(errors.MessageTooLarge, match=str(decompressed_bytes_max(100_000))):
        records_check.advance()
    # A sanity bound, not a benchmark: inflating all 512 MiB would take many seconds.
    assert time.process_time() - started < 5


def test_the_same_bomb_within_the_limit_passes() -> None:
    section_payload = one_huge_record_gzip_bomb(3 << 20)
    check(batch_around(b"", 1, Compression.GZIP, payload=section_payload))


def test_a_batch_advanced_with_a_budget_finishes_later() -> None:
    inputs = [RecordInput(b"k", bytes(1000)) for _ in range(3000)]
    batch = build_batch(inputs, compression=Compression.LZ4)
    records_check = ProducedRecordsCheck(
        batch, parse_header(batch), max_message_bytes=MAX_MESSAGE_BYTES
    )
    steps = 1
    while not records_check.advance(256 * 1024):
        steps += 1
    assert steps > 5 and records_check.done
    assert records_check.advance(1)  # done stays done
