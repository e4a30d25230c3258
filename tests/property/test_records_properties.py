"""Property tests for record batches: whatever records go in come back out, through every
codec; and no input, however broken, makes a decoder raise anything but our errors.

Failures print the Hypothesis seed and the shrunk example that reproduces them.
"""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.common import errors
from sluice.protocol.records import (
    HEADER_BYTES,
    Compression,
    Record,
    RecordInput,
    build_batch,
    decode_batch,
    decode_batches,
    decode_records,
    decompress,
    encode_records,
    parse_header,
    validate_produced,
)
from sluice.protocol.records.produced import ProducedRecordsCheck
from sluice.protocol.records.walk import tile_records

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TIMESTAMPS = st.integers(0, 2**50)
PAYLOADS = st.none() | st.binary(max_size=300)
HEADERS = st.lists(st.tuples(st.text(max_size=20), PAYLOADS), max_size=4)
CODECS = st.sampled_from(list(Compression))

record_inputs = st.builds(
    RecordInput,
    key=PAYLOADS,
    value=PAYLOADS,
    headers=HEADERS,
    timestamp_ms=st.none() | TIMESTAMPS,
)
records = st.builds(
    Record,
    offset_delta=INT32,
    timestamp_delta=INT64,
    key=PAYLOADS,
    value=PAYLOADS,
    headers=HEADERS.map(tuple),
)

SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def produced_check(batch: bytes, *, keys_required: bool = False) -> ProducedRecordsCheck:
    """The produce-time records check of ``batch``, run to its end (it raises on a
    defect)."""
    check = ProducedRecordsCheck(
        batch, parse_header(batch), max_message_bytes=1 << 20, keys_required=keys_required
    )
    check.advance()
    return check


@SETTINGS
@given(
    inputs=st.lists(record_inputs, min_size=1, max_size=30),
    codec=CODECS,
    base_offset=st.integers(0, 2**62),
    base_timestamp_ms=st.none() | TIMESTAMPS,
    producer_id=st.integers(-1, 2**62),
    base_sequence=st.integers(-1, 2**31 - 1),
)
def test_build_decode_round_trip(
    inputs: list[RecordInput],
    codec: Compression,
    base_offset: int,
    base_timestamp_ms: int | None,
    producer_id: int,
    base_sequence: int,
) -> None:
    built = build_batch(
        inputs,
        base_offset=base_offset,
        compression=codec,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=base_sequence,
        base_timestamp_ms=base_timestamp_ms,
    )
    header = parse_header(built)
    if base_offset == 0 and (producer_id < 0 or base_sequence >= 0):
        # What a client may produce (Kafka's rules): base offset 0, and a sequence
        # whenever there is a producer id.
        assert validate_produced(built, len(built)) == header
        assert produced_check(built).done
    assert header.compression is codec
    assert header.records_count == len(inputs)
    decoded = decode_batch(built)
    assert decoded.header == header
    base = header.base_timestamp
    expected_timestamps = [base if i.timestamp_ms is None else i.timestamp_ms for i in inputs]
    assert header.max_timestamp == max(expected_timestamps)
    assert [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in decoded.records] == [
        (base_offset + n, timestamp, i.key, i.value, tuple(i.headers))
        for n, (i, timestamp) in enumerate(zip(inputs, expected_timestamps, strict=True))
    ]


@SETTINGS
@given(st.lists(records, max_size=30))
def test_records_round_trip(items: list[Record]) -> None:
    assert decode_records(encode_records(items), len(items)) == items


@SETTINGS
@given(st.lists(records, min_size=1, max_size=10), st.data())
def test_damaged_records_sections_raise_only_corrupt_message(
    items: list[Record], data: st.DataObject
) -> None:
    section = bytearray(encode_records(items))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(section) - 1))
        section[index] = data.draw(st.integers(0, 255))
    count = data.draw(st.sampled_from([len(items), len(items) - 1, len(items) + 1]))
    try:
        decode_records(bytes(section), count)
    except errors.CorruptMessage:
        pass


@SETTINGS
@given(st.binary(max_size=400), st.integers(-5, 100))
def test_random_bytes_into_decode_records(data: bytes, count: int) -> None:
    try:
        decode_records(data, count)
    except errors.CorruptMessage:
        pass


def _header_prefix(payload: bytes, attributes: int, count: int) -> bytes:
    """A plausible batch header in front of arbitrary bytes, so fuzzing gets past the
    header checks into the codecs and the record decoder."""
    return (
        struct.pack(
            ">qiibIhiqqqhii",
            0,
            49 + len(payload),
            0,
            2,
            0,
            attributes,
            max(count - 1, 0),
            0,
            0,
            -1,
            -1,
            -1,
            count,
        )
        + payload
    )


@SETTINGS
@given(st.binary(max_size=400), st.integers(0, 0x7F), st.integers(-2, 50))
def test_random_payload_behind_a_good_header(payload: bytes, attributes: int, count: int) -> None:
    buffer = _header_prefix(payload, attributes, count)
    for verify_crc in (True, False):
        try:
            decode_batch(buffer, verify_crc=verify_crc)
        except errors.KafkaError:
            pass
    try:
        validate_produced(buffer, 1 << 20)
    except errors.KafkaError:
        pass


@SETTINGS
@given(st.binary(max_size=600))
def test_random_bytes_into_batch_decoders(data: bytes) -> None:
    for decode in (
        lambda: decode_batch(data),
        lambda: decode_batch(data, verify_crc=False),
        lambda: list(decode_batches(data, verify_crc=False)),
        lambda: validate_produced(data, 1 << 20),
        lambda: parse_header(data),
    ):
        try:
            decode()
        except errors.KafkaError:
            pass


@SETTINGS
@given(CODECS, st.binary(max_size=400))
def test_random_bytes_into_decompress(codec: Compression, data: bytes) -> None:
    try:
        decompress(codec, data, max_bytes=1 << 20)
    except errors.CorruptMessage:
        pass


@SETTINGS
@given(st.lists(record_inputs, min_size=1, max_size=10), CODECS, st.data())
def test_damaged_batches_raise_only_our_errors(
    inputs: list[RecordInput], codec: Compression, data: st.DataObject
) -> None:
    built = bytearray(build_batch(inputs, compression=codec))
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(built) - 1))
        built[index] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(built)))
    for candidate in (bytes(built), bytes(built[:cut])):
        for verify_crc in (True, False):
            try:
                decode_batch(candidate, verify_crc=verify_crc)
            except errors.KafkaError:
                pass


@SETTINGS
@given(st.lists(record_inputs, min_size=1, max_size=30), CODECS, st.booleans())
def test_every_well_formed_batch_passes_the_produce_check(
    inputs: list[RecordInput], codec: Compression, keys_required: bool
) -> None:
    built = build_batch(inputs, compression=codec)
    check = produced_check(built, keys_required=keys_required)
    keyless = [index for index, record in enumerate(inputs) if record.key is None]
    assert check.keyless_record_indexes == (keyless if keys_required else [])


@SETTINGS
@given(st.lists(record_inputs, min_size=1, max_size=10), CODECS, st.booleans(), st.data())
def test_damaged_batches_fail_the_produce_check_only_with_our_errors(
    inputs: list[RecordInput], codec: Compression, keys_required: bool, data: st.DataObject
) -> None:
    """Damage inside the records section (past the header, whose checks come first):
    the check passes or raises INVALID_RECORD / MESSAGE_TOO_LARGE, nothing else. An
    uncompressed section it passes has records whose lengths tile it exactly, so the
    decoder meets exactly records_count records (it may still find a record's inside
    broken, which the walk does not read)."""
    built = bytearray(build_batch(inputs, compression=codec))
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(HEADER_BYTES, len(built) - 1))
        built[index] = data.draw(st.integers(0, 255))
    try:
        produced_check(bytes(built), keys_required=keys_required)
    except (errors.InvalidRecord, errors.MessageTooLarge):
        return
    try:
        records = decode_batch(bytes(built), verify_crc=False).records
    except errors.CorruptMessage:
        return
    assert len(records) == len(inputs)


@SETTINGS
@given(st.lists(records, min_size=1, max_size=30), st.data())
def test_the_length_walk_accepts_whatever_the_decoder_reads(
    items: list[Record], data: st.DataObject
) -> None:
    """The walk is never stricter than the decoder on an uncompressed section: any
    section (damaged or not) that decodes into exactly ``count`` records passes it."""
    section = bytearray(encode_records(items))
    for _ in range(data.draw(st.integers(0, 3))):
        index = data.draw(st.integers(0, len(section) - 1))
        section[index] = data.draw(st.integers(0, 255))
    count = data.draw(st.sampled_from([len(items), len(items) - 1, len(items) + 1]))
    try:
        decode_records(bytes(section), count)
    except errors.CorruptMessage:
        return
    batch = _header_prefix(bytes(section), 0, count)
    produced_check(batch)


def reference_tiling(data: bytes, position: int, count: int) -> int | None:
    """The plainest walk by lengths: None where the records do not fit."""
    for _ in range(count):
        unsigned = shift = 0
        while True:
            if position >= len(data) or shift > 28:
                return None
            byte = data[position]
            position += 1
            unsigned |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        size = (unsigned >> 1) ^ -(unsigned & 1)
        if size < 6:
            return None
        position += size
    return position if position <= len(data) else None


@SETTINGS
@given(
    st.lists(st.sampled_from([0, 1, 56, 57, 58, 100, 8200]), min_size=1, max_size=200),
    st.data(),
)
def test_tiling_with_runs_matches_the_plain_walk(
    value_sizes: list[int], data: st.DataObject
) -> None:
    """Records of few distinct sizes make long runs, which the walk checks in slices:
    its verdict must be the plain walk's, damaged or not."""
    section = bytearray(encode_records(Record(0, 0, None, bytes(size), ()) for size in value_sizes))
    for _ in range(data.draw(st.integers(0, 2))):
        index = data.draw(st.integers(0, len(section) - 1))
        section[index] = data.draw(st.integers(0, 255))
    count = data.draw(
        st.sampled_from([len(value_sizes), len(value_sizes) - 1, len(value_sizes) + 1])
    )
    expected = reference_tiling(bytes(section), 0, count)
    try:
        walked: int | None = tile_records(bytes(section), 0, count)
    except errors.InvalidRecord:
        walked = None
    if walked is not None and walked > len(section):
        walked = None  # the caller's end check refuses it
    assert walked == expected
